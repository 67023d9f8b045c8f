"""What a renderer creates and shares: frame buffers in shared memory and host fences.

The creator of a named object unlinks it on ``close()``; the service never unlinks what it
imports. Both are context managers and ``close()`` is safe twice; arrays returned by
``array()`` keep the mapping alive after ``close()``.
"""

from __future__ import annotations

import os
import secrets
from typing import Any, TypeVar

import numpy as np

from fenceline import _native
from fenceline.waiting import AdaptiveSpin


def _fresh_name(prefix: str) -> str:
    # Windows: a section in this session's namespace (docs/windows.md); POSIX: /dev/shm.
    head = "Local\\" if _native.PLATFORM == "win32" else "/"
    return f"{head}{prefix}-{os.getpid()}-{secrets.token_hex(4)}"


_C = TypeVar("_C", bound="_Created")


class _Created:
    """What a renderer created: a native handle, and the name it unlinks when it has one."""

    name: str | None
    handle: Any

    @property
    def fd(self) -> int:
        return int(self.handle.fd)

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

    def __init__(self, size: int, *, name: str | None = None, named: bool | None = None) -> None:
        if _named(name, named):
            self.name = name or _fresh_name("fenceline-frame")
            self.handle = _native.HostMemory.create_shm(self.name, size)
        else:
            self.name = None
            self.handle = _native.HostMemory.create_memfd("fenceline-frame", size)
        self.size = size

    def array(self, dtype: Any, shape: list[int] | tuple[int, ...], offset: int = 0) -> np.ndarray:
        arr: np.ndarray = self.handle.array(np.dtype(dtype), list(shape), offset)
        return arr


class Fence(_Created):
    """A host timeline fence (docs/fences.md). Waits spin adaptively, then sleep on the futex
    (Windows: the fence's wake semaphore); ``max_spin_ns=0`` always sleeps. One waiting thread
    per Fence object. Named or anonymous as :class:`SharedFrame`; an anonymous Windows fence is
    an unnamed section and an unnamed wake semaphore, both sent as handles over the pipe."""

    def __init__(
        self, *, name: str | None = None, named: bool | None = None, max_spin_ns: int = 100_000
    ) -> None:
        if _named(name, named):
            self.name = name or _fresh_name("fenceline-fence")
            self.handle = _native.HostFence.create_shm(self.name)
        else:
            self.name = None
            self.handle = _native.HostFence.create_memfd("fenceline-fence")
        self._spin = AdaptiveSpin(max_spin_ns)

    @property
    def value(self) -> int:
        return int(self.handle.value)

    @property
    def status(self) -> int:
        return int(self.handle.status)

    def signal(self, value: int) -> None:
        self.handle.signal(value)

    def set_status(self, status: int) -> None:
        """0 live, 1 abandoned, 2 error (docs/fences.md); wakes every waiter."""
        self.handle.set_status(status)

    def wait(self, value: int, timeout_s: float | None = None) -> bool:
        """True once the fence reaches ``value``; False on timeout, abandonment or error (tell
        them apart by ``value`` and ``status``). Spins adaptively within this process's spinner
        limit, then sleeps on the futex (fenceline.waiting)."""
        timeout_ns = -1 if timeout_s is None else int(timeout_s * 1e9)
        return bool(self._spin.wait_fence(self.handle, value, timeout_ns) == _native.WAIT_REACHED)
