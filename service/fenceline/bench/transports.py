"""Per-frame measurements on shared buffers: in-process onnxruntime (the floor), IPC and HTTP.

Every transport runs the same model on the same named shared-memory buffers; each run is
"signal the input fence, ask for the run, get the output fence value back"."""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import onnxruntime as ort

from fenceline.client import Fence, HttpClient, IpcClient, SharedFrame, View


@dataclass
class Buffers:
    """Input then output of one 1x3xHxW FP32 frame in one named shared-memory object."""

    shape: list[int]
    frame: SharedFrame

    @classmethod
    def create(cls, shape: list[int]) -> Buffers:
        nbytes = int(np.prod(shape)) * 4
        frame = SharedFrame(2 * nbytes, named=True)
        b = cls(shape, frame)
        b.input[:] = np.random.default_rng(0).random(shape, dtype=np.float32)
        b.output[:] = 0
        return b

    @property
    def nbytes(self) -> int:
        return int(np.prod(self.shape)) * 4

    @property
    def input(self) -> np.ndarray:
        return self.frame.array(np.float32, self.shape)

    @property
    def output(self) -> np.ndarray:
        return self.frame.array(np.float32, self.shape, self.nbytes)

    def close(self) -> None:
        self.frame.close()


def timed(fn: Callable[[int], None], iterations: int, warmup: int) -> list[float]:
    for i in range(1, warmup + 1):
        fn(i)
    samples = []
    for i in range(warmup + 1, warmup + iterations + 1):
        t0 = time.perf_counter()
        fn(i)
        samples.append(time.perf_counter() - t0)
    return samples


def in_process(model_path: Path, buffers: Buffers, iterations: int, warmup: int) -> list[float]:
    """onnxruntime called directly with an IOBinding over the same buffers, same options."""
    so = ort.SessionOptions()
    so.add_session_config_entry("session.intra_op.allow_spinning", "0")
    sess = ort.InferenceSession(str(model_path), so, providers=["CPUExecutionProvider"])
    binding = sess.io_binding()
    binding.bind_input("x", "cpu", 0, np.float32, buffers.shape, buffers.input.ctypes.data)
    binding.bind_output("y", "cpu", 0, np.float32, buffers.shape, buffers.output.ctypes.data)
    return timed(lambda i: sess.run_with_iobinding(binding), iterations, warmup)


def _views(memory: str, buffers: Buffers) -> tuple[dict[str, View], dict[str, View]]:
    return (
        {"x": View(memory, "FP32", buffers.shape)},
        {"y": View(memory, "FP32", buffers.shape, buffers.nbytes)},
    )


def ipc(socket_path: Path, model: str, buffers: Buffers, iterations: int, warmup: int) -> list[float]:
    with IpcClient(socket_path, name="fenceline-bench") as client, Fence() as ready, Fence() as done:
        memory = client.import_memory(buffers.frame)
        ins, outs = _views(memory, buffers)
        sid = client.create_session(
            model, ins, outs, client.import_fence(ready), client.import_fence(done)
        )["id"]

        def frame(i: int) -> None:
            ready.signal(i)
            client.run(sid, i)

        return timed(frame, iterations, warmup)


def http(url: str, model: str, buffers: Buffers, iterations: int, warmup: int) -> list[float]:
    with HttpClient(url) as client, Fence(named=True) as ready, Fence(named=True) as done:
        assert buffers.frame.name and ready.name and done.name
        memory = client.import_memory(buffers.frame.name)
        ins, outs = _views(memory, buffers)
        wait_id, signal_id = client.import_fence(ready.name), client.import_fence(done.name)
        sid = client.create_session(model, ins, outs, wait_id, signal_id)["id"]

        def frame(i: int) -> None:
            ready.signal(i)
            client.run(sid, i)

        try:
            return timed(frame, iterations, warmup)
        finally:
            client.release_session(sid)
            client.release_memory(memory)
            client.release_fence(wait_id)
            client.release_fence(signal_id)
