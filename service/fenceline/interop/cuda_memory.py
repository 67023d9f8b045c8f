"""GPU memory imports (docs/gpu.md): a Vulkan allocation exported as an OPAQUE_FD
(``opaque_fd``) or another process's CUDA allocation by its cudaIpcMemHandle (``cuda_ipc``),
mapped into CUDA by the native importer. The service never maps these on the CPU."""

from __future__ import annotations

import os
from dataclasses import dataclass

from fenceline import _native
from fenceline.errors import InvalidArgument, Unsupported
from fenceline.interop.capabilities import MEMORY_TYPES, can_import_memory
from fenceline.interop.datatypes import Datatype, ViewWindow
from fenceline.interop.devices import inventory, select_device
from fenceline.interop.handles import Access, ImportedRegion

CUDA_MEMORY_TYPES: tuple[str, ...] = ("opaque_fd", "cuda_ipc")
IPC_HANDLE_BYTES = 64


def parse_uuid(text: str | None, what: str = "device_uuid") -> bytes:
    """A device UUID as 32 hex digits, dashes allowed (VkPhysicalDeviceIDProperties.deviceUUID)."""
    if not text:
        raise InvalidArgument(
            f"{what} is required: the renderer's VkPhysicalDeviceIDProperties.deviceUUID as 32 hex "
            "digits, so the service imports on the same GPU"
        )
    try:
        raw = bytes.fromhex(text.replace("-", ""))
    except ValueError:
        raw = b""
    if len(raw) != 16:
        raise InvalidArgument(f"{what} {text!r} is not 16 bytes of hex")
    return raw


def cuda_device(device_uuid: str | None = None, device_id: int | None = None) -> _native.CudaDevice:
    """The CUDA device with the renderer's UUID (else with the ordinal ``device_id``), chosen by
    interop/devices.py over the devices here, with its primary context retained."""
    if not device_uuid and device_id is None:
        parse_uuid(None)
    uuid = parse_uuid(device_uuid) if device_uuid else None
    record = select_device(inventory(), uuid=uuid, ordinal=device_id)
    return _native.CudaDevice.by_ordinal(record.ordinal)


@dataclass(frozen=True)
class CudaTensorBinding(ViewWindow):
    """A bounds-checked typed window into device memory; it keeps the import alive."""

    memory: CudaMemoryImport
    datatype: Datatype
    view: _native.CudaTensorView


class CudaMemoryImport(ImportedRegion):
    """Device memory mapped into CUDA once. ``close()`` drops this object's hold; views keep the
    mapping until they are gone too, then the mapped pointer is freed, then the import."""

    handle: _native.CudaMemory

    def __init__(
        self, kind: str, handle: _native.CudaMemory, access: Access, offset_bytes: int, name: str
    ) -> None:
        super().__init__(kind, handle, access, offset_bytes, name)
        self.cuda = handle.device

    @property
    def device(self) -> str:
        return f"cuda:{self.cuda.ordinal}"

    def view(
        self, offset_bytes: int, dt: Datatype, shape: list[int], *, need_write: bool
    ) -> CudaTensorBinding:
        if need_write and self.access != "read_write":
            raise InvalidArgument("the memory was imported read_only; outputs need read_write")
        view = _native.CudaTensorView(self.handle, offset_bytes, dt.size, shape)
        return CudaTensorBinding(self, dt, view)


def import_cuda_memory(
    kind: str,
    *,
    fd: int | None = None,
    size_bytes: int = 0,
    offset_bytes: int = 0,
    access: Access = "read_write",
    allocation_size_bytes: int = 0,
    dedicated: bool = False,
    device_uuid: str | None = None,
    device_id: int | None = None,
    ipc_handle: str | None = None,
    name: str | None = None,
) -> CudaMemoryImport:
    """Imports GPU memory. A received ``fd`` is owned from here on, also when this raises (CUDA
    owns it once the import succeeds)."""
    try:
        if kind not in CUDA_MEMORY_TYPES or kind not in MEMORY_TYPES:
            raise InvalidArgument(f"{kind!r} is not a GPU memory handle type")
        if not can_import_memory(kind):
            raise Unsupported(
                f"memory handle_type {kind!r} cannot be imported on this machine: "
                f"{_native.cuda_unavailable_reason() or 'no CUDA backend'}"
            )
        if kind == "opaque_fd":
            if fd is None:
                raise InvalidArgument("opaque_fd memory is an fd: send it over the IPC socket")
            device = cuda_device(device_uuid, None if device_uuid else device_id)
            owned, fd = fd, None
            handle = _native.CudaMemory.import_opaque_fd(
                device, owned, allocation_size_bytes, offset_bytes, size_bytes, dedicated
            )
            return CudaMemoryImport(kind, handle, access, offset_bytes, name or "")
        if fd is not None:
            raise InvalidArgument("cuda_ipc memory is named by its ipc_handle; send no fd")
        try:
            raw = bytes.fromhex(ipc_handle or "")
        except ValueError:
            raw = b""
        if len(raw) != IPC_HANDLE_BYTES:
            raise InvalidArgument(
                f"cuda_ipc needs ipc_handle: the {IPC_HANDLE_BYTES}-byte cudaIpcMemHandle_t as hex"
            )
        if offset_bytes:
            raise InvalidArgument("cuda_ipc memory starts at its allocation; use view offsets")
        if device_id is None and not device_uuid:
            device_id = 0
        device = cuda_device(device_uuid, device_id)
        handle = _native.CudaMemory.open_ipc(device, raw, size_bytes)
        return CudaMemoryImport(kind, handle, access, 0, name or "")
    finally:
        if fd is not None:
            os.close(fd)
