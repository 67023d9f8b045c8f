"""What a renderer creates and shares: frame buffers in shared memory and host fences.

The creator of a named object unlinks it on ``close()``; the service never unlinks what it
imports. Both are context managers and ``close()`` is safe twice; arrays returned by
``array()`` keep the mapping alive after ``close()``.

Every error these raise is a :class:`fenceline.errors.FencelineError` with a stable ``code``,
the importer's own tree (the native code raises the same classes): ``invalid_argument`` for a
value to fix (also a use after ``close()``), ``conflict`` for a name that exists or a fence
value that would go backwards, ``resource_exhausted`` when the OS has no memory or descriptor
left, ``unsupported`` where the platform lacks the kind.
"""

from __future__ import annotations

import math
import numbers
import operator
import os
import secrets
from typing import Any, TypeVar

import numpy as np

from fenceline import _native
from fenceline.errors import InvalidArgument
from fenceline.waiting import AdaptiveSpin

U64_MAX = (1 << 64) - 1
I64_MAX = (1 << 63) - 1


def _integer(value: Any, what: str, low: int, high: int) -> int:
    """``value`` as an int in [low, high]; anything else is InvalidArgument naming ``what``
    (the native bindings would raise a TypeError listing their signatures)."""
    try:
        n = operator.index(value)
    except TypeError:
        raise InvalidArgument(f"{what} must be an integer, not {value!r}") from None
    if not low <= n <= high:
        raise InvalidArgument(f"{what} must be from {low} to {high}, not {n}")
    return n


def _timeout_ns(timeout_s: float | None) -> int:
    if timeout_s is None:
        return -1
    if not isinstance(timeout_s, numbers.Real):
        raise InvalidArgument(f"timeout_s must be a number of seconds or None, not {timeout_s!r}")
    t = float(timeout_s)
    if math.isnan(t) or t < 0:
        raise InvalidArgument(f"timeout_s must be 0 or more seconds (None: no limit), not {timeout_s!r}")
    return min(int(t * 1e9), I64_MAX) if math.isfinite(t) else -1


def _plain_dtype(dtype: Any) -> np.dtype[Any]:
    try:
        dt: np.dtype[Any] = np.dtype(dtype)
    except TypeError:
        raise InvalidArgument(f"{dtype!r} is not a numpy dtype") from None
    # Python objects are pointers: reading them from memory another process writes would crash.
    if dt.hasobject or dt.itemsize == 0:
        raise InvalidArgument(f"a shared frame holds plain numbers, not dtype {dt}")
    return dt


def _fresh_name(prefix: str) -> str:
    # Windows: a section in this session's namespace (docs/windows.md); POSIX: /dev/shm.
    head = "Local\\" if _native.PLATFORM == "win32" else "/"
    return f"{head}{prefix}-{os.getpid()}-{secrets.token_hex(4)}"


_C = TypeVar("_C", bound="_Created")


class _Created:
    """What a renderer created: a native handle, and the name it unlinks when it has one."""

    name: str | None
    handle: Any
    kind = "object"

    def _live(self) -> Any:
        if self.handle.closed:
            raise InvalidArgument(f"{self.kind} is closed")
        return self.handle

    @property
    def fd(self) -> int:
        return int(self._live().fd)

    def close(self) -> None:
        if self.handle.closed:
            return
        if self.name is not None:
            self.handle.unlink()
        self.handle.close()

    def __enter__(self: _C) -> _C:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def _named(name: str | None, named: bool | None) -> bool:
    if name is not None:
        return True
    # Windows names by default: a name works over HTTP too, a handle only over the pipe.
    return named if named is not None else _native.PLATFORM == "win32"


class SharedFrame(_Created):
    """A shared-memory buffer: named (``/dev/shm``, on Windows a ``Local\\...`` section) when
    ``name`` or ``named=True`` is given, else anonymous: a memfd that travels as an fd over the
    IPC socket, or on Windows an unnamed section that travels as a handle over the named pipe.
    ``named`` left out: anonymous on Linux, named on Windows."""

    kind = "frame"

    def __init__(self, size: int, *, name: str | None = None, named: bool | None = None) -> None:
        size = _integer(size, "a frame's size in bytes", 1, I64_MAX)
        if name is not None and not isinstance(name, str):
            raise InvalidArgument(f"a frame's name is a string, not {name!r}")
        if _named(name, named):
            self.name = name or _fresh_name("fenceline-frame")
            self.handle = _native.HostMemory.create_shm(self.name, size)
        else:
            self.name = None
            self.handle = _native.HostMemory.create_memfd("fenceline-frame", size)
        self.size = size

    def array(self, dtype: Any, shape: list[int] | tuple[int, ...], offset: int = 0) -> np.ndarray:
        dt = _plain_dtype(dtype)
        try:
            dims = [operator.index(d) for d in shape]
        except TypeError:
            raise InvalidArgument(f"shape must be a sequence of integers, not {shape!r}") from None
        offset = _integer(offset, "offset", 0, U64_MAX)
        arr: np.ndarray = self._live().array(dt, dims, offset)
        return arr


class Fence(_Created):
    """A host timeline fence (docs/fences.md). Waits spin adaptively, then sleep on the futex
    (Windows: the fence's wake semaphore); ``max_spin_ns=0`` always sleeps. One waiting thread
    per Fence object. Named or anonymous as :class:`SharedFrame`; an anonymous Windows fence is
    an unnamed section and an unnamed wake semaphore, both sent as handles over the pipe."""

    kind = "fence"

    def __init__(
        self, *, name: str | None = None, named: bool | None = None, max_spin_ns: int = 100_000
    ) -> None:
        if name is not None and not isinstance(name, str):
            raise InvalidArgument(f"a fence's name is a string, not {name!r}")
        max_spin_ns = _integer(max_spin_ns, "max_spin_ns", 0, I64_MAX)
        if _named(name, named):
            self.name = name or _fresh_name("fenceline-fence")
            self.handle = _native.HostFence.create_shm(self.name)
        else:
            self.name = None
            self.handle = _native.HostFence.create_memfd("fenceline-fence")
        self._spin = AdaptiveSpin(max_spin_ns)

    @property
    def value(self) -> int:
        return int(self._live().value)

    @property
    def status(self) -> int:
        return int(self._live().status)

    def signal(self, value: int) -> None:
        """Sets the fence to ``value`` (0 to 2**64 - 1, above the current value: ``conflict``
        otherwise) and wakes the waiters it satisfies."""
        # A renderer's per-frame call: the native binding checks the value's range itself (its
        # TypeError becomes the plain message), so the frame pays one Python step.
        handle = self._live()
        try:
            handle.signal(value)
        except TypeError:
            _integer(value, "a fence value", 0, U64_MAX)
            raise

    def set_status(self, status: int) -> None:
        """0 live, 1 abandoned, 2 error (docs/fences.md); wakes every waiter."""
        self._live().set_status(_integer(status, "a fence status", 0, 2))

    def wait(self, value: int, timeout_s: float | None = None) -> bool:
        """True once the fence reaches ``value``; False on timeout, abandonment or error (tell
        them apart by ``value`` and ``status``). Spins adaptively within this process's spinner
        limit, then sleeps on the futex (fenceline.waiting)."""
        value = _integer(value, "a fence value", 0, U64_MAX)
        timeout_ns = _timeout_ns(timeout_s)
        return bool(self._spin.wait_fence(self._live(), value, timeout_ns) == _native.WAIT_REACHED)
