"""Plain KServe v2 inference over onnxruntime, and Triton's system shared-memory regions.

A request's tensors are host arrays (JSON or binary tensor data, decoded by the API) or windows
into registered regions. Region windows are bound into the IOBinding in place: the region is
imported once, at registration, through the same ``host_shm`` importer as ``/v2/interop``, and
every request binds bounds-checked views of that mapping, inputs and outputs alike.

A view holds the mapping, so unregistering a region that a request is using drops the name at
once while the memory stays mapped until that request ends.
"""

from __future__ import annotations

import contextlib
import logging
import threading
import time
from dataclasses import dataclass, field
from typing import Any, Literal

import numpy as np

from fenceline.errors import Conflict, InvalidArgument, ModelError, NotFound, Unsupported
from fenceline.interop.capabilities import can_import_memory
from fenceline.interop.datatypes import Datatype, datatype
from fenceline.interop.host_memory import MemoryImport, TensorBinding
from fenceline.runtime.models import Model
from fenceline.runtime.service import Runtime

log = logging.getLogger("fenceline.kserve")

OWNER = "triton-shm"  # the runtime owner of every region's memory import
U64_MAX = 2**64 - 1
BYTE = datatype("UINT8")

Path = Literal["json", "binary", "shm", "mixed"]


@dataclass(frozen=True)
class InferenceSettings:
    client_shared_memory: bool = True  # False: Triton's shm registration answers 501
    max_regions: int = 1024
    max_request_bytes: int = 1 << 30

    def __post_init__(self) -> None:
        if self.max_regions < 0 or self.max_request_bytes <= 0:
            raise InvalidArgument("max_regions must be 0 or more and max_request_bytes positive")


@dataclass(frozen=True)
class ShmRef:
    """``shared_memory_region`` / ``_byte_size`` / ``_offset`` of one tensor."""

    region: str
    byte_size: int
    offset: int = 0


@dataclass
class InputTensor:
    name: str
    datatype: Datatype
    shape: list[int]
    array: np.ndarray | None = None  # host data (JSON or binary), typed and shaped
    shm: ShmRef | None = None
    binary: bool = False


@dataclass(frozen=True)
class OutputRequest:
    name: str
    binary: bool = False
    shm: ShmRef | None = None


@dataclass
class InferRequest:
    model: str
    version: str | None
    id: str | None
    inputs: list[InputTensor]
    outputs: list[OutputRequest] | None  # None: every output of the model
    binary_output: bool = False  # the default for outputs the request does not list


@dataclass
class OutputTensor:
    name: str
    datatype: Datatype
    shape: list[int]
    binary: bool
    array: np.ndarray | None = None  # None when written into a region
    shm: ShmRef | None = None

    @property
    def nbytes(self) -> int:
        return int(np.prod(self.shape, dtype=np.uint64)) * self.datatype.size


@dataclass
class InferResult:
    model_name: str
    model_version: str
    id: str | None
    outputs: list[OutputTensor]
    path: Path = "json"


def tensor_nbytes(dt: Datatype, shape: list[int]) -> int:
    n = dt.size
    for d in shape:
        n *= d
    return n


