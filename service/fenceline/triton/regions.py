"""Triton's shared-memory regions: one namespace and one lock for system and CUDA regions (as in
Triton: a name is registered once, whatever its kind), the checks Triton makes on a window
``[offset, offset + byte_size)``, and the one registration flow both kinds go through.

A region holds its memory import; a view of it holds the mapping, so unregistering a region
that a request is using drops the name at once while the memory stays mapped until that request
ends.
"""

from __future__ import annotations

import contextlib
import logging
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, ClassVar, Generic, TypeVar

from fenceline.errors import (
    Conflict,
    FencelineError,
    InvalidArgument,
    NotFound,
    PermissionDenied,
    Unsupported,
)
from fenceline.interop.datatypes import Datatype
from fenceline.interop.handles import MemoryHandle
from fenceline.interop.owners import SERVICE, Caller
from fenceline.runtime.service import Runtime

log = logging.getLogger("fenceline.kserve")

U64_MAX = 2**64 - 1


@dataclass(frozen=True)
class InferenceSettings:
    client_shared_memory: bool = True  # False: Triton's shm registration answers 501
    max_regions: int = 1024
    max_request_bytes: int = 256 << 20  # a whole infer body: --max-body-mb
    max_json_bytes: int = 16 << 20  # its JSON part: --max-json-mb

    def __post_init__(self) -> None:
        if self.max_regions < 0 or self.max_request_bytes <= 0 or self.max_json_bytes <= 0:
            raise InvalidArgument(
                "max_regions must be 0 or more, max_request_bytes and max_json_bytes positive"
            )


@dataclass(frozen=True)
class ShmRef:
    """``shared_memory_region`` / ``_byte_size`` / ``_offset`` of one tensor."""

    region: str
    byte_size: int
    offset: int = 0


def tensor_nbytes(dt: Datatype, shape: list[int]) -> int:
    n = dt.size
    for d in shape:
        n *= d
    return n


