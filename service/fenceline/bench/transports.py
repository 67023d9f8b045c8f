"""Lanes (one renderer's frame loop, see :mod:`fenceline.bench.engine`) for every path the
bench measures, each on its own frame of the same layout and contents:

- ``floor_lane``: onnxruntime called in process over an IOBinding of the frame, loaded through
  the service's own model loader (same session options): the floor.
- ``ipc_lane``, ``http_lane``: fenceline's interop API; a frame is "signal the input fence, ask
  for the run, get the output fence's value back"; outputs are written into the frame.
- ``cross_core_floor_lane``: the floor on a frame whose input another thread, pinned to another
  CPU, has just written (the cost of a frame moving between two cores' caches); ``ipc_lane``
  with ``write=True`` rewrites its input before each frame too, for the same comparison.
- ``ipc_pipelined_lane``: a renderer with ``depth`` frames in flight on one connection, one
  session per frame buffer: it sends frame i's RUN before it collects frame i - depth + 1's
  reply, so the service finds the next request waiting when it replies.
- ``alternating_lane``: the floor and IPC in turn, in blocks of a few frames, on one thread and
  one frame buffer, so that both see the machine as it is at that moment, on the same memory.
- ``kserve_binary_lane``: the KServe v2 protocol with tritonclient's binary tensor extension:
  inputs travel in the request, outputs come back in the reply and are copied into the frame.
- ``kserve_shm_lane``: Triton's system shared-memory extension: the frame is registered once
  as a region, requests name offsets in it, outputs are written into it.

The two KServe lanes run unchanged against a real Triton and against fenceline.
"""

from __future__ import annotations

import contextlib
import os
import secrets
import threading
import time
from collections import deque
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import numpy as np

from fenceline.bench.buffers import Buffers, Signature
from fenceline.bench.engine import NOTHING_DONE
from fenceline.client import Fence, HttpClient, IpcClient

_models: dict[str, Any] = {}
_models_lock = threading.Lock()


def _loaded(path: str, intra_op_threads: int | None = None) -> Any:
    """One loaded model per process, file and thread setting, shared by the lanes, as the
    service shares it. ``intra_op_threads`` None: the loader's default, as the service's."""
    from fenceline.runtime.models import Model, ModelSettings

    key = f"{path}#{intra_op_threads}"
    with _models_lock:
        if key not in _models:
            settings = ModelSettings() if intra_op_threads is None else ModelSettings(
                intra_op_threads=intra_op_threads)
            model = Model(Path(path).stem, "1", Path(path), settings)
            model.load()
            _models[key] = model
        return _models[key]


class _Lane:
    """``waits``: the lane's IpcClient.waits, where it has one."""

    def __init__(self, buffers: Buffers, frame: Any,
                 waits: Callable[[], dict[str, int]] | None = None) -> None:
        self.buffers = buffers
        self.frame = frame
        if waits is not None:
            self.waits = waits

    def digest(self) -> str:
        return self.buffers.output_digest()


@contextlib.contextmanager
def floor_lane(model_path: str, sig: Signature, fill: str, intra_op_threads: int | None = None,
               buffers: Buffers | None = None) -> Iterator[_Lane]:
    """``buffers``: run on this frame (the caller's to close), not on one of its own."""
    model = _loaded(model_path, intra_op_threads)
    with contextlib.ExitStack() as stack:
        b = buffers if buffers is not None else stack.enter_context(Buffers(sig, fill=fill))
        binding = model.session.io_binding()
        for t in sig.inputs:
            binding.bind_input(t.name, "cpu", 0, t.dtype, list(t.shape), b.array(t).ctypes.data)
        for t in sig.outputs:
            binding.bind_output(t.name, "cpu", 0, t.dtype, list(t.shape), b.array(t).ctypes.data)
        run = model.session.run_with_iobinding
        try:
            yield _Lane(b, lambda i: run(binding))
        finally:
            binding.clear_binding_inputs()
            binding.clear_binding_outputs()


