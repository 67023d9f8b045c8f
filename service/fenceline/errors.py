"""The one exception tree of the service.

Each class is named by what the caller should do next and carries a stable ``code`` string.
Codes are append-only: a code, once shipped, keeps its meaning and its IPC number. The HTTP
status for each lives in :mod:`fenceline.api.errors`, the IPC number here (``ipc_code``), so each
transport maps errors exactly once.
"""

from __future__ import annotations

from typing import Any


class FencelineError(Exception):
    """Base of every error the service raises on purpose. ``details`` are extra fields of the
    error body beside ``error`` and ``code`` (JSON values), on every transport."""

    code = "internal"
    ipc_code = 1

    def __init__(self, message: str, details: dict[str, Any] | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.details: dict[str, Any] = dict(details or {})


class InvalidArgument(FencelineError):
    """Fix the request: a value is out of range, malformed or does not match the model."""

    code = "invalid_argument"
    ipc_code = 2


class NotFound(FencelineError):
    """The named model, memory, fence or session does not exist (for this client)."""

    code = "not_found"
    ipc_code = 3


class Conflict(FencelineError):
    """The object is in a state that forbids this: in use, already exists, value not above."""

    code = "conflict"
    ipc_code = 4


class Unsupported(FencelineError):
    """This build or machine cannot do it (a handle type, an execution provider)."""

    code = "unsupported"
    ipc_code = 5


class TimedOut(FencelineError):
    """The deadline passed before the fence reached the value. A run's details say whether the
    frame is still ``queued`` (docs/ipc.md, "When a run times out")."""

    code = "timed_out"
    ipc_code = 6


class ResourceExhausted(FencelineError):
    """A limit was reached; release something or retry later."""

    code = "resource_exhausted"
    ipc_code = 7


class DeviceLost(FencelineError):
    """The device or the peer behind a fence is gone (fence abandoned, GPU fault)."""

    code = "device_lost"
    ipc_code = 8


class InvalidRequest(FencelineError):
    """The request does not parse or lacks required fields (schema validation)."""

    code = "invalid_request"
    ipc_code = 9


class ModelError(FencelineError):
    """The model failed while running this input."""

    code = "model_error"
    ipc_code = 10


class PermissionDenied(FencelineError):
    """This peer or token may not use the service (IPC peer uid not allowed)."""

    code = "permission_denied"
    ipc_code = 11


class Unauthenticated(FencelineError):
    """Send the service's bearer token (``Authorization: Bearer ...``)."""

    code = "unauthenticated"
    ipc_code = 12


class Unavailable(FencelineError):
    """The service is shutting down; reconnect once it is back."""

    code = "unavailable"
    ipc_code = 13


ALL: tuple[type[FencelineError], ...] = (
    FencelineError,
    InvalidArgument,
    NotFound,
    Conflict,
    Unsupported,
    TimedOut,
    ResourceExhausted,
    DeviceLost,
    InvalidRequest,
    ModelError,
    PermissionDenied,
    Unauthenticated,
    Unavailable,
)
BY_IPC_CODE: dict[int, type[FencelineError]] = {cls.ipc_code: cls for cls in ALL}
BY_CODE: dict[str, type[FencelineError]] = {cls.code: cls for cls in ALL}
