"""Vulkan timeline semaphores exported as OPAQUE_FD (``vk_timeline_opaque_fd``), imported into
CUDA. They are waited and signalled on the GPU, in a CUDA session's stream, never on the host."""

from __future__ import annotations

import os

from fenceline import _native
from fenceline.errors import InvalidArgument, Unsupported
from fenceline.interop.capabilities import can_import_fence
from fenceline.interop.cuda_memory import cuda_device

VK_FENCE_TYPES: tuple[str, ...] = ("vk_timeline_opaque_fd",)


class VkFenceImport:
    """``value`` is the highest value the service has enqueued a signal of, starting at the
    value the renderer stated at import (``current_value``): CUDA cannot read an imported
    semaphore's counter, and a signal sets the counter to its value, so the service signals only
    above it and never moves the fence backwards. ``close()`` destroys the import."""

    def __init__(
        self, kind: str, handle: _native.CudaSemaphore, device: _native.CudaDevice,
        current_value: int = 0,
    ) -> None:
        self.kind = kind
        self.handle = handle
        self.cuda = device
        self.name = ""
        self.enqueued_signal = current_value

    @property
    def device(self) -> str:
        return f"cuda:{self.cuda.ordinal}"

    @property
    def value(self) -> int:
        return self.enqueued_signal

    @property
    def status(self) -> int:
        return 0

    def wait(self, value: int, timeout_ns: int, spin_ns: int) -> None:
        raise Unsupported(
            "a vk_timeline_opaque_fd fence is waited on the GPU: use it with GPU memory "
            "(opaque_fd or cuda_ipc) in a CUDA session"
        )

    def signal(self, value: int) -> None:
        self.wait(value, 0, 0)

    def close(self) -> None:
        self.handle.close()


def import_vk_fence(
    kind: str, *, fd: int | None, device_uuid: str | None, current_value: int = 0
) -> VkFenceImport:
    """A received ``fd`` is owned from here on, also when this raises."""
    try:
        if not can_import_fence(kind):
            raise Unsupported(
                f"fence_type {kind!r} cannot be imported on this machine: "
                f"{_native.cuda_unavailable_reason() or 'no CUDA backend'}"
            )
        if fd is None:
            raise InvalidArgument(f"a {kind} fence is an fd: send it over the IPC socket")
        device = cuda_device(device_uuid)
        owned, fd = fd, None
        return VkFenceImport(
            kind, _native.CudaSemaphore.import_timeline_fd(device, owned), device, current_value
        )
    finally:
        if fd is not None:
            os.close(fd)
