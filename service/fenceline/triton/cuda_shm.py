"""Triton's CUDA shared-memory extension: named device allocations of a client process, given
by their cudaIpcMemHandle_t (``raw_handle.b64``), opened once at registration through the
native ``cuda_ipc`` importer and bound in place, as ``'cuda', device_id``, into the IOBinding
of a model on the CUDA execution provider.

System and CUDA regions share one namespace and one lock, as in Triton; a view holds the
opened handle, so a request keeps its region until it ends, also across an unregistration.
"""

from __future__ import annotations

import base64
import binascii
import functools
import logging
from dataclasses import dataclass
from typing import Any, ClassVar

from fenceline import _native
from fenceline.errors import (
    FencelineError,
    InvalidArgument,
    ResourceExhausted,
    Unsupported,
)
from fenceline.interop.capabilities import can_import_memory
from fenceline.interop.cuda_memory import IPC_HANDLE_BYTES, CudaMemoryImport, CudaTensorBinding
from fenceline.interop.datatypes import Datatype
from fenceline.interop.owners import SERVICE, Caller
from fenceline.runtime.models import Model
from fenceline.triton.regions import (
    Region,
    RegionTable,
    ShmRef,
    check_tensor_size,
    check_window,
    import_as,
)

log = logging.getLogger("fenceline.kserve")

MODEL_DEVICE = 0  # models on the CUDA execution provider run on the first device


@functools.cache
def cuda_backend_works() -> bool:
    """The native CUDA backend loaded, sees at least one device and imports cuda_ipc."""
    try:
        return bool(
            _native.cuda_available() and _native.cuda_devices() and can_import_memory("cuda_ipc")
        )
    except FencelineError:
        return False


def no_cuda() -> Unsupported:
    reason = _native.cuda_unavailable_reason() or "no CUDA device"
    return Unsupported(
        "CUDA shared memory is not available on this service: it needs fenceline's CUDA "
        f"backend and a GPU ({reason}); use system shared memory (/v2/systemsharedmemory) "
        "instead"
    )


def parse_raw_handle(raw_handle: Any) -> bytes:
    """``{"b64": "..."}``: the base64 of a 64-byte cudaIpcMemHandle_t, as
    ``tritonclient.utils.cuda_shared_memory.get_raw_handle`` makes it."""
    if not isinstance(raw_handle, dict) or not isinstance(raw_handle.get("b64"), str):
        raise InvalidArgument(
            "CUDA shared memory register request needs 'raw_handle' as {\"b64\": \"<base64 of "
            "the cudaIpcMemHandle_t>\"}"
        )
    try:
        raw = base64.b64decode(raw_handle["b64"], validate=True)
    except (binascii.Error, ValueError):
        raise InvalidArgument("'raw_handle.b64' is not valid base64") from None
    if len(raw) != IPC_HANDLE_BYTES:
        raise InvalidArgument(
            f"'raw_handle.b64' decodes to {len(raw)} bytes; a cudaIpcMemHandle_t is "
            f"{IPC_HANDLE_BYTES}"
        )
    return raw


def check_device_id(value: Any) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value < 2**31:
        raise InvalidArgument(f"device_id must be a CUDA device ordinal, not {value!r}")
    return value


@dataclass
class CudaRegion(Region):
    title: ClassVar[str] = "CUDA"

    device_id: int
    memory: CudaMemoryImport

    def status(self) -> dict[str, Any]:
        return {"name": self.name, "device_id": self.device_id, "byte_size": self.byte_size}


class CudaSharedMemory(RegionTable[CudaRegion]):
    """The CUDA regions, in the namespace they share with the system regions."""

    region_type = CudaRegion
    kind = "cuda"
    owner = "triton-cuda-shm"  # device memory has its own owner: it is not host mapping quota

    @property
    def available(self) -> bool:
        return cuda_backend_works()

    @property
    def enabled(self) -> bool:
        return self.available and self.settings.client_shared_memory

    def check_enabled(self) -> None:
        if not self.available:
            raise no_cuda()
        self._check_switched_on()

    def register(
        self, name: str, raw_handle: Any, device_id: Any, byte_size: Any,
        caller: Caller = SERVICE,
    ) -> None:
        self.check_enabled()
        byte_size, invalid = self._check_registration(name, byte_size)
        raw = parse_raw_handle(raw_handle)
        device_id = check_device_id(device_id)

        def import_memory() -> dict[str, Any]:
            try:
                return self.runtime.import_memory(
                    self.owner, "cuda_ipc", ipc_handle=raw.hex(), size_bytes=byte_size,
                    device_id=device_id,
                )
            except (Unsupported, ResourceExhausted):
                raise
            except FencelineError as e:  # a bad handle, an unknown device, past the allocation
                raise InvalidArgument(f"{invalid}: {e.message}") from None

        self._register(
            name, import_memory,
            lambda memory_id, memory: CudaRegion(
                name, byte_size, memory_id, device_id, import_as(memory, CudaMemoryImport)
            ),
            caller,
        )
        log.info("registered CUDA shm region %s: cuda:%d, %d bytes", name, device_id, byte_size)

    def view(
        self, model: Model, ref: ShmRef, dt: Datatype, shape: list[int], role: str, tensor: str
    ) -> CudaTensorBinding:
        """A typed device view at ``ref`` for one tensor of ``model``; it keeps the region
        open. Call with the shared lock held."""
        region = self.lookup(ref)
        if model.settings.execution_provider != "cuda":
            raise InvalidArgument(
                f"{role} '{tensor}' is in CUDA shared memory region '{ref.region}', but model "
                f"'{model.name}' runs on {model.settings.execution_provider}; CUDA shared memory "
                'needs a model with "execution_provider": "cuda" in its config.json (or use '
                "system shared memory)"
            )
        if region.device_id != MODEL_DEVICE:
            raise InvalidArgument(
                f"CUDA shared memory region '{ref.region}' is on cuda:{region.device_id}; model "
                f"'{model.name}' runs on cuda:{MODEL_DEVICE}"
            )
        check_window(ref, region.byte_size)
        check_tensor_size(ref, dt, shape, role, tensor)
        if ref.offset % dt.size:
            raise InvalidArgument(
                f"shared_memory_offset {ref.offset} of {role} '{tensor}' in CUDA shared memory "
                f"region '{ref.region}' is not a multiple of its element size ({dt.size} bytes)"
            )
        return region.memory.view(ref.offset, dt, shape, need_write=role == "output")

