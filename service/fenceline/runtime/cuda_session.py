"""A CUDA session (docs/gpu.md): GPU memory bound by device pointer into an onnxruntime CUDA EP
session that runs on the session's own CUDA stream, between two GPU fences (Vulkan timeline
semaphores, or D3D12 fences on Windows: docs/windows.md) waited and signalled on that stream.

A run enqueues: wait(input semaphore >= wait_value), the model, signal(output semaphore :=
signal_value). An async run replies then; a plain run also waits on the host for the stream to
pass the signal, at most timeout. Nothing waits on the CPU for the renderer and no frame is read
on the CPU.

The session runs the model once at creation, on scratch tensors, so that work onnxruntime and
CUDA do on a model's first run (loading kernels, allocating its arena) is done before any run
sits behind a semaphore wait on the stream: done on a frame's run, that work waited on the CPU
for the renderer's signal (docs/gpu.md, "The first frame").
"""

from __future__ import annotations

import contextlib
import logging
import mmap
import time
from collections.abc import Callable, Sequence
from typing import Any, Protocol

import numpy as np
import onnxruntime as ort

from fenceline import _native, trace
from fenceline.errors import (
    Conflict,
    FencelineError,
    InvalidArgument,
    ModelError,
    TimedOut,
    Unavailable,
    Unsupported,
)
from fenceline.interop.cuda_memory import CudaTensorBinding
from fenceline.interop.devices import device_label, session_device
from fenceline.interop.vk_fence import VkFenceImport
from fenceline.runtime.models import Model
from fenceline.runtime.ort_options import cuda_inference_session, cuda_session_options
from fenceline.runtime.session import RunResult, SessionBase
from fenceline.waiting import Flag

log = logging.getLogger("fenceline.runtime")

# How long close() lets queued work finish before it releases a wait nobody will signal.
DRAIN_GRACE_NS = 200_000_000
# A plain run's host wait checks for shutdown this often.
CANCEL_SLICE_NS = 100_000_000
# The run at session creation (CudaSession._warm_up); a module constant so that a measurement
# can start a service without it (tests/support/gpu_first_frame_probe.py).
WARM_UP = True
# Capture the model's run into a CUDA graph at session creation (capture_graph), so a frame
# enqueues one graph launch instead of onnxruntime's run; a module constant so that a
# measurement can compare both.
CUDA_GRAPH = True


class GraphStream(Protocol):
    """What capture_graph needs of a stream (_native.CudaStream)."""

    def begin_capture(self) -> None: ...

    def end_capture(self) -> Any: ...


def capture_graph(stream: GraphStream, run: Callable[[], object]) -> tuple[Any, str]:
    """Captures ``run`` (onnxruntime's run on the session's stream, bound to the imported
    memory, which never moves) into a CUDA graph: (graph, "") or (None, why not). Nothing
    runs on the GPU while capturing. The capture is thread-local, so a model whose run
    synchronizes or copies to the host (a node onnxruntime placed on the CPU, a
    data-dependent shape) spoils it, and an empty graph (nothing was enqueued on the stream)
    is refused: such a model keeps running through onnxruntime on each frame."""
    try:
        stream.begin_capture()
    except FencelineError as e:
        return None, f"no capture: {e.message}"
    failure = ""
    try:
        run()
    except Exception as e:  # onnxruntime's own error types
        failure = f"the model's run cannot be captured: {str(e).splitlines()[0][:300]}"
    try:
        graph = stream.end_capture()  # always: it ends the capture mode of the stream
    except FencelineError as e:
        return None, failure or f"the capture failed: {e.message}"
    if failure:
        return None, failure
    if graph.nodes == 0:
        return None, "the model's run enqueued nothing on the stream"
    return graph, ""


def require_cuda_provider(session: Any, model_name: str) -> None:
    """Raises ModelError unless ``session`` (an onnxruntime InferenceSession) runs on CUDA.
    onnxruntime falls back to its CPU provider, with a warning in its log only, when the CUDA
    provider it was asked for does not start (a missing CUDA or cuDNN library, an
    onnxruntime-gpu built for another CUDA); such a session would fail at its first run, on
    device pointers it cannot read. Said at create instead, with what onnxruntime gave."""
    got = list(session.get_providers())
    if not got or got[0] != "CUDAExecutionProvider":
        raise ModelError(
            f"model {model_name!r}: onnxruntime did not start its CUDA provider (it gave "
            f"{', '.join(got) or 'no provider'}); onnxruntime's log says why, often a CUDA or "
            "cuDNN library it could not load")