def check_u64(value: Any, what: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value <= U64_MAX:
        raise InvalidArgument(f"{what} must be an unsigned 64-bit integer, not {value!r}")
    return value


def normalize_key(key: str) -> str:
    """shm_open() ignores leading slashes, so ``input0``, ``/input0`` and ``//input0`` name one
    object; a key made only of slashes names none."""
    rest = key.lstrip("/")
    if not rest:
        raise InvalidArgument(
            f"shared memory key {key!r} names no object: it is made only of slashes"
        )
    return "/" + rest


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


@dataclass
class Region:
    name: str
    key: str
    offset: int
    byte_size: int
    memory_id: str
    memory: MemoryImport

    def status(self) -> dict[str, Any]:
        return {"name": self.name, "key": self.key, "offset": self.offset,
                "byte_size": self.byte_size}


class RegionTable:
    """The registered regions of one kind of Triton shared memory. Triton keeps system and CUDA
    regions in one namespace: the tables share one lock, and each sees the other's names as
    ``peer``."""

    kind = "system"  # as in "Unable to find system shared memory region"
    title = "system"  # as in "registered as system shared memory"
    owner = OWNER  # the runtime owner this kind's imports are made under

    def __init__(self, runtime: Runtime, settings: InferenceSettings, lock: threading.Lock) -> None:
        self.runtime = runtime
        self.settings = settings
        self._regions: dict[str, Any] = {}
        self._lock = lock
        self.peer: dict[str, Any] = {}
        self.peer_title = ""

    def check_enabled(self) -> None:
        raise NotImplementedError

    def _check_free(self, name: str) -> None:
        if name in self._regions or name in self.peer:
            raise Conflict(f"shared memory region '{name}' already in manager")
        if len(self._regions) + len(self.peer) >= self.settings.max_regions:
            raise InvalidArgument(
                f"at most {self.settings.max_regions} shared memory regions; unregister some"
            )

    def unregister(self, name: str | None = None) -> int:
        """Unregisters one region (an unknown name is not an error) or, with None, all.
        Requests using a region keep its memory mapped until they end."""
        self.check_enabled()
        with self._lock:
            names = list(self._regions) if name is None else [name]
            regions = [self._regions.pop(n) for n in names if n in self._regions]
        for r in regions:
            self.runtime.release_memory(self.owner, r.memory_id)
            self.runtime.metrics.kserve_shm_regions.dec()
            log.info("unregistered %s shm region %s", self.kind, r.name)
        return len(regions)

    def status(self, name: str | None = None) -> list[dict[str, Any]]:
        self.check_enabled()
        with self._lock:
            if name is None:
                return [r.status() for r in self._regions.values()]
            region = self._regions.get(name)
            if region is None and name in self.peer:
                raise NotFound(
                    f"The region named '{name}' is registered as {self.peer_title} shared "
                    f"memory, not {self.title} shared memory"
                )
            if region is None:
                raise NotFound(f"Unable to find {self.kind} shared memory region: '{name}'")
            return [region.status()]

    def has(self, name: str) -> bool:
        """Call with the shared lock held when the answer must stay true."""
        return name in self._regions


class SystemSharedMemory(RegionTable):
    """Triton's system shared-memory extension: named windows ``[offset, offset + byte_size)``
    of POSIX shared-memory objects, each imported (mapped) once at registration."""

    def __init__(self, runtime: Runtime, settings: InferenceSettings) -> None:
        super().__init__(runtime, settings, threading.Lock())

    @property
    def enabled(self) -> bool:
        return self.settings.client_shared_memory and can_import_memory("host_shm")

    def check_enabled(self) -> None:
        if not self.settings.client_shared_memory:
            raise Unsupported(
                "client shared-memory registration is switched off on this service "
                "(fenceline serve --no-client-shared-memory)"
            )
        if not can_import_memory("host_shm"):
            raise Unsupported("this build cannot import host shared memory")

    def register(self, name: str, key: Any, offset: Any, byte_size: Any) -> None:
        self.check_enabled()
        if not name:
            raise InvalidArgument("'region name' is necessary to register system shared memory")
        if not isinstance(key, str):
            raise InvalidArgument("Shared memory register request needs a string 'key' field")
        offset = check_u64(offset, "offset")
        byte_size = check_u64(byte_size, "byte_size")
        invalid = f"failed to register shared memory region '{name}': invalid args"
        if byte_size == 0:
            raise InvalidArgument(f"{invalid}: byte_size must be positive")
        if offset > U64_MAX - byte_size:
            raise InvalidArgument(f"{invalid}: offset + byte_size overflows 64 bits")
        shm_key = normalize_key(key)
        with self._lock:
            self._check_free(name)
        try:
            info = self.runtime.import_memory(
                OWNER, "host_shm", name=shm_key, size_bytes=byte_size, offset_bytes=offset
            )
        except InvalidArgument as e:
            raise InvalidArgument(f"{invalid}: {e.message}") from None
        except NotFound:
            raise NotFound(
                f"failed to register shared memory region '{name}': no shared-memory object "
                f"with key '{key}'"
            ) from None
        memory = self.runtime.memory.get(OWNER, info["id"]).obj
        region = Region(name, key, offset, byte_size, info["id"], memory)
        try:
            with self._lock:
                self._check_free(name)  # a concurrent registration of the same name may have won
                self._regions[name] = region
        except Exception:
            self.runtime.release_memory(OWNER, region.memory_id)
            raise
        self.runtime.metrics.kserve_shm_regions.inc()
        log.info("registered shm region %s: key %s offset %d, %d bytes", name, key, offset,
                 byte_size)

    def window(self, ref: ShmRef) -> tuple[Region, int]:
        """The region ``ref`` names, checked the way Triton checks it; call with
        :attr:`locked` held so no unregistration lands between the lookup and the view."""
        region = self._regions.get(ref.region)
        if region is None:
            raise NotFound(f"Unable to find shared memory region: '{ref.region}'")
        check_window(ref, region.byte_size)
        return region, ref.offset

    def view(
        self, ref: ShmRef, dt: Datatype, shape: list[int], role: str, tensor: str
    ) -> TensorBinding | None:
        """A typed view at ``ref`` for one tensor; it keeps the mapping alive. None when the
        window does not align the tensor to its element size: Triton allows any offset, so
        the caller then copies through an aligned buffer."""
        region, offset = self.window(ref)
        check_tensor_size(ref, dt, shape, role, tensor)
        if (region.memory.handle.address + offset) % dt.size:
            return None
        return region.memory.view(offset, dt, shape, need_write=role == "output")

    def bytes_view(self, ref: ShmRef) -> TensorBinding:
        """All of ``ref`` as bytes, for outputs whose shape is known only after the run."""
        region, offset = self.window(ref)
        return region.memory.view(offset, BYTE, [ref.byte_size], need_write=True)

    @property
    def locked(self) -> threading.Lock:
        return self._lock

    def close(self) -> None:
        with self._lock:
            regions = list(self._regions.values())
            self._regions.clear()
        for r in regions:
            with contextlib.suppress(NotFound):  # the runtime may have released it already
                self.runtime.release_memory(OWNER, r.memory_id)


@dataclass
class _Plan:
    """What one run binds: arrays and views it must keep alive until the run ends."""

    keep: list[Any] = field(default_factory=list)
    outputs: list[OutputTensor] = field(default_factory=list)
    late: list[tuple[int, TensorBinding | None]] = field(default_factory=list)
    copy_back: list[tuple[Any, TensorBinding]] = field(default_factory=list)  # misaligned outputs


class KServeInference:
    def __init__(self, runtime: Runtime, settings: InferenceSettings | None = None) -> None:
        self.runtime = runtime
        self.settings = settings or InferenceSettings()
        self.shm = SystemSharedMemory(runtime, self.settings)
        from fenceline.runtime.cuda_shm import CudaSharedMemory  # it builds on this module

        self.cuda = CudaSharedMemory(runtime, self.settings, self.shm)

    def infer(self, req: InferRequest) -> InferResult:
        model = self.runtime.models.get(req.model, req.version or None)
        assert model.session is not None
        self._check_inputs(model, req)
        wanted = self._outputs_of(model, req)
        uses_shm = any(t.shm for t in req.inputs) or any(o.shm for o in wanted)
        if uses_shm:
            self.shm.check_enabled()
        metrics = self.runtime.metrics
        metrics.kserve_in_flight.inc()
        try:
            start = time.perf_counter_ns()
            binding = model.session.io_binding()
            plan = _Plan()
            with self.shm.locked:
                self._bind_inputs(model, req, binding, plan)
                self._bind_outputs(model, wanted, binding, plan)
            bound = time.perf_counter_ns()
            try:
                model.session.run_with_iobinding(binding)
            except Exception as e:  # onnxruntime's own error types
                raise ModelError(f"model {model.name!r} failed: {e}") from e
            inferred = time.perf_counter_ns()
            self._collect_late(binding, plan)
            end = time.perf_counter_ns()
        finally:
            metrics.kserve_in_flight.dec()
        path = _path_of(req, plan.outputs)
        # No fence to wait for on this path: the wait histogram gets zero.
        metrics.observe_run(model.name, "kserve", (end - start) / 1e9, 0.0,
                            (inferred - bound) / 1e9)
        metrics.kserve_requests.labels(model.name, path).inc()
        return InferResult(model.name, model.version, req.id, plan.outputs, path)

    def _check_inputs(self, model: Model, req: InferRequest) -> None:
        seen: set[str] = set()
        for t in req.inputs:
            spec = model.inputs.get(t.name)
            if spec is None:
                raise InvalidArgument(
                    f"unexpected inference input '{t.name}' for model '{model.name}'; its "
                    f"inputs are {sorted(model.inputs)}"
                )
            if t.name in seen:
                raise InvalidArgument(f"input '{t.name}' is given twice")
            seen.add(t.name)
            spec.check(t.datatype, t.shape, "input")
        missing = sorted(set(model.inputs) - seen)
        if missing:
            raise InvalidArgument(
                f"expected {len(model.inputs)} inputs but got {len(seen)} inputs for model "
                f"'{model.name}'; missing {', '.join(map(repr, missing))}"
            )

    def _outputs_of(self, model: Model, req: InferRequest) -> list[OutputRequest]:
        if not req.outputs:  # none listed (or an empty list): every output
            return [OutputRequest(n, req.binary_output) for n in model.outputs]
        seen: set[str] = set()
        for o in req.outputs:
            if o.name not in model.outputs:
                raise InvalidArgument(
                    f"unexpected inference output '{o.name}' for model '{model.name}'; its "
                    f"outputs are {sorted(model.outputs)}"
                )
            if o.name in seen:
                raise InvalidArgument(f"output '{o.name}' is requested twice")
            seen.add(o.name)
        return list(req.outputs)

    def _bind_inputs(self, model: Model, req: InferRequest, binding: Any, plan: _Plan) -> None:
        for t in req.inputs:
            dt = t.datatype
            if t.shm is not None and self.cuda.has(t.shm.region):
                gpu = self.cuda.view(model, t.shm, dt, t.shape, "input", t.name)
                plan.keep.append(gpu)
                binding.bind_input(t.name, "cuda", gpu.memory.cuda.ordinal, dt.numpy, t.shape,
                                   gpu.address)
                continue
            if t.shm is not None:
                view = self.shm.view(t.shm, dt, t.shape, "input", t.name)
                if view is None:  # misaligned window: one aligned copy
                    raw = self.shm.bytes_view(t.shm).array()[: tensor_nbytes(dt, t.shape)]
                    arr = np.frombuffer(raw.tobytes(), dt.numpy).reshape(t.shape)
                    plan.keep.append(arr)
                    binding.bind_input(t.name, "cpu", 0, dt.numpy, t.shape, arr.ctypes.data)
                    continue
                plan.keep.append(view)
                binding.bind_input(t.name, "cpu", 0, dt.numpy, t.shape, view.address)
                continue
            assert t.array is not None
            arr = t.array
            if arr.nbytes != tensor_nbytes(dt, t.shape):
                raise InvalidArgument(
                    f"input '{t.name}' holds {arr.nbytes} bytes, its shape {t.shape} needs "
                    f"{tensor_nbytes(dt, t.shape)}"
                )
            if not arr.flags.c_contiguous or arr.ctypes.data % dt.size:
                arr = np.ascontiguousarray(arr).copy()  # unaligned binary data: realign once
            plan.keep.append(arr)
            binding.bind_input(t.name, "cpu", 0, dt.numpy, t.shape, arr.ctypes.data)

    def _bind_outputs(
        self, model: Model, wanted: list[OutputRequest], binding: Any, plan: _Plan
    ) -> None:
        for o in wanted:
            spec = model.outputs[o.name]
            static = all(d >= 0 for d in spec.shape)
            out = OutputTensor(o.name, spec.datatype, list(spec.shape), o.binary, shm=o.shm)
            index = len(plan.outputs)
            plan.outputs.append(out)
            if o.shm is not None and self.cuda.has(o.shm.region):
                if not static:
                    raise InvalidArgument(
                        f"output '{o.name}' has a dynamic shape {spec.shape}: it cannot be "
                        "written into CUDA shared memory; use system shared memory"
                    )
                gpu = self.cuda.view(model, o.shm, spec.datatype, out.shape, "output", o.name)
                plan.keep.append(gpu)
                binding.bind_output(o.name, "cuda", gpu.memory.cuda.ordinal,
                                    spec.datatype.numpy, out.shape, gpu.address)
                continue
            if not static:
                # The shape is known only after the run: onnxruntime allocates, we copy.
                window = self.shm.bytes_view(o.shm) if o.shm is not None else None
                binding.bind_output(o.name, "cpu")
                plan.late.append((index, window))
                continue
            if o.shm is not None:
                view = self.shm.view(o.shm, spec.datatype, out.shape, "output", o.name)
                if view is None:  # misaligned window: run into an aligned buffer, copy after
                    scratch = np.empty(out.shape, spec.datatype.numpy)
                    plan.copy_back.append((scratch, self.shm.bytes_view(o.shm)))
                    binding.bind_output(o.name, "cpu", 0, spec.datatype.numpy, out.shape,
                                        scratch.ctypes.data)
                    continue
                plan.keep.append(view)
                binding.bind_output(o.name, "cpu", 0, spec.datatype.numpy, out.shape,
                                    view.address)
            else:
                out.array = np.empty(out.shape, spec.datatype.numpy)
                binding.bind_output(o.name, "cpu", 0, spec.datatype.numpy, out.shape,
                                    out.array.ctypes.data)

    def _collect_late(self, binding: Any, plan: _Plan) -> None:
        for scratch, window in plan.copy_back:
            window.array()[: scratch.nbytes] = scratch.reshape(-1).view(np.uint8)
        if not plan.late:
            return
        values = binding.get_outputs()
        for index, window in plan.late:
            out = plan.outputs[index]
            arr = values[index].numpy()
            out.shape = list(arr.shape)
            if window is None:
                out.array = arr
                continue
            assert out.shm is not None
            if arr.nbytes > out.shm.byte_size:
                raise InvalidArgument(
                    f"shared memory size specified with the request for output '{out.name}' "
                    f"({out.shm.byte_size} bytes) should be at least {arr.nbytes} bytes to "
                    "hold the results"
                )
            window.array()[: arr.nbytes] = arr.reshape(-1).view(np.uint8)

    def close(self) -> None:
        self.cuda.close()
        self.shm.close()


def _path_of(req: InferRequest, outputs: list[OutputTensor]) -> Path:
    kinds = {"shm" if t.shm else "binary" if t.binary else "json" for t in req.inputs}
    kinds |= {"shm" if o.shm else "binary" if o.binary else "json" for o in outputs}
    return kinds.pop() if len(kinds) == 1 else "mixed"  # type: ignore[return-value]
