"""``/v2/interop/...``: capabilities, memory and fence imports, sessions and runs.

Blocking work (fence waits, model runs, imports) runs in the threadpool: these handlers are plain
``def`` so they never block the event loop. A run is ``async`` only to watch its connection
meanwhile: a client that hangs up ends its run's fence wait, as over IPC.
"""

from __future__ import annotations

import asyncio
import threading
from typing import Any

from fastapi import APIRouter, Request, Response
from starlette.concurrency import run_in_threadpool

from fenceline.api.peers import http_caller
from fenceline.errors import InvalidArgument
from fenceline.protocol.schemas import (
    FenceImportRequest,
    MemoryImportRequest,
    RunRequest,
    RunResponse,
    SessionCreateRequest,
)
from fenceline.runtime.service import Runtime
from fenceline.waiting import Cancel

OWNER = "http"

router = APIRouter(prefix="/v2/interop", tags=["interop"])


def runtime(request: Request) -> Runtime:
    rt: Runtime = request.app.state.runtime
    return rt


@router.get("/capabilities")
def get_capabilities(request: Request) -> dict[str, Any]:
    return runtime(request).capabilities()


@router.post("/memory", status_code=201)
def post_memory(body: MemoryImportRequest, request: Request) -> dict[str, Any]:
    if body.handle_type in ("host_fd", "opaque_fd"):
        raise InvalidArgument(
            f"{body.handle_type} memory is an fd: send it over the IPC socket (docs/ipc.md)"
        )
    _refuse_handles(body.handle_roles())
    return runtime(request).import_memory(
        OWNER, body.handle_type, name=body.name, size_bytes=body.size_bytes,
        offset_bytes=body.offset_bytes, access=body.access, caller=http_caller(request),
        **body.gpu_fields(),
    )


def _refuse_handles(handles: dict[str, tuple[int, str]]) -> None:
    if handles:
        raise InvalidArgument(
            "a handle value only means something in the renderer's process, which HTTP cannot "
            "identify: send it over the Windows named pipe (docs/windows.md), or send the name"
        )


@router.get("/memory/{id}")
def get_memory(id: str, request: Request) -> dict[str, Any]:
    return runtime(request).describe_memory(OWNER, id)


@router.delete("/memory/{id}", status_code=204)
def delete_memory(id: str, request: Request) -> Response:
    runtime(request).release_memory(OWNER, id)
    return Response(status_code=204)


@router.post("/fences", status_code=201)
def post_fence(body: FenceImportRequest, request: Request) -> dict[str, Any]:
    _refuse_handles(body.handle_roles())
    return runtime(request).import_fence(
        OWNER, body.fence_type, name=body.name, adapter_luid=body.adapter_luid,
        current_value=body.current_value, caller=http_caller(request),
    )


@router.get("/fences/{id}")
def get_fence(id: str, request: Request) -> dict[str, Any]:
    return runtime(request).describe_fence(OWNER, id)


@router.delete("/fences/{id}", status_code=204)
def delete_fence(id: str, request: Request) -> Response:
    runtime(request).release_fence(OWNER, id)
    return Response(status_code=204)


@router.post("/sessions", status_code=201)
def post_session(body: SessionCreateRequest, request: Request) -> dict[str, Any]:
    return runtime(request).create_session(
        OWNER, body.model, body.input_specs(), body.output_specs(), body.wait_fence,
        body.signal_fence, mode=body.mode, policy=body.policy, spin_us=body.spin_us,
        start=body.start,
    )


@router.get("/sessions/{id}")
def get_session(id: str, request: Request) -> dict[str, Any]:
    return runtime(request).describe_session(OWNER, id)


@router.delete("/sessions/{id}", status_code=204)
def delete_session(id: str, request: Request) -> Response:
    runtime(request).release_session(OWNER, id)
    return Response(status_code=204)


@router.post("/sessions/{id}/run")
async def post_run(id: str, body: RunRequest, request: Request) -> RunResponse:
    rt = runtime(request)
    gone = threading.Event()

    async def watch() -> None:
        # The body is read: the next message is the client's disconnect, if it comes.
        while (await request.receive())["type"] != "http.disconnect":
            pass
        gone.set()

    watcher = asyncio.create_task(watch())
    try:
        result = await run_in_threadpool(
            rt.run, OWNER, id, body.wait_value, body.signal_value, body.timeout_ms,
            cancel=Cancel(rt.closing, gone.is_set),
        )
    finally:
        watcher.cancel()
    return RunResponse(signal_value=result.signal_value, timings_us=result.timings_us())


@router.post("/sessions/{id}/start")
def post_start(id: str, request: Request) -> dict[str, Any]:
    """Starts or resumes a streaming session."""
    return runtime(request).start_session(OWNER, id)


@router.post("/sessions/{id}/pause")
def post_pause(id: str, request: Request) -> dict[str, Any]:
    """Pauses a streaming session once its frame in flight is signalled."""
    return runtime(request).pause_session(OWNER, id)


@router.post("/sessions/{id}/stop")
def post_stop(id: str, request: Request) -> dict[str, Any]:
    """Stops and releases a streaming session; answers its final description."""
    return runtime(request).stop_session(OWNER, id)
