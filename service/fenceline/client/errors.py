"""Client-side errors: a tree of their own, apart from the service's exceptions. Everything
the clients raise on purpose is a :class:`ClientError`."""

from __future__ import annotations

from typing import Any


class ClientError(Exception):
    """The client could not talk to the service (connection refused, closed, bad reply)."""


class ServiceError(ClientError):
    """The service answered with an error. ``code`` is the stable code (docs/ipc.md, "Error codes");
    ``status`` the HTTP status where the answer came over HTTP; ``details`` the error body's
    other fields (a timed-out run's ``queued``, ``wait_value`` and ``signal_value``)."""

    def __init__(
        self, message: str, code: str, status: int | None = None,
        details: dict[str, Any] | None = None,
    ) -> None:
        super().__init__(f"{message} [{code}]")
        self.message = message
        self.code = code
        self.status = status
        self.details: dict[str, Any] = dict(details or {})

    @property
    def queued(self) -> bool:
        """For ``timed_out``: the frame is still queued and will signal ``signal_value``."""
        return bool(self.details.get("queued", False))


class UsageError(ClientError, ValueError):
    """Fix the call: a bad argument, or an object used after ``close()``."""
