"""How a CUDA session decides to run its model as a CUDA graph (runtime/cuda_session.py,
capture_graph), at its seam: a stream that captures or refuses, a run that enqueues or fails;
and how it refuses an onnxruntime session that fell back to the CPU (require_cuda_provider).
The capture itself needs a GPU (tests/gpu/test_gpu.py runs it)."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

import onnxruntime as ort
import pytest

from fenceline.errors import ModelError, Unsupported
from fenceline.runtime.cuda_session import capture_graph, require_cuda_provider


@dataclass
class Graph:
    nodes: int


@dataclass
class Stream:
    nodes: int = 1
    refuse_begin: bool = False
    spoiled: bool = False
    calls: list[str] = field(default_factory=list)

    def begin_capture(self) -> None:
        self.calls.append("begin")
        if self.refuse_begin:
            raise Unsupported("this CUDA driver has no graph capture")

    def end_capture(self) -> Graph:
        self.calls.append("end")
        if self.spoiled:
            raise Unsupported("cuStreamEndCapture failed: CUDA_ERROR_STREAM_CAPTURE_INVALIDATED")
        return Graph(self.nodes)


def test_a_run_that_enqueues_work_becomes_the_graph() -> None:
    s = Stream(nodes=3)
    graph, why = capture_graph(s, lambda: s.calls.append("run"))
    assert graph == Graph(3) and why == ""
    assert s.calls == ["begin", "run", "end"]


def test_a_driver_without_graphs_keeps_the_onnxruntime_run() -> None:
    s = Stream(refuse_begin=True)
    graph, why = capture_graph(s, lambda: s.calls.append("run"))
    assert graph is None and why == "no capture: this CUDA driver has no graph capture"
    assert s.calls == ["begin"]  # the model did not run


def test_a_run_that_fails_under_capture_still_ends_the_capture() -> None:
    def run() -> None:
        raise RuntimeError("CUDA failure 901: operation not permitted when stream is capturing\n"
                           "more")

    s = Stream(spoiled=True)
    graph, why = capture_graph(s, run)
    assert graph is None
    assert why == ("the model's run cannot be captured: CUDA failure 901: operation not "
                   "permitted when stream is capturing")
    assert s.calls == ["begin", "end"]


def test_a_spoiled_capture_is_refused() -> None:
    s = Stream(spoiled=True)
    graph, why = capture_graph(s, lambda: None)
    assert graph is None and why.startswith("the capture failed: cuStreamEndCapture failed")


def test_an_empty_graph_is_refused() -> None:
    graph, why = capture_graph(Stream(nodes=0), lambda: None)
    assert graph is None and why == "the model's run enqueued nothing on the stream"


def test_a_session_onnxruntime_put_on_the_cpu_is_refused_with_what_it_gave(
    model_repo: Path,
) -> None:
    # What onnxruntime hands back when its CUDA provider does not start: a session on its CPU
    # provider (a real one here; tests/gpu makes CUDA sessions that pass the same check).
    session = ort.InferenceSession(str(model_repo / "add_64x64" / "1" / "model.onnx"),
                                   providers=["CPUExecutionProvider"])
    with pytest.raises(ModelError) as e:
        require_cuda_provider(session, "add_64x64")
    assert "'add_64x64'" in str(e.value) and "CPUExecutionProvider" in str(e.value)
