"""The Windows pipe's row of docs/architecture.md's table ("Who serves a run"): a host session's
RUNs over the named pipe, with the input fence there or signalled late, and a streaming session
made over the pipe, each read back from the native engine's counters
(``fenceline_native_runs_total{outcome}``) with the exact change asserted, so a pipe whose runs
the engine did not serve fails. A late fence is signalled once the service is seen asleep on it
(the page's ``waiters`` word, counted always on Windows: docs/fences.md)."""

from __future__ import annotations

from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import numpy as np
import pytest

from fenceline import _native
from fenceline.client import Fence, IpcClient, SharedFrame, View
from tests.support.metrics import changed, native_runs
from tests.support.waiting import wait_until
from tests.windows.test_service import WinService

SHAPE = [1, 3, 64, 64]
NBYTES = 3 * 64 * 64 * 4


class PipeRenderer:
    """A frame and two fences by name, and a session on them made over the pipe."""

    def __init__(self, service: WinService, unique: str, **options: Any) -> None:
        self.frame = SharedFrame(2 * NBYTES, name=f"Local\\{unique}-frame")
        self.ready, self.done = Fence(name=f"Local\\{unique}-ready"), Fence(name=f"Local\\{unique}-done")
        # The input fence's page, read here for its sleepers.
        self.page = _native.HostMemory.open_shm(self.ready.name, 0, 0, False)
        self.x = self.frame.array(np.float32, SHAPE)
        self.y = self.frame.array(np.float32, SHAPE, NBYTES)
        self.client = IpcClient(service.pipe)
        mem = self.client.import_memory(name=self.frame.name)
        wid, did = self.client.import_fence(name=self.ready.name), self.client.import_fence(name=self.done.name)
        self.session_id = self.client.create_session(
            "add_64x64", {"x": View(mem, "FP32", SHAPE)}, {"y": View(mem, "FP32", SHAPE, NBYTES)},
            wid, did, **options)["id"]

    def asleep(self) -> None:
        """Until the service sleeps on the input fence."""
        waiters = self.page.array(np.dtype("<u4"), [7])
        wait_until(lambda: int(waiters[6]) >= 1, 60, what="the service asleep on the input fence")

    def close(self) -> None:
        self.client.close()
        self.page.close()
        for obj in (self.frame, self.ready, self.done):
            obj.close()


@pytest.fixture
def renderer(service: WinService, unique: str) -> Iterator[PipeRenderer]:
    r = PipeRenderer(service, unique)
    yield r
    r.close()


def test_pipe_request_mode(service: WinService, renderer: PipeRenderer) -> None:
    before = native_runs(service)
    for v in (1, 2, 3):
        renderer.x[:] = 10 * v
        renderer.ready.signal(v)
        assert renderer.client.run(renderer.session_id, v).signal_value == v
        assert np.all(renderer.y == 10 * v + 1)
    assert changed(before, native_runs(service)) == {"answered": 3}


def test_pipe_late_fence(service: WinService, renderer: PipeRenderer) -> None:
    before = native_runs(service)
    with ThreadPoolExecutor(1) as pool:
        for v in (1, 2):
            renderer.x[:] = v
            reply = pool.submit(renderer.client.run, renderer.session_id, v, None, 60_000)
            renderer.asleep()
            renderer.ready.signal(v)
            assert reply.result(60).signal_value == v and np.all(renderer.y == v + 1)
    assert changed(before, native_runs(service)) == {"answered": 2, "waited": 2}


def test_pipe_streaming(service: WinService, unique: str) -> None:
    r = PipeRenderer(service, unique, mode="streaming", policy="every")
    try:
        before = native_runs(service)
        for v in (1, 2, 3):
            r.x[:] = v
            r.asleep()
            r.ready.signal(v)
            assert r.done.wait(v, 60) and np.all(r.y == v + 1), v
        # Each frame waited for its input fence in the engine (the service asleep on it first).
        assert changed(before, native_runs(service)) == {"answered": 3, "waited": 3}
    finally:
        r.close()