def gpu_session_device(
    inputs: dict[str, CudaTensorBinding],
    outputs: dict[str, CudaTensorBinding],
    wait_fence: VkFenceImport,
    signal_fence: VkFenceImport,
) -> _native.CudaDevice:
    """The GPU a session over these objects runs on (interop/devices.py)."""
    return session_device(
        [(f"input {n!r}", b.memory.cuda) for n, b in inputs.items()]
        + [(f"output {n!r}", b.memory.cuda) for n, b in outputs.items()],
        [("wait_fence", wait_fence.cuda), ("signal_fence", signal_fence.cuda)],
    )


def check_gpu_session(
    model: Model,
    inputs: dict[str, Any],
    outputs: dict[str, Any],
    wait_fence: Any,
    signal_fence: Any,
) -> _native.CudaDevice:
    """Everything a CUDA session needs, checked before anything is built (the runtime calls it
    under its table lock, to count sessions per GPU); returns the GPU the session runs on."""
    model.check_bindings(inputs, outputs)
    bindings = [*inputs.values(), *outputs.values()]
    gpu = [isinstance(b, CudaTensorBinding) for b in bindings]
    if not any(gpu):
        raise InvalidArgument(
            "vk_timeline_opaque_fd and d3d12_fence fences are waited on the GPU: bind GPU "
            "memory (opaque_fd, cuda_ipc, d3d12_heap, d3d12_resource), or use host_timeline "
            "fences with host memory"
        )
    if not all(gpu):
        raise InvalidArgument(
            "a session binds GPU memory (opaque_fd, cuda_ipc, d3d12_heap, d3d12_resource) or "
            "host memory, not both"
        )
    for role, f in (("wait_fence", wait_fence), ("signal_fence", signal_fence)):
        if not isinstance(f, VkFenceImport):
            raise InvalidArgument(
                f"{role}: a session over GPU memory needs GPU fences (vk_timeline_opaque_fd, "
                f"d3d12_fence), not {getattr(f, 'kind', '?')}"
            )
    if model.settings.execution_provider != "cuda":
        raise InvalidArgument(
            f"model {model.name!r} runs on {model.settings.execution_provider}; GPU memory "
            'needs a model with "execution_provider": "cuda" in its config.json'
        )
    return gpu_session_device(inputs, outputs, wait_fence, signal_fence)


def uses_gpu(bindings: Sequence[object], fences: Sequence[object]) -> bool:
    return any(isinstance(b, CudaTensorBinding) for b in bindings) or any(
        isinstance(f, VkFenceImport) for f in fences
    )