class _Rewriter:
    """Writes a frame's inputs again, unchanged (so outputs still match), every time it is
    asked: the frame's cache lines are then dirty in the writer's CPU, as a renderer leaves
    them. ``cpu``: run the writes on a thread pinned to that CPU (None: the caller's thread)."""

    def __init__(self, b: Buffers, cpu: int | None = None) -> None:
        self.pairs = [(b.array(t), b.array(t).copy()) for t in b.sig.inputs]
        self.cpu = cpu
        self._go = threading.Semaphore(0)
        self._done = threading.Semaphore(0)
        self._stop = False
        self._thread: threading.Thread | None = None
        if cpu is not None:
            self._thread = threading.Thread(target=self._serve, name="bench-writer", daemon=True)
            self._thread.start()

    def _write(self) -> None:
        for target, source in self.pairs:
            np.copyto(target, source)

    def _serve(self) -> None:
        assert self.cpu is not None
        os.sched_setaffinity(0, {self.cpu})  # this thread only
        while True:
            self._go.acquire()
            if self._stop:
                return
            self._write()
            self._done.release()

    def __call__(self) -> None:
        if self._thread is None:
            self._write()
            return
        self._go.release()
        if not self._done.acquire(timeout=60):
            raise RuntimeError("the writer thread did not answer within 60 s")

    def close(self) -> None:
        if self._thread is not None:
            self._stop = True
            self._go.release()
            self._thread.join(10)


def other_cpus() -> tuple[int, set[int]] | None:
    """A CPU for the writer and the others for the run, or None with fewer than two."""
    cpus = sorted(os.sched_getaffinity(0))
    return (cpus[0], set(cpus[1:])) if len(cpus) >= 2 else None


@contextlib.contextmanager
def cross_core_floor_lane(model_path: str, sig: Signature, fill: str) -> Iterator[_Lane]:
    split = other_cpus()
    if split is None:
        raise RuntimeError("the cross-core floor needs two CPUs")
    writer_cpu, run_cpus = split
    model = _loaded(model_path)
    before = os.sched_getaffinity(0)
    with Buffers(sig, fill=fill) as b:
        rewrite = _Rewriter(b, writer_cpu)
        binding = model.session.io_binding()
        for t in sig.inputs:
            binding.bind_input(t.name, "cpu", 0, t.dtype, list(t.shape), b.array(t).ctypes.data)
        for t in sig.outputs:
            binding.bind_output(t.name, "cpu", 0, t.dtype, list(t.shape), b.array(t).ctypes.data)
        run, clock = model.session.run_with_iobinding, time.perf_counter
        os.sched_setaffinity(0, run_cpus)  # the lane's thread: never the writer's CPU

        def frame(i: int) -> float:
            rewrite()
            t0 = clock()
            run(binding)
            return clock() - t0

        try:
            yield _Lane(b, frame)
        finally:
            os.sched_setaffinity(0, before)
            rewrite.close()
            binding.clear_binding_inputs()
            binding.clear_binding_outputs()


@contextlib.contextmanager
def ipc_lane(socket_path: str, model: str, sig: Signature, fill: str, write: bool = False,
             buffers: Buffers | None = None) -> Iterator[_Lane]:
    """``write``: the renderer writes its inputs before each frame (untimed), as the
    cross-core floor's writer does. ``buffers``: run on this frame (the caller's to close)."""
    with contextlib.ExitStack() as stack:
        b = buffers if buffers is not None else stack.enter_context(Buffers(sig, fill=fill))
        ready, done = stack.enter_context(Fence()), stack.enter_context(Fence())
        client = stack.enter_context(IpcClient(socket_path, name="fenceline-bench"))
        memory = client.import_memory(b.frame)
        ins, outs = b.views(memory)
        sid = client.create_session(model, ins, outs, client.import_fence(ready),
                                    client.import_fence(done))["id"]
        signal, run = ready.signal, client.run

        def frame(i: int) -> None:
            signal(i)
            run(sid, i)

        def waits() -> dict[str, int]:
            return client.waits

        if not write:
            yield _Lane(b, frame, waits)  # closing the connection releases what it created
            return
        rewrite, clock = _Rewriter(b), time.perf_counter

        def written(i: int) -> float:
            rewrite()
            t0 = clock()
            frame(i)
            return clock() - t0

        yield _Lane(b, written, waits)


