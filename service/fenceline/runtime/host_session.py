"""A host session: one model bound through one IOBinding to imported host views, inputs and
outputs alike, between two host_timeline fences waited and signalled on the CPU."""

from __future__ import annotations

import logging
import time
from collections.abc import Iterable
from typing import Any

from fenceline import _native, trace
from fenceline._native import WAIT_REACHED
from fenceline.errors import Conflict, FencelineError, TimedOut
from fenceline.interop.host_fence import FenceImport
from fenceline.interop.host_memory import MemoryImport, TensorBinding
from fenceline.runtime import ort_binding
from fenceline.runtime.models import Model
from fenceline.runtime.session import RunResult, SessionBase
from fenceline.waiting import AdaptiveSpin, Flag

log = logging.getLogger("fenceline.runtime")


class HostSession(SessionBase[TensorBinding, FenceImport]):
    """Runs are serialized per session (one IOBinding); different sessions run in parallel."""

    def __init__(
        self,
        model: Model,
        inputs: dict[str, TensorBinding],
        outputs: dict[str, TensorBinding],
        wait_fence: FenceImport,
        signal_fence: FenceImport,
    ) -> None:
        assert model.session is not None
        super().__init__(model, inputs, outputs, wait_fence, signal_fence)
        self._spin = AdaptiveSpin(0)
        # Renderer memory that could shrink under the mapping is checked before each run.
        self._unsealed = _unique_unsealed(b.memory for b in (*inputs.values(), *outputs.values()))
        self._wait_handle = wait_fence.handle
        self._signal_handle = signal_fence.handle
        self._binding = model.session.io_binding()
        self._bind(self._binding, "cpu", 0)
        # The binding to the model's one-thread session (Model.single), once use_single_thread
        # made it.
        self._single_binding: Any = None
        # The frame's bytes, inputs and outputs: a large frame takes turns on a full machine
        # (_native.CpuRun, runtime/ort_options.py, "Large frames take turns").
        self._frame_bytes = sum(b.view.nbytes for b in (*inputs.values(), *outputs.values()))
        # Counts each run on the CPU in (runs hold self._lock: one at a time); made again with
        # the one-thread rule once use_single_thread bound that session.
        self._cpu_run = _native.CpuRun(id(self), self._frame_bytes, 0)
        self._native: tuple[Any, bytes] | None = None  # (RunTable, key) once run_natively
        self._runner: Any = None  # the _native.HostRunner, once run_natively

    def run_natively(self, table: Any, key: bytes, owner: str, series: Any) -> None:
        """Lets ``table`` (a ``_native.RunTable``) serve this session's RUN frames from
        ``owner``'s socket without the interpreter, as :meth:`run` would (docs/ipc.md, "The run
        path"); ``series`` records them (Metrics.run_series). Until :meth:`close`. The model is
        called as runtime/ort_binding.py says."""
        assert self.model.session is not None
        run, binding = ort_binding.native_entry(self.model.session, self._binding)
        with self._lock:
            if self._closed:
                return
            runner = _native.HostRunner(
                owner, run, binding, self, self._wait_handle, self._signal_handle,
                self._unsealed, series,
            )
            if self._single_binding is not None:
                self._hand_single(runner)
            table.add(key, runner)
            self._native = (table, key)
            self._runner = runner

    def use_single_thread(self) -> None:
        """Binds the model's one-thread session too (loaded on the model's first call): from
        now on a run that starts while the service's model runs in flight fill its CPUs takes
        it (runtime/ort_options.py). The runtime calls this, outside its table lock, once the
        service has as many sessions on the CPU as CPUs. Does nothing where the model has no
        such session, or the second time."""
        if self._single_binding is not None:
            return
        single = self.model.load_single()
        if single is None:
            return
        with self._lock:
            if self._closed or self._single_binding is not None:
                return
            binding = single.io_binding()
            try:
                self._bind(binding, "cpu", 0)
            except Exception as e:  # onnxruntime's own error types: the pool runs every run
                log.warning("a session of model %s keeps its pool for every run: %s",
                            self.model.name, e)
                return
            self._single_binding = binding
            self._cpu_run = _native.CpuRun(id(self), self._frame_bytes, self.model.single_from)
            if self._runner is not None:  # waits for a native run in flight
                self._hand_single(self._runner)

    def _hand_single(self, runner: Any) -> None:
        """Gives the native runner the model's one-thread session and its binding."""
        runner.set_single(*ort_binding.native_entry(self.model.single, self._single_binding),
                          self.model.single_from, self._frame_bytes)

    @property
    def output_devices(self) -> dict[str, str]:
        return {name: self.model.device for name in self.outputs}

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
        """wait(input fence >= wait_value) -> run -> signal(output fence := signal_value).
        A host run always completes before it returns (``asynchronous`` changes nothing).

        A wait that times out raises TimedOut having run and signalled nothing: its details say
        ``queued: false`` (docs/ipc.md, "When a run times out")."""
        target = wait_value if signal_value is None else signal_value
        with self._lock:
            if self._closed:
                raise Conflict("the session is closed")
            start = time.perf_counter_ns()
            current = self._signal_handle.value
            if target <= current:
                raise Conflict(
                    f"signal_value {target} is not above the output fence's value {current}"
                )
            # Fast path: one native call when the value is already there; else an adaptive,
            # rationed spin (fenceline.waiting), then the full wait (slices, cancellation).
            if self._wait_handle.wait(wait_value, 0, 0) != WAIT_REACHED:
                self._spin.max_spin_ns = spin_ns
                fence = self.wait_fence
                r = self._spin.wait_fence(
                    self._wait_handle, wait_value, timeout_ns,
                    lambda v, t: fence.wait_result(v, t, 0, cancel),
                )
                if r != WAIT_REACHED:
                    raise self.wait_failed(r, wait_value, timeout_ns, target)
            waited = time.perf_counter_ns()
            for handle in self._unsealed:
                handle.check()
            model_start = time.perf_counter_ns() if trace.active() else 0
            single = self._run_model(getattr(cancel, "run_options", None))
            inferred = time.perf_counter_ns()
            self._check_lost()
            self._signal_handle.signal(target)
            end = time.perf_counter_ns()
            if model_start:
                trace.mark_run(self.trace_tag, target, waited, model_start, inferred, end)
            return self.record_run(end, target, waited - start, inferred - waited, end - start,
                                   single)

    def wait_failed(self, result: int, wait_value: int, timeout_ns: int,
                    target: int) -> FencelineError:
        """The error of a run whose input-fence wait for ``wait_value`` ended with ``result``
        (a WAIT_* other than reached), worded once for every run path (the native runner calls
        this too): a timeout ran and signalled nothing, and says so (``queued: false``)."""
        try:
            self.wait_fence.raise_for(result, wait_value, timeout_ns)
        except TimedOut as e:
            return TimedOut(
                f"{e.message}; nothing ran and nothing was signalled (not queued): "
                "send the run again once the input is ready",
                {"queued": False, "wait_value": wait_value, "signal_value": target},
            )
        except FencelineError as e:
            return e
        raise ValueError(f"wait result {result} is not a failure")

    def infer(self) -> int:
        """Runs the model once over the bound views, now, and returns how long it took (ns).
        Streaming drivers call this after their own fence wait; raises ModelError."""
        with self._lock:
            if self._closed:
                raise Conflict("the session is closed")
            for handle in self._unsealed:
                handle.check()
            t0 = time.perf_counter_ns()
            if self._run_model():
                self.single_thread_runs += 1
            self._check_lost()
            self.runs += 1
            return time.perf_counter_ns() - t0

    def _run_model(self, run_options: Any = None) -> bool:
        """Runs the model over the bound views, on its one-thread session when the model runs
        on the CPU in flight, this one included, fill the usable CPUs (runtime/ort_options.py,
        ``single_thread_from``) and the frame is not large enough to take turns (same module,
        "Large frames take turns"); returns whether it did. ``run_options``: the client's
        (fenceline.ipc.abandon), else none. Raises ModelError."""
        model = self.model
        with self._cpu_run as counted:
            try:
                # The client's RunOptions, made once per connection (fenceline.ipc.abandon).
                if counted.single:
                    assert model.single is not None  # loaded before any binding to it
                    model.single.run_with_iobinding(self._single_binding, run_options)
                    return True
                assert model.session is not None
                model.session.run_with_iobinding(self._binding, run_options)
                return False
            except Exception as e:  # onnxruntime's own error types
                raise self.model_failed(e) from e

    def _check_lost(self) -> None:
        """After a run: memory that shrank during it was replaced by zero pages (the native
        fault guard), so what the model read or wrote is not the renderer's; fail the run
        rather than signal it."""
        for handle in self._unsealed:
            if handle.lost:
                raise self.memory_shrank()

    def close(self) -> None:
        """Waits for a run in flight, then unbinds and lets go of the views, so the mappings
        are released now even if something still holds this object. Safe to call twice."""
        native, self._native = self._native, None
        if native is not None:
            table, key = native
            table.remove(key)  # waits for a native run in flight
        with self._lock:
            if self._closed:
                return
            self._closed = True
            self._unbind(self._binding)
            if self._single_binding is not None:
                self._unbind(self._single_binding)
            self._runner = None
            self.inputs, self.outputs = {}, {}
            self._unsealed = []


def _unique_unsealed(memories: Iterable[MemoryImport]) -> list[Any]:
    seen: dict[int, Any] = {}
    for m in memories:
        if not m.handle.sealed:
            seen[id(m)] = m.handle
    return list(seen.values())