class CudaSession(SessionBase[CudaTensorBinding, VkFenceImport]):
    """Runs are serialized per session; one stream per session, so sessions run concurrently."""

    def __init__(
        self,
        model: Model,
        inputs: dict[str, Any],
        outputs: dict[str, Any],
        wait_fence: Any,
        signal_fence: Any,
    ) -> None:
        device = check_gpu_session(model, inputs, outputs, wait_fence, signal_fence)
        super().__init__(model, inputs, outputs, wait_fence, signal_fence)
        self.device = device
        self.device_label = device_label(device.ordinal)
        self._max_wait_value = 0
        # (wait_value, signal_value) of a run that timed out and is still queued on the stream.
        self._timed_out: tuple[int, int] | None = None
        # A streaming session's frames enter the run engine here (set by Runtime._register),
        # which admits and counts each and calls enqueue_frame back as the session's body:
        # frame_entry(value) -> the engine's RunResult fields.
        self.frame_entry: Callable[[int], tuple[int, int, int, int]] | None = None
        self._stream: _native.CudaStream | None = _native.CudaStream(device)
        so = cuda_session_options()
        provider = ("CUDAExecutionProvider", {
            "device_id": str(device.ordinal),
            "user_compute_stream": str(self._stream.handle),
        })
        if "CUDAExecutionProvider" not in ort.get_available_providers():
            raise Unsupported("this onnxruntime has no CUDAExecutionProvider (install onnxruntime-gpu)")
        try:
            self._ort: ort.InferenceSession | None = cuda_inference_session(
                str(model.path), so, provider)
        except Exception as e:  # onnxruntime's own error types
            raise ModelError(f"model {model.name!r} does not load on CUDA: {e}") from e
        require_cuda_provider(self._ort, model.name)
        self._binding = self._ort.io_binding()
        self._bind(self._binding, "cuda", device.ordinal)
        # One RunOptions for every run: the stream is never synchronized at the end of a run.
        self._run_options = ort.RunOptions()
        self._run_options.add_run_config_entry("disable_synchronize_execution_providers", "1")
        self._graph: Any = None  # _native.CudaGraph of the model's run, once captured
        self._graph_note = "off"
        if WARM_UP:
            self._warm_up()
        if CUDA_GRAPH:
            self._capture()

    def _capture(self) -> None:
        """After the warm-up (so onnxruntime's arena holds what a run allocates), the model's
        run on the bound memory is captured into a graph; a frame then launches it between the
        semaphore wait and signal. Fallback: onnxruntime's run, the reason in describe()."""
        assert self._ort is not None and self._stream is not None
        ort_session, binding, options = self._ort, self._binding, self._run_options
        self._graph, why = capture_graph(
            self._stream, lambda: ort_session.run_with_iobinding(binding, options))
        if self._graph is not None:
            self._graph_note = f"captured, {self._graph.nodes} nodes"
            log.info("model %s: its run is a CUDA graph of %d nodes", self.model.name,
                     self._graph.nodes)
        else:
            self._graph_note = why
            log.info("model %s runs without a CUDA graph: %s", self.model.name, why)

    def _warm_up(self) -> None:
        """One run on zeros into onnxruntime's own outputs, on the session's stream, before the
        stream ever waits on a semaphore. The renderer's memory is not touched: its outputs may
        already hold something, and zeros (not its uninitialized inputs) are a valid input for
        any model, indices included. The scratch tensors come from the session's arena, which
        keeps them until the session ends: a cudaFree now could wait for other sessions' queued
        semaphore waits. The zeros are an anonymous mapping of their own, unmapped at the end,
        not a malloc: a frame-sized free would raise glibc's mmap threshold, and later large
        allocations would then stay resident in the heap."""
        assert self._ort is not None and self._stream is not None
        binding = self._ort.io_binding()
        pages = [mmap.mmap(-1, max(b.view.nbytes, 1)) for b in self.inputs.values()]
        try:
            for (name, b), page in zip(self.inputs.items(), pages, strict=True):
                zeros = np.frombuffer(page, b.datatype.numpy, b.view.nbytes // b.datatype.size)
                binding.bind_cpu_input(name, zeros.reshape(b.shape))
                del zeros
            for name in self.outputs:
                binding.bind_output(name, "cuda", self.device.ordinal)
            try:
                self._ort.run_with_iobinding(binding, self._run_options)
            except Exception as e:  # onnxruntime's own error types
                raise ModelError(
                    f"model {self.model.name!r} fails its first run on CUDA: {e}"
                ) from e
            self._stream.synchronize(-1, 0)
        finally:
            binding.clear_binding_inputs()
            binding.clear_binding_outputs()
            del binding
            for page in pages:
                # Still exported when onnxruntime holds a view: the last view then unmaps it.
                with contextlib.suppress(BufferError):
                    page.close()

    @property
    def output_devices(self) -> dict[str, str]:
        return {name: f"cuda:{self.device.ordinal}" for name in self.outputs}

    def run(
        self,
        wait_value: int,
        signal_value: int | None,
        timeout_ns: int,
        spin_ns: int,
        cancel: Flag | None = None,
        *,
        asynchronous: bool = False,
    ) -> RunResult:
        """Enqueues wait -> model -> signal on the stream. A plain run then waits for the stream
        up to timeout_ns and raises TimedOut if the input semaphore has not reached wait_value by
        then (the work stays queued and completes once it does), or Unavailable once ``cancel``
        is set."""
        target = wait_value if signal_value is None else signal_value
        with self._lock:
            if self._closed or self._stream is None or self._ort is None:
                raise Conflict("the session is closed")
            start = time.perf_counter_ns()
            current = self.signal_fence.enqueued_signal
            if target <= current:
                pending = ""
                if self._timed_out is not None and self._timed_out[1] == current:
                    pending = (
                        f"; the run that timed out waiting for {self._timed_out[0]} is still "
                        f"queued and signals {current} once the input fence gets there"
                    )
                raise Conflict(
                    f"signal_value {target} is not above the output fence's last value "
                    f"{current}{pending}"
                )
            stream = self._stream
            self._enqueue(stream, wait_value, target, signal_on_error=False)
            stream.record()
            enqueued = time.perf_counter_ns()
            trace.mark(trace.ENQUEUED, self.trace_tag, target, enqueued)
            if asynchronous:
                queued = RunResult(target, 0, enqueued - start, enqueued - start)
                self.counts.note(enqueued, *queued)
                return queued
            done = stream.synchronize(min(timeout_ns, CANCEL_SLICE_NS), spin_ns)
            left = timeout_ns - CANCEL_SLICE_NS
            while not done and left > 0:
                if cancel is not None and cancel.is_set():
                    raise Unavailable("the service is shutting down")
                done = stream.synchronize(min(left, CANCEL_SLICE_NS), 0)
                left -= CANCEL_SLICE_NS
            if not done:
                self._timed_out = (wait_value, target)
        end = time.perf_counter_ns()
        if not done:
            raise TimedOut(
                f"the input fence did not reach {wait_value} within {timeout_ns / 1e6:g} ms; the "
                f"run stays queued on the GPU and signals {target} once it does",
                {"queued": True, "wait_value": wait_value, "signal_value": target},
            )
        result = RunResult(target, end - enqueued, enqueued - start, end - start)
        self.counts.note(end, *result)
        return result

    def _enqueue(
        self, stream: _native.CudaStream, wait_value: int, target: int, *, signal_on_error: bool
    ) -> None:
        """wait(input >= wait_value) -> the model -> signal(output := target) on ``stream``.
        When the model fails, the signal is enqueued anyway if ``signal_on_error`` (then
        ModelError is raised after it), else nothing after the wait."""
        assert self._ort is not None
        stream.wait(self.wait_fence.handle, wait_value)
        self._max_wait_value = max(self._max_wait_value, wait_value)
        traced = trace.active()
        if traced:
            trace.mark(trace.MODEL_START, self.trace_tag, target)
        failure: ModelError | None = None
        try:
            if self._graph is not None:
                stream.launch(self._graph)
            else:
                self._ort.run_with_iobinding(self._binding, self._run_options)
        except Exception as e:  # onnxruntime's own error types, the launch's FencelineError
            failure = self.model_failed(e)
            if not signal_on_error:
                raise failure from e
        if traced:
            trace.mark(trace.MODEL_END, self.trace_tag, target)
        stream.signal(self.signal_fence.handle, target)
        if traced:
            trace.mark(trace.SIGNALLED, self.trace_tag, target)
            stream.trace_completion(self.trace_tag, target)
        self.signal_fence.enqueued_signal = target
        self.counts.ran(target)
        if failure is not None:
            raise failure

    def enqueue_frame(self, value: int) -> int:
        """A streaming frame: enqueues wait(input >= value) -> the model -> signal(output :=
        value), records no completion event, and returns the nanoseconds that took. A model
        error raises ModelError after the signal is enqueued all the same: a GPU fence has no
        error status, and a renderer waiting for ``value`` must not stall."""
        with self._lock:
            if self._closed or self._stream is None:
                raise Conflict("the session is closed")
            t0 = time.perf_counter_ns()
            self._enqueue(self._stream, value, value, signal_on_error=True)
            return time.perf_counter_ns() - t0

    def checkpoint(self) -> None:
        """Records the stream's completion event after everything enqueued so far."""
        with self._lock:
            if self._stream is None:
                raise Conflict("the session is closed")
            self._stream.record()

    def checkpoint_reached(self, timeout_ns: int, spin_ns: int) -> bool:
        """Waits (GIL released) up to ``timeout_ns`` for the work before the last checkpoint;
        False if it is not done by then."""
        with self._lock:
            if self._stream is None:
                raise Conflict("the session is closed")
            return self._stream.synchronize(timeout_ns, spin_ns)

    def close(self) -> None:
        """Lets queued work finish (releasing, after a grace period, a GPU wait that nobody
        signals), then drops the bindings and the onnxruntime session, then the stream. Safe to
        call twice."""
        with self._lock:
            if self._closed:
                return
            self._closed = True
            stream = self._stream
            if stream is not None and not stream.synchronize(DRAIN_GRACE_NS, 0):
                # A streaming session always has frames queued ahead of the renderer: expected.
                (log.info if self.stream is not None else log.warning)(
                    "session of %s: input fence never reached %d; releasing the GPU wait",
                    self.model.name, self._max_wait_value,
                )
                # Signalling the input semaphore from a side stream lets the queued run complete,
                # so nothing is freed under work the GPU still has queued.
                side = _native.CudaStream(self.device)
                side.signal(self.wait_fence.handle, self._max_wait_value)
                side.record()
                side.synchronize(-1, 0)
                stream.synchronize(-1, 0)
            self._graph = None  # before the session and the stream it was captured from
            self._unbind(self._binding)
            self._ort = None
            self._stream = None

    def describe(self) -> dict[str, Any]:
        return {
            **super().describe(),
            "device": f"cuda:{self.device.ordinal}",
            "device_uuid": bytes(self.device.uuid).hex(),
            # "captured, N nodes", or why the model runs through onnxruntime on each frame.
            "cuda_graph": self._graph_note,
        }
