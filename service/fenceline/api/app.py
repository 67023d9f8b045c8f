"""The FastAPI application: routes, error handlers and /metrics over one runtime."""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence

from fastapi import FastAPI, Response
from fastapi.responses import RedirectResponse
from prometheus_client import CONTENT_TYPE_LATEST

from fenceline import __version__
from fenceline.api import docs, errors, interop, kserve, status, trace, triton_shm
from fenceline.api.request_ids import RequestIdMiddleware
from fenceline.api.security import BearerToken, BodyLimit
from fenceline.runtime.model_control import ModelControl
from fenceline.runtime.service import Runtime
from fenceline.triton.regions import InferenceSettings


def create_app(
    runtime: Runtime,
    inference: InferenceSettings | None = None,
    *,
    token: str | None = None,
    max_body_bytes: int = 256 << 20,
    max_json_bytes: int = 16 << 20,
    ready_checks: Sequence[Callable[[], str | None]] = (),
    model_control: ModelControl | None = None,
    trace_rights: trace.TraceRights | None = None,
) -> FastAPI:
    """``token``: when set, every route but the health probes and the pages that describe the
    service (/ui, /docs, /redoc, /openapi.json) needs ``Authorization: Bearer``.
    ``ready_checks``: the readiness probe answers 503 while any of them names a reason (the
    IPC socket cannot accept, the service takes no more imports), with that reason.
    ``trace_rights``: who may record a trace (api/trace.py; None: every client when ``token``
    is set, else none)."""
    app = FastAPI(
        title="fenceline",
        version=__version__,
        summary="Zero-copy inference for renderers: shared frames, timeline fences, ONNX Runtime.",
        docs_url=None,  # fenceline.api.docs serves both pages without a CDN
        redoc_url=None,
    )
    app.state.runtime = runtime
    app.state.ready = True
    app.state.ready_checks = tuple(ready_checks)
    app.state.token_required = bool(token)
    app.state.trace_rights = trace_rights or trace.TraceRights(open=bool(token))
    errors.install(app, runtime.metrics)
    kserve.install(app, runtime, inference, model_control)
    app.include_router(kserve.router)
    app.include_router(triton_shm.router)
    app.include_router(interop.router)
    app.include_router(status.router)
    app.include_router(trace.router)
    docs.install(app, token_required=bool(token))
    app.state.started = time.monotonic()


    @app.get("/", include_in_schema=False)
    def root() -> RedirectResponse:
        return RedirectResponse("/ui", status_code=307)  # the status page; it links /docs

    @app.get("/metrics", include_in_schema=False)
    def metrics() -> Response:
        loaded = [(m.name, m.version) for m in runtime.models]
        return Response(runtime.metrics.exposition(loaded), media_type=CONTENT_TYPE_LATEST)

    app.add_middleware(BodyLimit, max_bytes=max_body_bytes, max_json_bytes=max_json_bytes)
    if token:
        app.add_middleware(BearerToken, token=token)
    app.add_middleware(RequestIdMiddleware)  # outermost: 401s and 413s get an id and a log line
    return app