class _PipelinedLane:
    def __init__(self, client: IpcClient, slots: list[tuple[Buffers, Any, str]]) -> None:
        self.client = client
        self.slots = slots
        self.pending: deque[tuple[int, float]] = deque()  # (request id, sent at), oldest first

    def frame(self, i: int) -> float:
        done = NOTHING_DONE
        if len(self.pending) == len(self.slots):
            # Frame i reuses the buffers of frame i - depth: that one must be back first.
            rid, sent = self.pending.popleft()
            self.client.recv_run_reply(rid)
            done = time.perf_counter() - sent
        _, signal, sid = self.slots[i % len(self.slots)]
        signal(i)
        self.pending.append((self.client.send_run(sid, i), time.perf_counter()))
        return done

    def waits(self) -> dict[str, int]:
        """The client's waits, and how its RUNs in flight used the run page."""
        return {**self.client.waits, **{f"page_{k}": v for k, v in
                                        self.client.run_page_counts.items()}}

    def drain(self) -> None:
        while self.pending:
            self.client.recv_run_reply(self.pending.popleft()[0])

    def digest(self) -> str:
        self.drain()
        digests = {b.output_digest() for b, _, _ in self.slots}
        return digests.pop() if len(digests) == 1 else "buffers differ"


class _AlternatingLane:
    """The floor and IPC in turn on one frame buffer, in blocks of ``BLOCK`` frames: each call
    runs a block of each, the floor's first on odd calls, returns the IPC frames' times (the
    engine's samples) and keeps the floor's in ``partner_samples()``. Within a block each path
    runs back to back, as in its own row: single frames in turn left the service asleep before
    every RUN, which on 16 cores, where a 4K frame takes 1 ms, read 1.055-1.087 of the floor."""

    BLOCK = 8

    def __init__(self, floor: _Lane, ipc: _Lane) -> None:
        self.floor, self.ipc = floor, ipc
        self.floor_s: list[float] = []
        self.value = 0  # the IPC frames' fence values

    def _block(self, lane: _Lane) -> list[float]:
        clock, out = time.perf_counter, []
        for _ in range(self.BLOCK):
            self.value += 1
            t0 = clock()
            lane.frame(self.value)
            out.append(clock() - t0)
        return out

    def frame(self, i: int) -> list[float]:
        if i % 2:
            self.floor_s += self._block(self.floor)
            return self._block(self.ipc)
        ipc = self._block(self.ipc)
        self.floor_s += self._block(self.floor)
        return ipc

    def partner_samples(self) -> list[float]:
        return self.floor_s

    def waits(self) -> dict[str, int]:
        return self.ipc.waits()

    def digest(self) -> str:
        """Both paths' outputs, each written once more into cleared outputs by that path alone."""
        digests = []
        for lane in (self.floor, self.ipc):
            self.floor.buffers.clear_outputs()
            self.value += 1
            lane.frame(self.value)
            digests.append(lane.digest())
        floor, ipc = digests
        return ipc if floor == ipc else f"floor {floor}, ipc {ipc}"


@contextlib.contextmanager
def alternating_lane(model_path: str, socket_path: str, model: str, sig: Signature, fill: str
                     ) -> Iterator[_AlternatingLane]:
    """The floor and ``ipc_lane`` on one frame buffer: both read and write the same memory, so
    where that memory happens to lie costs both alike (two buffers of a 4K frame, filled the same
    way, ran 3-6% apart on 2 CPUs, which one varying from run to run)."""
    with Buffers(sig, fill=fill) as b, floor_lane(model_path, sig, fill, buffers=b) as floor, \
            ipc_lane(socket_path, model, sig, fill, buffers=b) as ipc:
        yield _AlternatingLane(floor, ipc)


@contextlib.contextmanager
def ipc_pipelined_lane(socket_path: str, model: str, sig: Signature, fill: str, depth: int
                       ) -> Iterator[_PipelinedLane]:
    with contextlib.ExitStack() as stack:
        client = stack.enter_context(IpcClient(socket_path, name="fenceline-bench"))
        slots = []
        for _ in range(depth):
            b = stack.enter_context(Buffers(sig, fill=fill))
            ready, done = stack.enter_context(Fence()), stack.enter_context(Fence())
            ins, outs = b.views(client.import_memory(b.frame))
            sid = client.create_session(model, ins, outs, client.import_fence(ready),
                                        client.import_fence(done))["id"]
            slots.append((b, ready.signal, sid))
        lane = _PipelinedLane(client, slots)
        yield lane
        lane.drain()  # the replies in flight, before the connection closes


