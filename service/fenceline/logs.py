"""Service logging: text for a terminal, JSON lines for a log pipeline.

A record carries the ids known where it was made: ``request_id`` (HTTP: the client's
``X-Request-ID`` or one made up; IPC: the frame's request id), ``owner`` (``http`` or ``ipc:N``)
and ``session_id`` (its first 8 hex digits). They come from ``extra=`` at the call, or from the
context variables below, which the HTTP middleware and each IPC connection thread set.
"""

from __future__ import annotations

import json
import logging
import sys
import threading
import time
from collections.abc import Callable
from contextvars import ContextVar
from typing import Any, Literal

from fenceline.errors import InvalidArgument

LogFormat = Literal["text", "json"]
LOG_FORMATS: tuple[LogFormat, ...] = ("text", "json")

request_id: ContextVar[str | None] = ContextVar("fenceline_request_id", default=None)
owner: ContextVar[str | None] = ContextVar("fenceline_owner", default=None)
session_id: ContextVar[str | None] = ContextVar("fenceline_session_id", default=None)

# Who is on the other end (``uid N`` over IPC, the client address over HTTP): the key of the
# rate limit below. Not copied onto records: ``owner`` already names the client in each line.
peer: ContextVar[str | None] = ContextVar("fenceline_peer", default=None)

CONTEXT: dict[str, ContextVar[str | None]] = {
    "request_id": request_id,
    "owner": owner,
    "session_id": session_id,
}

# Attributes every LogRecord has; anything else on a record came from ``extra=``.
_STANDARD = set(vars(logging.LogRecord("", 0, "", 0, "", None, None))) | {
    "message", "asctime", "taskName",
    "color_message",  # uvicorn's ANSI-coloured copy of the message
}  # fmt: skip


class ContextFilter(logging.Filter):
    """Copies the context variables onto each record that did not get them from ``extra=``."""

    def filter(self, record: logging.LogRecord) -> bool:
        for name, var in CONTEXT.items():
            if getattr(record, name, None) is None:
                value = var.get()
                if value is not None:
                    setattr(record, name, value)
        return True


class RateLimit(logging.Filter):
    """At most ``burst`` lines per (logger, message template, peer) in each ``window_s``, so
    a client repeating one bad request cannot flood the log (or the disk behind it). The first
    line let through after a window of drops carries ``suppressed=N``, the count dropped."""

    def __init__(
        self,
        burst: int = 20,
        window_s: float = 10.0,
        max_keys: int = 4096,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        super().__init__()
        self.burst = burst
        self.window_s = window_s
        self.max_keys = max_keys
        self.clock = clock
        self._lock = threading.Lock()
        self._seen: dict[tuple[str, str, str | None], list[float]] = {}  # [start, passed, dropped]

    def filter(self, record: logging.LogRecord) -> bool:
        template = record.msg if isinstance(record.msg, str) else type(record.msg).__name__
        key = (record.name, template, peer.get())
        now = self.clock()
        with self._lock:
            state = self._seen.get(key)
            if state is None or now - state[0] >= self.window_s:
                if state is None and len(self._seen) >= self.max_keys:
                    self._forget(now)
                if state is not None and state[2]:
                    record.suppressed = int(state[2])
                self._seen[key] = [now, 1, 0]
                return True
            if state[1] < self.burst:
                state[1] += 1
                return True
            state[2] += 1
            return False

    def _forget(self, now: float) -> None:
        """Bounds the table: drops finished windows, or everything when all are live."""
        live = {k: v for k, v in self._seen.items() if now - v[0] < self.window_s}
        self._seen = live if len(live) < self.max_keys else {}


def _extras(record: logging.LogRecord) -> dict[str, Any]:
    return {
        k: v for k, v in vars(record).items()
        if k not in _STANDARD and not k.startswith("_") and v is not None
    }  # fmt: skip


class JsonFormatter(logging.Formatter):
    """One JSON object per line: ts (UTC, ISO 8601), level, logger, message, the ids, exc."""

    def format(self, record: logging.LogRecord) -> str:
        ts = time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(record.created))
        out: dict[str, Any] = {
            "ts": f"{ts}.{int(record.msecs):03d}Z",
            "level": record.levelname.lower(),
            "logger": record.name,
            "message": record.getMessage(),
        }
        out.update(_extras(record))
        if record.exc_info:
            out["exc"] = self.formatException(record.exc_info)
        elif record.exc_text:
            out["exc"] = record.exc_text
        return json.dumps(out, default=str, ensure_ascii=False)


class TextFormatter(logging.Formatter):
    """``time LEVEL logger: message [key=value ...]``."""

    def __init__(self) -> None:
        super().__init__("%(asctime)s %(levelname)s %(name)s: %(message)s")

    def formatMessage(self, record: logging.LogRecord) -> str:  # noqa: N802 (logging's name)
        line = super().formatMessage(record)
        extras = _extras(record)
        if extras:
            line += " [" + " ".join(f"{k}={v}" for k, v in extras.items()) + "]"
        return line


def configure(level: str = "info", fmt: LogFormat = "text") -> None:
    """Sends every logger (uvicorn's too) to stderr in ``fmt``, replacing earlier handlers."""
    if fmt not in LOG_FORMATS:
        raise InvalidArgument(f"--log-format is one of {', '.join(LOG_FORMATS)}")
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(JsonFormatter() if fmt == "json" else TextFormatter())
    handler.addFilter(ContextFilter())
    handler.addFilter(RateLimit())
    root = logging.getLogger()
    for old in list(root.handlers):
        root.removeHandler(old)
    root.addHandler(handler)
    root.setLevel(level.upper())
