"""Triton's system shared-memory extension: named windows ``[offset, offset + byte_size)`` of
POSIX shared-memory objects, each imported (mapped) once at registration through the same
``host_shm`` importer as ``/v2/interop``, and bound in place by every request."""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Any, ClassVar

from fenceline.errors import InvalidArgument, NotFound, Unsupported
from fenceline.interop.capabilities import can_import_memory
from fenceline.interop.datatypes import Datatype, datatype
from fenceline.interop.host_memory import MemoryImport, TensorBinding
from fenceline.interop.owners import SERVICE, Caller
from fenceline.triton.regions import (
    U64_MAX,
    Region,
    RegionTable,
    ShmRef,
    check_tensor_size,
    check_u64,
    check_window,
    import_as,
)

log = logging.getLogger("fenceline.kserve")

BYTE = datatype("UINT8")


def normalize_key(key: str) -> str:
    """shm_open() ignores leading slashes, so ``input0``, ``/input0`` and ``//input0`` name one
    object; a key made only of slashes names none."""
    rest = key.lstrip("/")
    if not rest:
        raise InvalidArgument(
            f"shared memory key {key!r} names no object: it is made only of slashes"
        )
    return "/" + rest


@dataclass
class SystemRegion(Region):
    title: ClassVar[str] = "system"

    key: str
    offset: int
    memory: MemoryImport

    def status(self) -> dict[str, Any]:
        return {"name": self.name, "key": self.key, "offset": self.offset,
                "byte_size": self.byte_size}


class SystemSharedMemory(RegionTable[SystemRegion]):
    region_type = SystemRegion
    kind = "system"
    owner = "triton-shm"

    @property
    def enabled(self) -> bool:
        return self.settings.client_shared_memory and can_import_memory("host_shm")

    def check_enabled(self) -> None:
        self._check_switched_on()
        if not can_import_memory("host_shm"):
            raise Unsupported("this build cannot import host shared memory")

    def register(
        self, name: str, key: Any, offset: Any, byte_size: Any, caller: Caller = SERVICE
    ) -> None:
        """Imports the key's object for ``caller``: it must own it (interop/owners.py)."""
        self.check_enabled()
        byte_size, invalid = self._check_registration(name, byte_size)
        if not isinstance(key, str):
            raise InvalidArgument("Shared memory register request needs a string 'key' field")
        offset = check_u64(offset, "offset")
        if offset > U64_MAX - byte_size:
            raise InvalidArgument(f"{invalid}: offset + byte_size overflows 64 bits")
        shm_key = normalize_key(key)

        def import_memory() -> dict[str, Any]:
            try:
                return self.runtime.import_memory(
                    self.owner, "host_shm", name=shm_key, size_bytes=byte_size,
                    offset_bytes=offset, caller=caller,
                )
            except InvalidArgument as e:
                raise InvalidArgument(f"{invalid}: {e.message}") from None
            except NotFound:
                raise NotFound(
                    f"failed to register shared memory region '{name}': no shared-memory "
                    f"object with key '{key}'"
                ) from None

        self._register(
            name, import_memory,
            lambda memory_id, memory: SystemRegion(
                name, byte_size, memory_id, key, offset, import_as(memory, MemoryImport)
            ),
            caller,
        )
        log.info("registered shm region %s: key %s offset %d, %d bytes", name, key, offset,
                 byte_size)

    def window(self, ref: ShmRef) -> tuple[MemoryImport, int]:
        """The mapping ``ref`` names and the offset in it, checked the way Triton checks it;
        call with :attr:`locked` held so no unregistration lands between the lookup and the
        view."""
        region = self.lookup(ref)
        check_window(ref, region.byte_size)
        # A region whose object shrank is lost for good (docs/reliability.md, "Shrunk memory").
        region.memory.handle.check()
        return region.memory, ref.offset

    def view(
        self, ref: ShmRef, dt: Datatype, shape: list[int], role: str, tensor: str
    ) -> TensorBinding | None:
        """A typed view at ``ref`` for one tensor; it keeps the mapping alive. None when the
        window does not align the tensor to its element size: Triton allows any offset, so
        the caller then copies through an aligned buffer."""
        memory, offset = self.window(ref)
        check_tensor_size(ref, dt, shape, role, tensor)
        if (memory.handle.address + offset) % dt.size:
            return None
        return memory.view(offset, dt, shape, need_write=role == "output")

    def bytes_view(self, ref: ShmRef) -> TensorBinding:
        """All of ``ref`` as bytes, for outputs whose shape is known only after the run."""
        memory, offset = self.window(ref)
        return memory.view(offset, BYTE, [ref.byte_size], need_write=True)

