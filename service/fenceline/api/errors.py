"""The one table from error class to HTTP status, and the handlers that use it.

Every error body is ``{"error": "<message>", "code": "<stable_code>"}`` plus the error's
``details`` (a timed-out run's ``queued``, ``wait_value``, ``signal_value``); tritonclient reads
the ``error`` key, so nothing answers FastAPI's default ``{"detail": ...}``.
"""

from __future__ import annotations

import logging
from typing import Any

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from starlette.exceptions import HTTPException as StarletteHTTPException

from fenceline import errors
from fenceline.metrics import Metrics

log = logging.getLogger("fenceline.api")

STATUS: dict[type[errors.FencelineError], int] = {
    errors.InvalidArgument: 400,
    errors.NotFound: 404,
    errors.Conflict: 409,
    errors.InvalidRequest: 422,
    errors.ResourceExhausted: 429,
    errors.ModelError: 500,
    errors.Unsupported: 501,
    errors.DeviceLost: 503,
    errors.PermissionDenied: 403,
    errors.Unauthenticated: 401,
    errors.Unavailable: 503,
    errors.TimedOut: 504,
    errors.FencelineError: 500,
}

# The KServe routes answer as Triton does, which has no 409 or 422: a client mistake there is a
# 400 (Triton's INVALID_ARG and ALREADY_EXISTS), as tritonclient users and Triton's qa expect.
KSERVE_STATUS: dict[type[errors.FencelineError], int] = {
    errors.Conflict: 400,
    errors.InvalidRequest: 400,
}

HTTP_CODES: dict[int, str] = {
    400: "invalid_argument",
    401: "unauthenticated",
    404: "not_found",
    405: "method_not_allowed",
    413: "payload_too_large",
    415: "unsupported_media_type",
}


def status_of(exc: errors.FencelineError, transport: str = "http") -> int:
    for cls in type(exc).__mro__:
        if transport == "kserve" and cls in KSERVE_STATUS:
            return KSERVE_STATUS[cls]
        if cls in STATUS:
            return STATUS[cls]
    return 500


def error_response(
    status: int, message: str, code: str, details: dict[str, Any] | None = None
) -> JSONResponse:
    return JSONResponse({**(details or {}), "error": message, "code": code}, status_code=status)


def _validation_message(exc: RequestValidationError) -> str:
    parts = []
    for err in exc.errors()[:5]:
        loc = ".".join(str(p) for p in err.get("loc", ()) if p != "body")
        parts.append(f"{loc or 'body'}: {err.get('msg', 'invalid')}")
    return "invalid request: " + "; ".join(parts)


def install(app: FastAPI, metrics: Metrics) -> None:
    def transport_of(request: Request) -> str:
        return "kserve" if "/interop/" not in request.url.path else "http"

    @app.exception_handler(errors.FencelineError)
    async def fenceline_error(request: Request, exc: errors.FencelineError) -> JSONResponse:
        transport = transport_of(request)
        metrics.errors.labels(transport, exc.code).inc()
        return error_response(status_of(exc, transport), exc.message, exc.code, exc.details)

    @app.exception_handler(RequestValidationError)
    async def validation_error(request: Request, exc: RequestValidationError) -> JSONResponse:
        transport = transport_of(request)
        metrics.errors.labels(transport, errors.InvalidRequest.code).inc()
        status = KSERVE_STATUS[errors.InvalidRequest] if transport == "kserve" else 422
        return error_response(status, _validation_message(exc), errors.InvalidRequest.code)

    @app.exception_handler(StarletteHTTPException)
    async def http_error(request: Request, exc: StarletteHTTPException) -> JSONResponse:
        code = HTTP_CODES.get(exc.status_code, "http_error")
        metrics.errors.labels(transport_of(request), code).inc()
        message = exc.detail if isinstance(exc.detail, str) else "request failed"
        if exc.status_code == 404 and message == "Not Found":
            message = f"no route {request.method} {request.url.path}"
        return error_response(exc.status_code, message, code)

    @app.exception_handler(Exception)
    async def unexpected(request: Request, exc: Exception) -> JSONResponse:
        log.exception("unexpected error on %s %s", request.method, request.url.path)
        metrics.errors.labels(transport_of(request), "internal").inc()
        return error_response(500, "internal error; see the service log", "internal")
