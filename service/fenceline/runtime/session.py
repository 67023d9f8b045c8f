"""What every session is, whatever it runs on: the protocol the runtime, the transports and
the status page program against. Implementations: runtime/host_session.py (host memory,
host_timeline fences, waits on the CPU) and runtime/cuda_session.py (device memory, Vulkan
timeline semaphores waited on a CUDA stream); runtime/backends.py picks one per session."""

from __future__ import annotations

import threading
from collections import deque
from collections.abc import Mapping
from typing import Any, NamedTuple, Protocol

from fenceline.interop.handles import Binding, FenceHandle
from fenceline.runtime.models import Model
from fenceline.waiting import Cancel


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


RECENT_RUNS = 128  # what the status page shows: fps and a latency sparkline


class StreamControl(Protocol):
    """A streaming session's worker as the session sees it (runtime/streaming.py builds it);
    the session only reports it, so this module needs nothing of the streaming machinery."""

    def describe(self) -> dict[str, Any]: ...


class Session(Protocol):
    """One model bound to imported views between a wait fence and a signal fence. Runs are
    serialized per session; different sessions run in parallel. ``close()`` waits for a run in
    flight and is safe to call twice; a run after it raises Conflict."""

    # (perf_counter_ns at the end of the run, its result), newest last; read with .copy().
    recent: deque[tuple[int, RunResult]]
    stream: StreamControl | None  # set by the runtime for streaming sessions
    device_label: str  # the GPU's metrics label; "" for host sessions
    runs: int
    last_signal_value: int

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

    def run(
        self,
        wait_value: int,
        signal_value: int | None,
        timeout_ns: int,
        spin_ns: int,
        cancel: threading.Event | Cancel | None = None,
        *,
        asynchronous: bool = False,
    ) -> RunResult:
        """wait(input fence >= wait_value) -> the model -> signal(output fence := signal_value
        or wait_value). ``asynchronous``: reply once the work is queued, where the
        implementation has a queue (host sessions always run to completion)."""
        ...

    def close(self) -> None: ...

    def describe(self) -> dict[str, Any]: ...
