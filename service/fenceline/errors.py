"""The one exception tree of the service.

Each class is named by what the caller should do next and carries a stable ``code`` string.
Codes are append-only: a code, once shipped, keeps its meaning and its IPC number. The numbers
come from native/common/fenceline_wire.h (through ``fenceline._native``), the one list the C
client and the importer share; the HTTP status for each lives in :mod:`fenceline.api.errors`,
so each transport maps errors exactly once.
"""

from __future__ import annotations

from typing import Any, ClassVar

from fenceline import _native

IPC_CODES: dict[str, int] = _native.error_codes()


class FencelineError(Exception):
    """Base of every error the service raises on purpose. ``details`` are extra fields of the
    error body beside ``error`` and ``code`` (JSON values), on every transport."""

    code: ClassVar[str] = "internal"
    ipc_code: ClassVar[int] = IPC_CODES["internal"]

    def __init_subclass__(cls, **kwargs: Any) -> None:
        # The IPC number follows from the code, so a class cannot name one code and send
        # another's number; a code the header lacks fails at import, not on the wire.
        super().__init_subclass__(**kwargs)
        cls.ipc_code = IPC_CODES[cls.code]

    def __init__(self, message: str, details: dict[str, Any] | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.details: dict[str, Any] = dict(details or {})


class InvalidArgument(FencelineError):
    """Fix the request: a value is out of range, malformed or does not match the model."""

    code = "invalid_argument"


class NotFound(FencelineError):
    """The named model, memory, fence or session does not exist (for this client)."""

    code = "not_found"


class Conflict(FencelineError):
    """The object is in a state that forbids this: in use, already exists, value not above."""

    code = "conflict"


class Unsupported(FencelineError):
    """This build or machine cannot do it (a handle type, an execution provider)."""

    code = "unsupported"


class TimedOut(FencelineError):
    """The deadline passed before the fence reached the value. A run's details say whether the
    frame is still ``queued`` (docs/ipc.md, "When a run times out")."""

    code = "timed_out"


class ResourceExhausted(FencelineError):
    """A limit was reached; release something or retry later."""

    code = "resource_exhausted"


class DeviceLost(FencelineError):
    """The device or the peer behind a fence is gone (fence abandoned, GPU fault)."""

    code = "device_lost"


class InvalidRequest(FencelineError):
    """The request does not parse or lacks required fields (schema validation)."""

    code = "invalid_request"


class ModelError(FencelineError):
    """The model failed while running this input."""

    code = "model_error"


class PermissionDenied(FencelineError):
    """This peer or token may not use the service (IPC peer uid not allowed)."""

    code = "permission_denied"


class Unauthenticated(FencelineError):
    """Send the service's bearer token (``Authorization: Bearer ...``)."""

    code = "unauthenticated"


class Unavailable(FencelineError):
    """The service is shutting down; reconnect once it is back."""

    code = "unavailable"


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
