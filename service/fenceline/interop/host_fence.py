"""Host timeline fences (docs/fences.md): a shared page with a 64-bit value and a futex."""

from __future__ import annotations

import os

from fenceline import _native
from fenceline.errors import DeviceLost, InvalidArgument, TimedOut, Unavailable, Unsupported
from fenceline.interop.capabilities import FENCE_TYPES, can_import_fence, require_importable
from fenceline.interop.handles import close_nt_handles
from fenceline.waiting import Cancel, Flag

# Long waits sleep in slices of this length so a shutdown can end them.
CANCEL_SLICE_NS = 100_000_000


class FenceImport:
    """An imported timeline fence. ``close()`` unmaps it once no wait holds it."""

    def __init__(self, kind: str, handle: _native.HostFence, name: str) -> None:
        self.kind = kind
        self.handle = handle
        self.name = name

    @property
    def device(self) -> str:
        return "cpu"

    @property
    def value(self) -> int:
        return int(self.handle.value)

    @property
    def status(self) -> int:
        return int(self.handle.status)

    def wait(
        self, value: int, timeout_ns: int, spin_ns: int, cancel: Flag | None = None
    ) -> None:
        """Returns once the fence reaches ``value``; raises TimedOut, DeviceLost, or Unavailable
        when ``cancel`` is set meanwhile."""
        self.raise_for(self.wait_result(value, timeout_ns, spin_ns, cancel), value, timeout_ns)

    def wait_result(
        self,
        value: int,
        timeout_ns: int,
        spin_ns: int = 0,
        cancel: Flag | None = None,
    ) -> int:
        """The native WAIT_* result; raises Unavailable when ``cancel`` is set meanwhile."""
        first = min(timeout_ns, CANCEL_SLICE_NS) if cancel else timeout_ns
        r = int(self.handle.wait(value, first, spin_ns))
        if r == _native.WAIT_TIMED_OUT and cancel is not None and timeout_ns > CANCEL_SLICE_NS:
            left = timeout_ns - CANCEL_SLICE_NS
            while r == _native.WAIT_TIMED_OUT and left > 0:
                if cancel.is_set():
                    raise Unavailable(
                        cancel.reason() if isinstance(cancel, Cancel) else
                        "the service is shutting down"
                    )
                r = int(self.handle.wait(value, min(left, CANCEL_SLICE_NS), 0))
                left -= CANCEL_SLICE_NS
        return r

    def raise_for(self, result: int, value: int, timeout_ns: int) -> None:
        """Turns a native WAIT_* result for ``value`` into nothing (reached) or the error."""
        if result == _native.WAIT_REACHED:
            return
        if result == _native.WAIT_TIMED_OUT:
            raise TimedOut(
                f"fence did not reach {value} within {timeout_ns / 1e6:g} ms "
                f"(it is at {self.value})"
            )
        if result == _native.WAIT_ABANDONED:
            raise DeviceLost("the input fence was abandoned by its signaller")
        raise DeviceLost(f"the input fence reports an error at value {self.value}")

    def set_status(self, status: int) -> None:
        self.handle.set_status(status)

    def signal(self, value: int) -> None:
        self.handle.signal(value)

    def close(self) -> None:
        self.handle.close()


def import_fence(
    kind: str, *, name: str | None = None, fd: int | None = None, nt_handle: int | None = None,
    wake_handle: int | None = None,
) -> FenceImport:
    """Opens a renderer's fence. A received ``fd``, or the page's section and wake semaphore
    handles duplicated from the renderer (Windows), are owned from here on, also when this
    raises."""
    try:
        require_importable(kind, "fence_type", FENCE_TYPES, can_import_fence)
        if fd is not None:
            owned, fd = fd, None
            return FenceImport(kind, _native.HostFence.from_fd(owned), name or "")
        if nt_handle is not None or wake_handle is not None:
            if name:
                raise InvalidArgument("send exactly one of name or handle, not both")
            if nt_handle is None or wake_handle is None:
                raise InvalidArgument(
                    "a host_timeline fence by handle needs its page's section and its wake "
                    "semaphore"
                )
            if _native.PLATFORM != "win32":
                raise Unsupported("fence handles exist only on Windows")
            section, wake, nt_handle, wake_handle = nt_handle, wake_handle, None, None
            return FenceImport(kind, _native.HostFence.from_handles(section, wake), "")
        if not name:
            raise InvalidArgument(
                "a host_timeline fence needs its shared-memory name, or an fd over the IPC socket"
            )
        return FenceImport(kind, _native.HostFence.open_shm(name), name)
    finally:
        if fd is not None:
            os.close(fd)
        close_nt_handles(nt_handle, wake_handle)
