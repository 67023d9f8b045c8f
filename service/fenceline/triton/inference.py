"""KServe v2 inference over onnxruntime, the way Triton answers it.

A request's tensors are host arrays (JSON or binary tensor data, decoded by the HTTP API) or
windows into registered system or CUDA regions (triton/regions.py). Region windows are bound
into the IOBinding in place, inputs and outputs alike; a bound view holds its mapping until the
request ends.
"""

from __future__ import annotations

import time
from collections.abc import Collection
from dataclasses import dataclass, field
from typing import Any, Literal

import numpy as np

from fenceline.errors import DeviceLost, InvalidArgument, ModelError
from fenceline.interop.datatypes import Datatype
from fenceline.interop.host_memory import TensorBinding
from fenceline.interop.owners import SERVICE, Caller
from fenceline.runtime.models import Model
from fenceline.runtime.service import Runtime
from fenceline.triton.cuda_shm import CudaSharedMemory
from fenceline.triton.regions import InferenceSettings, RegionNamespace, ShmRef, tensor_nbytes
from fenceline.triton.system_shm import SystemSharedMemory

Path = Literal["json", "binary", "shm", "mixed"]


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
    caller: Caller = SERVICE  # who asks: a region serves the caller that registered it

    def uses_shm(self) -> bool:
        return any(t.shm for t in self.inputs) or any(o.shm for o in self.outputs or ())


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
        namespace = RegionNamespace()  # Triton: one name, whatever the kind of the region
        self.shm = SystemSharedMemory(runtime, self.settings, namespace)
        self.cuda = CudaSharedMemory(runtime, self.settings, namespace)

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
        metrics.triton.started(model.name, model.version)
        ok = False
        failure = "OTHER"
        try:
            start = time.perf_counter_ns()
            binding = model.session.io_binding()
            plan = _Plan()
            with self.shm.locked:
                if uses_shm:
                    refs = [t.shm for t in req.inputs] + [o.shm for o in wanted]
                    self.shm.check_uses([r for r in refs if r is not None], req.caller)
                self._bind_inputs(model, req, binding, plan)
                self._bind_outputs(model, wanted, binding, plan)
            bound = time.perf_counter_ns()
            try:
                model.session.run_with_iobinding(binding)
            except Exception as e:  # onnxruntime's own error types
                failure = "BACKEND"
                raise ModelError(f"model {model.name!r} failed: {e}") from e
            inferred = time.perf_counter_ns()
            self._collect_late(binding, plan)
            _raise_if_lost(plan)
            end = time.perf_counter_ns()
            ok = True
        finally:
            metrics.kserve_in_flight.dec()
            if not ok:
                metrics.kserve_failures.labels(model.name).inc()
                metrics.triton.failed(model.name, model.version, failure)
        path = _path_of(req, plan.outputs)
        metrics.observe_kserve(model.name, model.version, start, bound, inferred, end)
        metrics.kserve_requests.labels(model.name, path).inc()
        return InferResult(model.name, model.version, req.id, plan.outputs, path)

    def _check_inputs(self, model: Model, req: InferRequest) -> None:
        seen = _each_once(model, "input", [t.name for t in req.inputs], model.inputs, "given")
        for t in req.inputs:
            model.inputs[t.name].check(t.datatype, t.shape, "input")
        missing = sorted(set(model.inputs) - seen)
        if missing:
            raise InvalidArgument(
                f"expected {len(model.inputs)} inputs but got {len(seen)} inputs for model "
                f"'{model.name}'; missing {', '.join(map(repr, missing))}"
            )

    def _outputs_of(self, model: Model, req: InferRequest) -> list[OutputRequest]:
        if not req.outputs:  # none listed (or an empty list): every output
            return [OutputRequest(n, req.binary_output) for n in model.outputs]
        _each_once(model, "output", [o.name for o in req.outputs], model.outputs, "requested")
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
        for scratch, target in plan.copy_back:
            target.array()[: scratch.nbytes] = scratch.reshape(-1).view(np.uint8)
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


def _raise_if_lost(plan: _Plan) -> None:
    """A region that shrank while this request used it now holds zero pages (the native fault
    guard): what was read or written there is not the client's."""
    windows = [b for b in plan.keep if isinstance(b, TensorBinding)]
    windows += [w for _, w in plan.late if w is not None] + [w for _, w in plan.copy_back]
    if any(w.view.lost for w in windows):  # the view's mapping: the region may be gone
        raise DeviceLost("a shared-memory region shrank while this request used it; "
                         "unregister it")


def _path_of(req: InferRequest, outputs: list[OutputTensor]) -> Path:
    kinds = {"shm" if t.shm else "binary" if t.binary else "json" for t in req.inputs}
    kinds |= {"shm" if o.shm else "binary" if o.binary else "json" for o in outputs}
    return kinds.pop() if len(kinds) == 1 else "mixed"  # type: ignore[return-value]


def _each_once(
    model: Model, role: str, names: list[str], known: Collection[str], verb: str
) -> set[str]:
    """``names`` (of a request's inputs or outputs), each one of the model's and named once."""
    seen: set[str] = set()
    for name in names:
        if name not in known:
            raise InvalidArgument(
                f"unexpected inference {role} '{name}' for model '{model.name}'; its {role}s "
                f"are {sorted(known)}"
            )
        if name in seen:
            raise InvalidArgument(f"{role} '{name}' is {verb} twice")
        seen.add(name)
    return seen