def check_u64(value: Any, what: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value <= U64_MAX:
        raise InvalidArgument(f"{what} must be an unsigned 64-bit integer, not {value!r}")
    return value


def check_window(ref: ShmRef, region_size: int) -> None:
    """``[offset, offset + byte_size)`` of ``ref`` lies inside a region of ``region_size``
    bytes; the checks and texts are Triton's."""
    if ref.offset >= region_size:
        raise InvalidArgument(f"Invalid offset for shared memory region: '{ref.region}'")
    if ref.byte_size > U64_MAX - ref.offset:
        raise InvalidArgument(
            f"Integer overflow detected: byte_size ({ref.byte_size}) + offset "
            f"({ref.offset}) exceeds 2^64 - 1 for region '{ref.region}'"
        )
    if ref.offset + ref.byte_size > region_size:
        raise InvalidArgument(
            f"Invalid offset + byte size for shared memory region: '{ref.region}'"
        )


def check_tensor_size(ref: ShmRef, dt: Datatype, shape: list[int], role: str, tensor: str) -> int:
    need = tensor_nbytes(dt, shape)
    if role == "input" and ref.byte_size != need:
        raise InvalidArgument(
            f"unexpected total byte size {ref.byte_size} for input '{tensor}', expecting {need}"
        )
    if role == "output" and ref.byte_size < need:
        raise InvalidArgument(
            f"shared memory size specified with the request for output '{tensor}' "
            f"({ref.byte_size} bytes) should be at least {need} bytes to hold the results"
        )
    return need


def check_use(caller: Caller, region: Region) -> None:
    if not caller.may_use_objects_of(region.registrar):
        raise PermissionDenied(
            f"shared memory region '{region.name}' was registered by another user; a region "
            "serves the user that registered it"
        )


T = TypeVar("T")


def import_as(memory: Any, kind: type[T]) -> T:
    """``memory`` as the import class its importer makes; anything else is a bug here."""
    if not isinstance(memory, kind):
        raise TypeError(f"expected {kind.__name__}, got {type(memory).__name__}")
    return memory


@dataclass
class Region:
    """What every region has; each kind adds its own fields (system: key and offset; CUDA:
    device)."""

    title: ClassVar[str] = ""  # as in "registered as system shared memory"

    name: str
    byte_size: int
    memory_id: str  # the runtime's id of the import, released at unregistration
    # Who registered it: only that caller (or the service's user) may use or unregister it.
    registrar: Caller = field(default=SERVICE, kw_only=True)

    def status(self) -> dict[str, Any]:
        raise NotImplementedError


class RegionNamespace:
    """Every registered region by name, of every kind, under one lock."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.regions: dict[str, Region] = {}


R = TypeVar("R", bound=Region)


class RegionTable(Generic[R]):
    """The regions of one kind (``region_type``) in the shared namespace. Lookups of a name
    registered as another kind answer not found, with a message naming that kind."""

    region_type: type[R]
    kind: ClassVar[str]  # as in "Unable to find system shared memory region"
    owner: ClassVar[str]  # the runtime owner of every import of this kind

    def __init__(
        self, runtime: Runtime, settings: InferenceSettings, namespace: RegionNamespace
    ) -> None:
        self.runtime = runtime
        self.settings = settings
        self.namespace = namespace

    def check_uses(self, refs: list[ShmRef], caller: Caller) -> None:
        """Raises unless ``caller`` may use every region ``refs`` name (of any kind); call
        with :attr:`locked` held."""
        for ref in refs:
            region = self.namespace.regions.get(ref.region)
            if region is not None:
                check_use(caller, region)

    @property
    def locked(self) -> threading.Lock:
        """The namespace's lock; hold it from a lookup until the view is taken."""
        return self.namespace.lock

    def check_enabled(self) -> None:
        raise NotImplementedError

    def _check_switched_on(self) -> None:
        if not self.settings.client_shared_memory:
            raise Unsupported(
                "client shared-memory registration is switched off on this service "
                "(fenceline serve --no-client-shared-memory)"
            )

    def _check_registration(self, name: str, byte_size: Any) -> tuple[int, str]:
        """The checks every kind makes on a registration: the byte size as an unsigned 64-bit
        integer, and the prefix of the kind's later "invalid args" errors."""
        if not name:
            raise InvalidArgument(
                f"'region name' is necessary to register {self.region_type.title} shared memory"
            )
        size = check_u64(byte_size, "byte_size")
        invalid = f"failed to register shared memory region '{name}': invalid args"
        if size == 0:
            raise InvalidArgument(f"{invalid}: byte_size must be positive")
        return size, invalid

    def lookup(self, ref: ShmRef) -> R:
        """The region ``ref`` names, or NotFound; call with :attr:`locked` held."""
        region = self.get(ref.region)
        if region is None:
            raise NotFound(f"Unable to find shared memory region: '{ref.region}'")
        return region

    def _mine(self) -> dict[str, R]:
        return {n: r for n, r in self.namespace.regions.items() if isinstance(r, self.region_type)}

    def get(self, name: str) -> R | None:
        """Call with :attr:`locked` held when the answer must stay true."""
        region = self.namespace.regions.get(name)
        return region if isinstance(region, self.region_type) else None

    def has(self, name: str) -> bool:
        return self.get(name) is not None

    def _check_free(self, name: str) -> None:
        regions = self.namespace.regions
        if name in regions:
            raise Conflict(f"shared memory region '{name}' already in manager")
        if len(regions) >= self.settings.max_regions:
            raise InvalidArgument(
                f"at most {self.settings.max_regions} shared memory regions; unregister some"
            )

    def _register(
        self, name: str, import_memory: Callable[[], dict[str, Any]],
        make: Callable[[str, MemoryHandle], R], caller: Caller = SERVICE,
    ) -> R:
        """The registration of every kind: the name is checked free, the memory imported
        outside the lock (an import maps or opens a device handle), then the name is checked
        again, since a concurrent registration of the same name may have won meanwhile."""
        with self.locked:
            self._check_free(name)
        info = import_memory()
        memory_id = info["id"]
        try:
            region = make(memory_id, self.runtime.memory.get(self.owner, memory_id).obj)
            region.registrar = caller
            with self.locked:
                self._check_free(name)
                self.namespace.regions[name] = region
        except Exception:
            self.runtime.release_memory(self.owner, memory_id)
            raise
        self.runtime.metrics.kserve_shm_regions.inc()
        return region

    def unregister(self, name: str | None = None, caller: Caller = SERVICE) -> int:
        """Unregisters one region (an unknown name is not an error) or, with None, all of this
        kind that ``caller`` may use. Requests using a region keep its memory mapped until they
        end."""
        self.check_enabled()
        with self.locked:
            mine = self._mine()
            if name is not None and name in mine:
                check_use(caller, mine[name])
            names = list(mine) if name is None else [name] if name in mine else []
            names = [n for n in names if caller.may_use_objects_of(mine[n].registrar)]
            regions = [self.namespace.regions.pop(n) for n in names]
        for r in regions:
            self._release(r)
            log.info("unregistered %s shm region %s", self.kind, r.name)
        return len(regions)

    def _release(self, region: Region) -> None:
        with contextlib.suppress(NotFound):  # the runtime may have released it already
            self.runtime.release_memory(self.owner, region.memory_id)
            self.runtime.metrics.kserve_shm_regions.dec()

    def status(self, name: str | None = None) -> list[dict[str, Any]]:
        self.check_enabled()
        with self.locked:
            if name is None:
                return [r.status() for r in self._mine().values()]
            region = self.namespace.regions.get(name)
            if region is not None and not isinstance(region, self.region_type):
                raise NotFound(
                    f"The region named '{name}' is registered as {region.title} shared memory, "
                    f"not {self.region_type.title} shared memory"
                )
            if region is None:
                raise NotFound(f"Unable to find {self.kind} shared memory region: '{name}'")
            return [region.status()]

    def close(self) -> None:
        """Releases every region of this kind (the service is stopping)."""
        with self.locked:
            regions = list(self._mine())
            dropped = [self.namespace.regions.pop(n) for n in regions]
        for r in dropped:
            with contextlib.suppress(FencelineError):
                self._release(r)

