"""A host session: one model bound through one IOBinding to imported host views, inputs and
outputs alike, between two host_timeline fences waited and signalled on the CPU by the run
engine (native/importer/engine/host_runs.cpp), which holds its one run body."""

from __future__ import annotations

import logging
from collections.abc import Iterable
from typing import Any

from fenceline import _native, waiting
from fenceline.errors import Conflict, FencelineError
from fenceline.interop.host_fence import FenceImport
from fenceline.interop.host_memory import MemoryImport, TensorBinding
from fenceline.runtime import ort_binding
from fenceline.runtime.models import Model
from fenceline.runtime.session import SessionBase

log = logging.getLogger("fenceline.runtime")


class HostSession(SessionBase[TensorBinding, FenceImport]):
    """What the run engine needs of a host session (native/importer/engine/host_runs.cpp runs
    it): the model's IOBinding over the imported views, the fences' native handles, and the
    failure texts and counters the engine calls back. Its runs are serialized by the engine;
    different sessions run in parallel."""

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
        # Renderer memory that could shrink under the mapping is checked before each run.
        self._unsealed = _unique_unsealed(b.memory for b in (*inputs.values(), *outputs.values()))
        self._binding = model.session.io_binding()
        self._bind(self._binding, "cpu", 0)
        # The binding to the model's one-thread session (Model.single), once use_single_thread
        # made it.
        self._single_binding: Any = None
        # The frame's bytes, inputs and outputs: a large frame takes turns on a full machine
        # (_native.CpuRun, runtime/ort_options.py, "Large frames take turns").
        self._frame_bytes = sum(b.view.nbytes for b in (*inputs.values(), *outputs.values()))
        self._native: tuple[Any, bytes] | None = None  # (RunTable, key) once registered
        self._runner: Any = None  # the _native.SessionRunner, once registered
        self._frame: tuple[Any, str, bytes] | None = None  # (RunTable, owner, key): streaming

    def register(self, table: Any, session_id: str, owner: str, series: Any,
                 streaming: bool) -> None:
        """Hands this session to ``table`` (the runtime's ``_native.RunTable``, the run
        engine), which runs it for ``owner`` from then on, until :meth:`close`; ``series``
        records its runs (Metrics.run_series); a ``streaming`` session runs only its worker's
        frames (:meth:`run_frames`). The model is called as runtime/ort_binding.py says."""
        assert self.model.session is not None
        run, binding = ort_binding.native_entry(self.model.session, self._binding)
        with self._lock:
            if self._closed:
                return
            runner = _native.SessionRunner(
                owner, run, binding, self, self.wait_fence.handle, self.signal_fence.handle,
                self._unsealed, series, streaming,
            )
            if self._single_binding is not None:
                self._hand_single(runner)
            key = bytes.fromhex(session_id)
            table.add(key, runner)
            self._native = (table, key)
            self._runner = runner
            if streaming:
                self._frame = (table, owner, key)

    def run_frames(self, value: int, backlog: int, spin: Any, cancel: waiting.Flag,
                   return_after_ns: int) -> tuple[int, int, int, FencelineError | None]:
        """Frames of a streaming session (runtime/streaming.py), one after another in the run
        engine (``RunTable.run_stream``): the first waits there for the input fence to reach
        ``value``, each next one for the value after the one before it signalled, by the
        worker's spin rule ``spin`` (a ``_native.ReceiveSpin``); each runs the model and
        signals the newest value the fence reached, or the value ``backlog - 1`` below it when
        that is further ahead. Returns (frames, skipped, last_value, failure) once ``cancel``
        is set, a frame failed (``failure``, naming the frame in ``details["signal_value"]``),
        or ``return_after_ns`` passed."""
        frame = self._frame
        if frame is None:
            raise Conflict("the session is closed")
        table, owner, key = frame
        frames, skipped, last, failure = table.run_stream(
            owner, key, value, backlog, waiting.gate().native, cancel, spin, return_after_ns)
        return frames, skipped, last, failure

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
            if self._runner is not None:  # waits for a run in flight
                self._hand_single(self._runner)

    def _hand_single(self, runner: Any) -> None:
        """Gives the engine the model's one-thread session and its binding."""
        runner.set_single(*ort_binding.native_entry(self.model.single, self._single_binding),
                          self.model.single_from, self._frame_bytes)

    @property
    def output_devices(self) -> dict[str, str]:
        return {name: self.model.device for name in self.outputs}

    def close(self) -> None:
        """Waits for a run in flight, then unbinds and lets go of the views, so the mappings
        are released now even if something still holds this object. Safe to call twice."""
        native, self._native = self._native, None
        self._frame = None
        if native is not None:
            table, key = native
            table.remove(key)  # waits for a run in flight
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

