"""Bearer-token check and request body limit, as plain ASGI middleware (no per-route code)."""

from __future__ import annotations

import hmac
import json
from typing import Any

from starlette.types import ASGIApp, Message, Receive, Scope, Send

# Health probes answer without a token: orchestrators call them without credentials. /ui, the
# API docs pages, their assets and the OpenAPI document describe the service and hold no data
# ("/" only redirects to /ui);
# the calls they make (status JSON, "Try it out") need the token.
OPEN_PATHS = ("/", "/v2/health/live", "/v2/health/ready", "/ui", "/docs", "/redoc", "/openapi.json")
OPEN_PREFIXES = ("/docs/assets/",)


def is_open(path: str) -> bool:
    # No ``..`` under an open prefix: a path is never both open and routed elsewhere.
    return path in OPEN_PATHS or (path.startswith(OPEN_PREFIXES) and ".." not in path)


async def _reply(send: Send, status: int, message: str, code: str, headers: list[Any] | None = None) -> None:
    body = json.dumps({"error": message, "code": code}).encode()
    await send({
        "type": "http.response.start",
        "status": status,
        "headers": [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode()),
                    *(headers or [])],
    })
    await send({"type": "http.response.body", "body": body})


class BearerToken:
    def __init__(self, app: ASGIApp, token: str) -> None:
        self.app = app
        self.expected = f"Bearer {token}".encode()

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http" and not is_open(scope["path"]):
            got = dict(scope["headers"]).get(b"authorization", b"")
            if not hmac.compare_digest(got, self.expected):
                await _reply(send, 401, "this service needs Authorization: Bearer <token>",
                             "unauthenticated", [(b"www-authenticate", b"Bearer")])
                return
        await self.app(scope, receive, send)


# Bodies of the control routes (imports, sessions, region registration) are small JSON objects;
# FastAPI parses them on the event loop, so they stay far below the JSON limit of inference.
CONTROL_BODY_BYTES = 1 << 20


class BodyLimit:
    """``max_bytes`` for inference bodies (binary tensor data); every other route takes JSON
    only, of at most ``max_json_bytes`` and :data:`CONTROL_BODY_BYTES`."""

    def __init__(self, app: ASGIApp, max_bytes: int, max_json_bytes: int | None = None) -> None:
        self.app = app
        self.max_bytes = max_bytes
        json_bytes = max_bytes if max_json_bytes is None else min(max_bytes, max_json_bytes)
        self.max_json_bytes = min(json_bytes, CONTROL_BODY_BYTES)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        limit = self.max_bytes if scope["path"].endswith("/infer") else self.max_json_bytes
        length = dict(scope["headers"]).get(b"content-length")
        too_big = f"request body over the {limit}-byte limit"
        if length is not None and length.isdigit() and int(length) > limit:
            await _reply(send, 413, too_big, "payload_too_large")
            return
        seen = 0
        replied = False

        async def limited() -> Message:
            nonlocal seen, replied
            message = await receive()
            if message["type"] == "http.request" and not replied:
                seen += len(message.get("body", b""))
                if seen > limit:
                    # Answer now; the app then sees a disconnect and its own reply is dropped.
                    replied = True
                    await _reply(send, 413, too_big, "payload_too_large")
                    return {"type": "http.disconnect"}
            return message

        async def guarded_send(message: Message) -> None:
            if not replied:
                await send(message)

        await self.app(scope, limited, guarded_send)
