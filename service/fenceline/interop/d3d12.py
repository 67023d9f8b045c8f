"""D3D12 heaps, committed resources and fences (docs/windows.md, "D3D12"), imported into CUDA by
the name given to ``ID3D12Device::CreateSharedHandle`` or by an NT handle received over the
Windows pipe, on the CUDA device whose LUID is the renderer's adapter LUID.

Every rule (which CUDA handle type, flags, sizes, names, which device) is decided by the native
importer's pure functions (``_native.d3d12_*``), tested on every platform; only Windows with an
NVIDIA driver runs the import itself. Elsewhere the kinds are reported ``False`` with the reason
and an import raises :class:`Unsupported` with it.
"""

from __future__ import annotations

import os

from fenceline import _native
from fenceline.errors import InvalidArgument, Unsupported
from fenceline.interop.cuda_memory import CudaMemoryImport
from fenceline.interop.handles import Access, close_nt_handles
from fenceline.interop.vk_fence import VkFenceImport

D3D12_MEMORY_TYPES: tuple[str, ...] = ("d3d12_heap", "d3d12_resource")
D3D12_FENCE_TYPES: tuple[str, ...] = ("d3d12_fence",)


def d3d12_unsupported_reason() -> str:
    """Why D3D12 kinds cannot be imported here ("" where they can)."""
    supported, reason = _native.d3d12_capability()
    return "" if supported else str(reason)


def _require_capability(what: str) -> None:
    reason = d3d12_unsupported_reason()
    if reason:
        raise Unsupported(f"{what} cannot be imported on this machine: {reason}")


def _luid(adapter_luid: int | None) -> int:
    if adapter_luid is None:
        raise InvalidArgument(
            "adapter_luid is required: the renderer's ID3D12Device::GetAdapterLuid() as one "
            "integer, (HighPart << 32) | LowPart, so the service imports on the same GPU"
        )
    if not 0 <= adapter_luid < 2**64:
        raise InvalidArgument(f"adapter_luid {adapter_luid} is not an unsigned 64-bit value")
    return adapter_luid


def _refuse_fd(fd: int | None) -> None:
    if fd is not None:
        os.close(fd)
        raise InvalidArgument(
            "D3D12 objects are named (name) or sent as NT handles over the Windows pipe, "
            "never as a file descriptor"
        )


def _adapter_device(kind: str, kinds: tuple[str, ...], what: str, field: str, fd: int | None,
                    adapter_luid: int | None) -> _native.CudaDevice:
    """What every D3D12 import checks first (a named or NT-handle object of one of ``kinds``,
    a machine that imports them): the CUDA device of the renderer's adapter."""
    _refuse_fd(fd)
    if kind not in kinds:
        raise InvalidArgument(f"{kind!r} is not a D3D12 {what} kind")
    _require_capability(f"{field} {kind!r}")
    return _native.CudaDevice.by_luid(_luid(adapter_luid))


class D3D12FenceImport(VkFenceImport):
    """A shared ID3D12Fence imported as a CUDA external semaphore: waited and signalled on the
    GPU in a CUDA session's stream (64-bit values, as a Vulkan timeline)."""

    def wait(self, value: int, timeout_ns: int, spin_ns: int) -> None:
        raise Unsupported(
            "a d3d12_fence is waited on the GPU: use it with d3d12_heap or d3d12_resource "
            "memory in a CUDA session"
        )


def import_d3d12_memory(
    kind: str,
    *,
    name: str | None = None,
    fd: int | None = None,
    nt_handle: int | None = None,
    allocation_size_bytes: int = 0,
    offset_bytes: int = 0,
    size_bytes: int = 0,
    access: Access = "read_write",
    dedicated: bool | None = None,
    adapter_luid: int | None = None,
) -> CudaMemoryImport:
    """Maps [offset_bytes, offset_bytes + size_bytes) of a heap or committed resource of
    ``allocation_size_bytes`` (size_bytes 0: to the end). A received ``nt_handle`` (or a stray
    ``fd``) is owned from here on, also when this raises."""
    try:
        device = _adapter_device(kind, D3D12_MEMORY_TYPES, "memory", "memory handle_type", fd,
                                 adapter_luid)
        owned, nt_handle = nt_handle, None
        handle = _native.CudaMemory.import_d3d12(
            device, kind, name=name, handle=owned, size=allocation_size_bytes,
            offset=offset_bytes, mapped_size=size_bytes, dedicated=dedicated,
        )
        return CudaMemoryImport(kind, handle, access, offset_bytes, name or "")
    finally:
        close_nt_handles(nt_handle)


def import_d3d12_fence(
    kind: str, *, name: str | None = None, fd: int | None = None,
    nt_handle: int | None = None, adapter_luid: int | None = None, current_value: int = 0,
) -> D3D12FenceImport:
    """A received ``nt_handle`` (or a stray ``fd``) is owned from here on, also when this raises.
    ``current_value``: the fence's value now, as the renderer states it (GetCompletedValue());
    the service's signals go above it."""
    try:
        device = _adapter_device(kind, D3D12_FENCE_TYPES, "fence", "fence_type", fd, adapter_luid)
        owned, nt_handle = nt_handle, None
        sem = _native.CudaSemaphore.import_d3d12_fence(device, name=name, handle=owned)
        fence = D3D12FenceImport(kind, sem, device, current_value)
        fence.name = name or ""
        return fence
    finally:
        close_nt_handles(nt_handle)
