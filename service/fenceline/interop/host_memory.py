"""Host memory imports: shared memory by name (``host_shm``: POSIX, or a Windows section), an fd
(``host_fd``) or a Windows section handle duplicated from the renderer (``host_shm`` by handle)."""

from __future__ import annotations

import os
from dataclasses import dataclass

import numpy as np

from fenceline import _native
from fenceline.errors import InvalidArgument, Unsupported
from fenceline.interop.capabilities import MEMORY_TYPES, can_import_memory
from fenceline.interop.datatypes import Datatype, ViewWindow
from fenceline.interop.handles import Access, ImportedRegion, close_nt_handles


@dataclass(frozen=True)
class TensorBinding(ViewWindow):
    """A bounds-checked typed window into an import; it keeps the mapping alive."""

    memory: MemoryImport
    datatype: Datatype
    view: _native.TensorView

    def array(self) -> np.ndarray:
        return self.view.array(self.datatype.numpy)


class MemoryImport(ImportedRegion):
    """One imported region, mapped once. ``close()`` drops this object's hold on the mapping;
    views made from it keep theirs until they are gone too."""

    handle: _native.HostMemory

    @property
    def device(self) -> str:
        return "cpu"

    def view(
        self, offset_bytes: int, dt: Datatype, shape: list[int], *, need_write: bool
    ) -> TensorBinding:
        view = _native.TensorView(self.handle, offset_bytes, dt.size, shape, need_write)
        return TensorBinding(self, dt, view)


def import_memory(
    kind: str,
    *,
    name: str | None = None,
    fd: int | None = None,
    nt_handle: int | None = None,
    size_bytes: int = 0,
    offset_bytes: int = 0,
    access: Access = "read_write",
) -> MemoryImport:
    """Maps a renderer's memory. A received ``fd`` or a section handle duplicated from the
    renderer (``nt_handle``, Windows) is owned by the import from here on, also when this
    raises."""
    try:
        if kind not in MEMORY_TYPES:
            raise InvalidArgument(
                f"unknown memory handle_type {kind!r}; use one of {', '.join(MEMORY_TYPES)}"
            )
        if not can_import_memory(kind):
            raise Unsupported(f"memory handle_type {kind!r} cannot be imported on this machine")
        if size_bytes < 0 or offset_bytes < 0:
            raise InvalidArgument("size_bytes and offset_bytes must not be negative")
        writable = access == "read_write"
        if kind == "host_shm" and nt_handle is not None:
            if name:
                raise InvalidArgument("send exactly one of name or handle, not both")
            if _native.PLATFORM != "win32":
                raise Unsupported("section handles exist only on Windows")
            owned, nt_handle = nt_handle, None
            handle = _native.HostMemory.from_handle(owned, offset_bytes, size_bytes, writable)
            return MemoryImport(kind, handle, access, offset_bytes, "")
        if kind == "host_shm":
            if not name:
                raise InvalidArgument("host_shm needs the shared-memory object's name")
            handle = _native.HostMemory.open_shm(name, offset_bytes, size_bytes, writable)
            return MemoryImport(kind, handle, access, offset_bytes, name)
        if fd is None:
            raise InvalidArgument(f"{kind} needs a file descriptor passed over the IPC socket")
        owned, fd = fd, None
        handle = _native.HostMemory.from_fd(owned, offset_bytes, size_bytes, writable)
        return MemoryImport(kind, handle, access, offset_bytes, name or "")
    finally:
        if fd is not None:
            os.close(fd)
        close_nt_handles(nt_handle)
