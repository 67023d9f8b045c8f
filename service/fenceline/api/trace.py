"""``POST /v2/interop/trace``: records the service's per-frame trace for a bounded time or
number of frames and answers it as Chrome trace-event JSON, streamed (fenceline.trace,
docs/tracing.md); ``fenceline trace`` calls it. ``GET`` says whether one records, ``DELETE``
ends it early.

A trace shows every user's sessions, so recording or ending one takes a client that may control
the service (:class:`TraceRights`)."""

from __future__ import annotations

import hmac
from dataclasses import dataclass
from pathlib import Path

from fastapi import APIRouter, Request, Response
from fastapi.responses import StreamingResponse
from pydantic import BaseModel, ConfigDict, Field

from fenceline import trace
from fenceline.errors import InvalidArgument, PermissionDenied
from fenceline.runtime.service import Runtime

router = APIRouter(prefix="/v2/interop", tags=["interop"])


@dataclass(frozen=True)
class TraceRights:
    """Who may record or end a trace over HTTP, and how many frames one may hold.

    ``open``: every client that reached the route (the service has ``--token-file``, which the
    middleware checked, or ``--http-trace``). Otherwise only one sending the control token
    (fenceline.ipc.control_token) as ``Authorization: Bearer``, which only the service's user
    can read: another local user cannot see or stop a trace of the first user's sessions."""

    open: bool = False
    control_token: str | None = None
    token_path: Path | None = None
    max_frames: int = trace.DEFAULT_MAX_FRAMES

    def check(self, request: Request) -> None:
        if self.open:
            return
        got = request.headers.get("authorization", "")
        if self.control_token and hmac.compare_digest(got.encode(),
                                                      f"Bearer {self.control_token}".encode()):
            return
        where = f"the control token in {self.token_path}" if self.token_path else "--token-file"
        raise PermissionDenied(
            "a trace shows every user's sessions: over HTTP it takes "
            f"{where} (readable by the service's user only; `fenceline trace` sends it), or "
            "a service started with --token-file or --http-trace"
        )


class TraceRequest(BaseModel):
    model_config = ConfigDict(extra="forbid")
    seconds: float = Field(default=trace.DEFAULT_SECONDS, description="longest recording (at most 60 s)")
    frames: int = Field(default=trace.DEFAULT_FRAMES,
                        description="stop once this many frames were received (at most the "
                        "service's --trace-max-frames)")


def _rights(request: Request) -> TraceRights:
    rights: TraceRights = request.app.state.trace_rights
    rights.check(request)
    return rights


@router.post("/trace")
def post_trace(request: Request, body: TraceRequest | None = None) -> StreamingResponse:
    """Records every session's frames until ``seconds`` pass or ``frames`` frames were
    received, whichever comes first; 409 while another trace records, 403 without the rights
    to. The answer, streamed, opens in Perfetto's UI and chrome://tracing."""
    rights = _rights(request)
    rt: Runtime = request.app.state.runtime
    body = body or TraceRequest()
    limits = trace.Limits(body.seconds, body.frames)
    if limits.frames > rights.max_frames:
        raise InvalidArgument(
            f"a trace of this service records at most {rights.max_frames} frames, not "
            f"{limits.frames} (its --trace-max-frames: ~1 KB of answer a frame)"
        )

    def sessions() -> list[tuple[str, str]]:
        return [(e.id, e.obj.model.name) for e in rt.snapshot()[2]]

    chunks = trace.trace_service(limits, sessions, rt.closing)
    return StreamingResponse(chunks, media_type="application/json")


@router.get("/trace")
def get_trace() -> dict[str, bool]:
    """Whether a trace records now."""
    return {"recording": trace.recording()}


@router.delete("/trace", status_code=204)
def delete_trace(request: Request) -> Response:
    """Ends the recording in progress early: its POST answers with what it recorded. Nothing
    happens when none records; 403 without the rights to record one."""
    _rights(request)
    trace.stop()
    return Response(status_code=204)
