"""Request ids for HTTP: taken from ``X-Request-ID`` (or made up), set for the logs of the
request, echoed in the response, and logged with the outcome of each request."""

from __future__ import annotations

import logging
import re
import secrets
import time
from typing import Any

from starlette.types import ASGIApp, Message, Receive, Scope, Send

from fenceline import logs

log = logging.getLogger("fenceline.http")

HEADER = b"x-request-id"
_VALID = re.compile(rb"[A-Za-z0-9._:-]{1,64}")
# Object ids are capabilities: logs keep their first 8 hex digits (as the status page does).
_OBJECT_PATH = re.compile(r"^(/v2/interop/(sessions|memory|fences)/)([0-9a-fA-F]{8})[0-9a-fA-F]*")


class RequestIdMiddleware:
    """Plain ASGI (no BaseHTTPMiddleware): it adds a few microseconds to a request, no task."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        rid = b""
        for name, value in scope["headers"]:
            if name == HEADER:
                rid = value if _VALID.fullmatch(value) else b""
                break
        rid_text = rid.decode() if rid else secrets.token_hex(8)
        path: str = scope["path"]
        m = _OBJECT_PATH.match(path)
        if m:
            path = m.expand(r"\1\3…") + path[m.end():]
        token = logs.request_id.set(rid_text)
        client = scope.get("client")
        peer_token = logs.peer.set(str(client[0]) if client else None)
        is_session = m is not None and m.group(2) == "sessions"
        sid_token = logs.session_id.set(m.group(3).lower()) if is_session and m else None
        status = 500
        start = time.perf_counter()

        async def send_with_id(message: Message) -> None:
            nonlocal status
            if message["type"] == "http.response.start":
                status = message["status"]
                message["headers"] = [*message.get("headers", ()), (HEADER, rid_text.encode())]
            await send(message)

        try:
            await self.app(scope, receive, send_with_id)
        finally:
            level = logging.WARNING if status >= 500 else logging.DEBUG
            if log.isEnabledFor(level):
                extra: dict[str, Any] = {
                    "method": scope["method"], "path": path, "status": status,
                    "duration_ms": round((time.perf_counter() - start) * 1e3, 3),
                }  # fmt: skip
                log.log(level, "%s %s %d", scope["method"], path, status, extra=extra)
            if sid_token is not None:
                logs.session_id.reset(sid_token)
            logs.peer.reset(peer_token)
            logs.request_id.reset(token)
