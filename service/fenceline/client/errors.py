"""Client-side errors: a tree of their own, apart from the service's exceptions. Everything
the clients raise on purpose is a :class:`ClientError`."""

from __future__ import annotations


class ClientError(Exception):
    """The client could not talk to the service (connection refused, closed, bad reply)."""


class ServiceError(ClientError):
    """The service answered with an error. ``code`` is the stable code (docs/errors.md);
    ``status`` the HTTP status where the answer came over HTTP."""

    def __init__(self, message: str, code: str, status: int | None = None) -> None:
        super().__init__(f"{message} [{code}]")
        self.message = message
        self.code = code
        self.status = status


class UsageError(ClientError, ValueError):
    """Fix the call: a bad argument, or an object used after ``close()``."""
