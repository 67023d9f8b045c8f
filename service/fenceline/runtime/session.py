"""What every session is, whatever it runs on: the protocol the runtime, the transports and
the status page program against. Implementations: runtime/host_session.py (host memory,
host_timeline fences, waits on the CPU) and runtime/cuda_session.py (device memory, Vulkan
timeline semaphores waited on a CUDA stream); runtime/backends.py picks one per session."""

from __future__ import annotations

import threading
from collections.abc import Mapping
from typing import Any, Generic, NamedTuple, Protocol, TypeVar

from fenceline import _native
from fenceline.errors import DeviceLost, ModelError
from fenceline.interop.handles import Binding, FenceHandle
from fenceline.runtime.models import Model


class RunResult(NamedTuple):  # built on every run: a NamedTuple is the cheapest record
    signal_value: int
    wait_ns: int
    infer_ns: int
    total_ns: int

    def timings_us(self) -> dict[str, float]:
        return {
            "wait": self.wait_ns / 1e3,
            "infer": self.infer_ns / 1e3,
            "total": self.total_ns / 1e3,
        }


RECENT_RUNS = _native.SessionCounts.capacity  # the status page's fps and sparkline


class StreamControl(Protocol):
    """A streaming session's worker as the session sees it (runtime/streaming.py builds it);
    the session only reports it, so this module needs nothing of the streaming machinery."""

    def describe(self) -> dict[str, Any]: ...


class Session(Protocol):
    """One model bound to imported views between a wait fence and a signal fence. Every run
    enters the run engine (``Runtime.runs``, native/importer/engine/host_runs.cpp), which
    admits it and runs a host session itself; a CUDA session's own ``run`` is the one body
    the engine calls in Python. Runs are serialized per session; different sessions run in
    parallel. ``close()`` waits for a run in flight and is safe to call twice."""

    counts: _native.SessionCounts  # its runs, last value and recent runs: the one home
    stream: StreamControl | None  # set by the runtime for streaming sessions
    device_label: str  # the GPU's metrics label; "" for host sessions
    trace_tag: int  # its key in a trace (fenceline.trace.tag), set by the runtime

    @property
    def runs(self) -> int: ...

    @property
    def single_thread_runs(self) -> int: ...  # of them, on the model's one-thread session

    @property
    def last_signal_value(self) -> int: ...

    @property
    def recent(self) -> list[tuple[int, RunResult]]: ...  # (end, result), oldest first

    @property
    def model(self) -> Model: ...

    @property
    def inputs(self) -> Mapping[str, Binding]: ...

    @property
    def outputs(self) -> Mapping[str, Binding]: ...

    @property
    def wait_fence(self) -> FenceHandle: ...

    @property
    def signal_fence(self) -> FenceHandle: ...

    def use_single_thread(self) -> None:
        """Lets a run take the model's one-thread session while the CPUs are full (host
        sessions: runtime/ort_options.py); nothing elsewhere."""
        ...

    def close(self) -> None: ...

    def describe(self) -> dict[str, Any]: ...


B = TypeVar("B", bound=Binding)
F = TypeVar("F", bound=FenceHandle)


class SessionBase(Generic[B, F]):
    """What every implementation holds and does alike: the checked bindings and fences, the run
    counters, the lock that serializes runs, and the IOBinding set-up and tear-down. A subclass
    adds where its tensors live (``_bind``'s device), how a run waits and signals, and close."""

    def __init__(
        self, model: Model, inputs: dict[str, B], outputs: dict[str, B], wait_fence: F,
        signal_fence: F,
    ) -> None:
        model.check_bindings(inputs, outputs)
        self.model = model
        self.inputs = inputs
        self.outputs = outputs
        self.wait_fence = wait_fence
        self.signal_fence = signal_fence
        # The run engine records a host session's runs here itself; a CUDA session's body
        # records its own (ran once enqueued, note once its times are known).
        self.counts = _native.SessionCounts()
        self.stream: StreamControl | None = None  # set by the runtime for streaming sessions
        self.device_label = ""
        self.trace_tag = 0
        self._lock = threading.Lock()
        self._closed = False

    def _bind(self, binding: Any, device: str, ordinal: int) -> None:
        """Binds every view by address into an onnxruntime IOBinding: the model reads and writes
        the renderer's memory in place."""
        for name, b in self.inputs.items():
            binding.bind_input(name, device, ordinal, b.datatype.numpy, b.shape, b.address)
        for name, b in self.outputs.items():
            binding.bind_output(name, device, ordinal, b.datatype.numpy, b.shape, b.address)

    def use_single_thread(self) -> None:
        """Nothing, but for host sessions (HostSession.use_single_thread)."""

    @staticmethod
    def _unbind(binding: Any) -> None:
        binding.clear_binding_inputs()
        binding.clear_binding_outputs()

    @property
    def output_devices(self) -> dict[str, str]:
        raise NotImplementedError

    @property
    def runs(self) -> int:
        return self.counts.runs

    @property
    def single_thread_runs(self) -> int:
        """Of the runs, those on the model's one-thread session (host sessions only)."""
        return self.counts.single_thread_runs

    @property
    def last_signal_value(self) -> int:
        return self.counts.last_signal_value

    @property
    def recent(self) -> list[tuple[int, RunResult]]:
        """The last runs (perf_counter_ns at the end of the run, its result), oldest first, at
        most ``RECENT_RUNS``: one consistent copy, however the session keeps running."""
        return [(end, RunResult(value, wait, infer, total))
                for end, value, wait, infer, total in self.counts.recent()]

    # The failures of a run, worded once (the run engine calls these).

    def model_failed(self, error: BaseException) -> ModelError:
        """onnxruntime raised ``error`` while the model ran."""
        return ModelError(f"model {self.model.name!r} failed: {error}")

    def memory_shrank(self) -> DeviceLost:
        """Renderer memory of this session shrank while the model ran (the fault guard put zero
        pages in its place), so what the model read or wrote is not the renderer's."""
        return DeviceLost(
            f"a buffer of this session shrank while model {self.model.name!r} ran; release the "
            "session and its memory"
        )

    def describe(self) -> dict[str, Any]:
        info: dict[str, Any] = {
            "model": self.model.name,
            "mode": "request" if self.stream is None else "streaming",
            "inputs": {n: view_info(b) for n, b in self.inputs.items()},
            "outputs": {n: view_info(b) for n, b in self.outputs.items()},
            "output_devices": self.output_devices,
            "runs": self.runs,
            "single_thread_runs": self.single_thread_runs,
            "last_signal_value": self.last_signal_value,
        }
        if self.stream is not None:
            info["stream"] = self.stream.describe()
        return info


def view_info(b: Binding) -> dict[str, Any]:
    return {"offset_bytes": b.offset, "datatype": b.datatype.name, "shape": b.shape}