@contextlib.contextmanager
def http_lane(url: str, model: str, sig: Signature, fill: str) -> Iterator[_Lane]:
    with contextlib.ExitStack() as stack:
        b = stack.enter_context(Buffers(sig, named=True, fill=fill))
        ready = stack.enter_context(Fence(named=True))
        done = stack.enter_context(Fence(named=True))
        client = stack.enter_context(HttpClient(url, timeout_s=120))
        assert b.name and ready.name and done.name
        memory = client.import_memory(b.name)
        stack.callback(client.release_memory, memory)
        wait_id = client.import_fence(ready.name)
        stack.callback(client.release_fence, wait_id)
        signal_id = client.import_fence(done.name)
        stack.callback(client.release_fence, signal_id)
        ins, outs = b.views(memory)
        sid = client.create_session(model, ins, outs, wait_id, signal_id)["id"]
        stack.callback(client.release_session, sid)

        def frame(i: int) -> None:
            ready.signal(i)
            client.run(sid, i)

        yield _Lane(b, frame)


def _triton_client(url: str) -> Any:
    import tritonclient.http as httpclient

    # Made in the lane's own thread: a tritonclient HTTP client works only in its creator's.
    return httpclient.InferenceServerClient(url.split("://", 1)[-1].rstrip("/"),
                                            connection_timeout=120, network_timeout=120)


def _fresh(headers: dict[str, str] | None) -> dict[str, str] | None:
    # tritonclient adds Inference-Header-Content-Length to the dict it is given; a dict kept
    # across calls would send one request's length with the next.
    return dict(headers) if headers else None


@contextlib.contextmanager
def kserve_binary_lane(url: str, model: str, sig: Signature, fill: str,
                       headers: dict[str, str] | None = None) -> Iterator[_Lane]:
    import tritonclient.http as httpclient

    with Buffers(sig, fill=fill) as b:
        client = _triton_client(url)
        try:
            inputs = [(httpclient.InferInput(t.name, list(t.shape), t.datatype), b.array(t))
                      for t in sig.inputs]
            outputs = [httpclient.InferRequestedOutput(t.name, binary_data=True)
                       for t in sig.outputs]
            targets = [(t.name, b.array(t)) for t in sig.outputs]
            requests = [i for i, _ in inputs]

            def frame(i: int) -> None:
                for request, array in inputs:
                    request.set_data_from_numpy(array, binary_data=True)
                result = client.infer(model, requests, outputs=outputs, headers=_fresh(headers))
                for name, array in targets:
                    array[...] = result.as_numpy(name)  # the renderer needs it in its frame

            yield _Lane(b, frame)
        finally:
            client.close()


@contextlib.contextmanager
def kserve_shm_lane(url: str, model: str, sig: Signature, fill: str,
                    headers: dict[str, str] | None = None) -> Iterator[_Lane]:
    import tritonclient.http as httpclient

    with Buffers(sig, named=True, fill=fill) as b:
        assert b.name is not None
        client = _triton_client(url)
        region = f"fenceline_bench_{os.getpid()}_{secrets.token_hex(4)}"
        registered = False
        try:
            client.register_system_shared_memory(region, b.name, b.frame.size,
                                                 headers=_fresh(headers))
            registered = True
            ins = [(t.name, list(t.shape), t.datatype, t.nbytes, b.offsets[t.name])
                   for t in sig.inputs]
            outs = [(t.name, t.nbytes, b.offsets[t.name]) for t in sig.outputs]

            def frame(i: int) -> None:
                # Fresh request objects each frame: tritonclient's do not survive reuse with
                # shared-memory parameters (the second request's JSON is malformed).
                requests = []
                for name, shape, dt, nbytes, offset in ins:
                    request = httpclient.InferInput(name, shape, dt)
                    request.set_shared_memory(region, nbytes, offset=offset)
                    requests.append(request)
                outputs = []
                for name, nbytes, offset in outs:
                    out = httpclient.InferRequestedOutput(name)
                    out.set_shared_memory(region, nbytes, offset=offset)
                    outputs.append(out)
                client.infer(model, requests, outputs=outputs, headers=_fresh(headers))

            yield _Lane(b, frame)
        finally:
            if registered:
                with contextlib.suppress(Exception):  # the server may be gone, and its regions
                    client.unregister_system_shared_memory(region, headers=_fresh(headers))
            client.close()
