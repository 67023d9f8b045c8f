"""``POST /v2/interop/trace``: records the service's per-frame trace for a bounded time or
number of frames and answers it as Chrome trace-event JSON (fenceline.trace, docs/tracing.md);
``fenceline trace`` calls it. ``GET`` says whether one records, ``DELETE`` ends it early."""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter, Request, Response
from pydantic import BaseModel, ConfigDict, Field

from fenceline import trace
from fenceline.runtime.service import Runtime

router = APIRouter(prefix="/v2/interop", tags=["interop"])


class TraceRequest(BaseModel):
    model_config = ConfigDict(extra="forbid")
    seconds: float = Field(default=trace.DEFAULT_SECONDS, description="longest recording (at most 60 s)")
    frames: int = Field(default=trace.DEFAULT_FRAMES,
                        description="stop once this many frames were received (at most 1,000,000)")


@router.post("/trace")
def post_trace(request: Request, body: TraceRequest | None = None) -> dict[str, Any]:
    """Records every session's frames until ``seconds`` pass or ``frames`` frames were
    received, whichever comes first; 409 while another trace records. The answer opens in
    Perfetto's UI and chrome://tracing."""
    rt: Runtime = request.app.state.runtime
    body = body or TraceRequest()
    limits = trace.Limits(body.seconds, body.frames)

    def sessions() -> list[tuple[str, str]]:
        return [(e.id, e.obj.model.name) for e in rt.snapshot()[2]]

    return trace.trace_service(limits, sessions, rt.closing)


@router.get("/trace")
def get_trace() -> dict[str, bool]:
    """Whether a trace records now."""
    return {"recording": trace.recording()}


@router.delete("/trace", status_code=204)
def delete_trace() -> Response:
    """Ends the recording in progress early: its POST answers with what it recorded. Nothing
    happens when none records."""
    trace.stop()
    return Response(status_code=204)
