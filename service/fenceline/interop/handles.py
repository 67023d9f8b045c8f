"""The small protocol every handle kind implements, so the runtime, the sessions and the status
page hold imports without knowing their kind. One module per kind implements it: host_memory
(host_shm, host_fd), cuda_memory (opaque_fd, cuda_ipc), host_fence (host_timeline), vk_fence
(vk_timeline_opaque_fd), d3d12 (d3d12_heap, d3d12_resource, d3d12_fence: CUDA imports too). A
new kind adds a module here and a line in the runtime's importer table; nothing else changes."""

from __future__ import annotations

from typing import Any, Literal, Protocol

from fenceline import _native
from fenceline.interop.datatypes import Datatype

Access = Literal["read_only", "read_write"]


def close_nt_handles(*handles: int | None) -> None:
    """Closes NT handles duplicated into the service for an import that did not take them
    (Windows; nothing to close elsewhere)."""
    for h in handles:
        if h is not None:
            _native.d3d12_close_handle(h)


class Binding(Protocol):
    """A bounds-checked typed window into an import; it keeps the import alive."""

    @property
    def memory(self) -> MemoryHandle: ...

    @property
    def datatype(self) -> Datatype: ...

    @property
    def shape(self) -> list[int]: ...

    @property
    def address(self) -> int: ...

    @property
    def offset(self) -> int:
        """Where the window starts inside the import, in bytes."""
        ...


class MemoryHandle(Protocol):
    """Imported memory, mapped once. ``close()`` drops this object's hold on the mapping; views
    made from it keep theirs until they are gone too."""

    kind: str
    name: str
    size_bytes: int
    offset_bytes: int
    access: Access

    @property
    def device(self) -> str:
        """"cpu" or "cuda:N"."""
        ...

    def view(self, offset_bytes: int, dt: Datatype, shape: list[int], *, need_write: bool) -> Binding:
        ...

    def close(self) -> None: ...


class ImportedRegion:
    """The part of :class:`MemoryHandle` every memory kind shares: what the import records of
    itself, and ``close()`` dropping this object's hold on the native ``handle``."""

    def __init__(self, kind: str, handle: Any, access: Access, offset_bytes: int,
                 name: str) -> None:
        self.kind = kind
        self.handle = handle
        self.access: Access = access
        self.offset_bytes = offset_bytes
        self.name = name
        self.size_bytes = int(handle.size)

    def close(self) -> None:
        self.handle.close()


class FenceHandle(Protocol):
    """An imported timeline fence. ``close()`` releases the import once no wait holds it."""

    kind: str
    name: str

    @property
    def device(self) -> str: ...

    @property
    def value(self) -> int: ...

    @property
    def status(self) -> int: ...

    def close(self) -> None: ...
