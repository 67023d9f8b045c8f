"""Every transport x session kind cell of docs/architecture.md ("Who serves a run"), driven
against a real service process by real clients: the Python IPC client over the Unix socket and
over its run page, and httpx over HTTP. Each test reads the native engine's counters
(``fenceline_native_runs_total{outcome}``) before and after, and asserts the exact change: a
cell whose runs the engine did not serve fails, however right its replies are.

Beside the cells, the scenarios a run can meet on each transport: a fence signalled late
(the service is seen asleep on it first), several RUNs in flight on one connection, two
connections and one session, a session closed while its RUN waits, and the shutdown."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import socket
from collections.abc import Callable, Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path
from typing import Any

import httpx
import numpy as np
import pytest

from fenceline import _native
from fenceline.client import Fence, IpcClient, ServiceError, SharedFrame, View
from tests.support.helpers import open_session
from tests.support.metrics import changed, native_runs
from tests.support.service import Service, running, stop_service
from tests.support.waiting import wait_until

pytestmark = pytest.mark.skipif(
    not hasattr(_native, "RunTable"), reason="the native engine's transports here are POSIX's")

SHAPE = [1, 3, 64, 64]
NBYTES = 3 * 64 * 64 * 4
TRANSPORTS = ("socket", "page", "http")


@contextlib.contextmanager
def counted(service: Service) -> Iterator[dict[str, int]]:
    """The engine's counters that changed over the block, by how much, filled in when it ends:
    every outcome it leaves out stayed as it was."""
    before = native_runs(service)
    change: dict[str, int] = {}
    yield change
    change.update(changed(before, native_runs(service)))


def sleepers(fence: Fence) -> int:
    """Waiters asleep on the fence now (docs/fences.md: the page's ``waiters`` word)."""
    return int.from_bytes(os.pread(fence.fd, 4, 24), "little")


def asleep_on(fence: Fence, n: int = 1) -> None:
    """Until the service sleeps on ``fence``: a RUN sent ahead of it is waiting there."""
    wait_until(lambda: sleepers(fence) >= n, 30, what="the service asleep on the input fence")


class Cell:
    """A renderer of one transport and one session kind: its frame (input, then output), its
    fences and its session, made over that transport."""

    def __init__(self, service: Service, transport: str, mode: str = "request") -> None:
        self.transport = transport
        self.frame = SharedFrame(2 * NBYTES, named=transport == "http")
        self.wait, self.done = (Fence(named=transport == "http") for _ in range(2))
        self.x = self.frame.array(np.float32, SHAPE)
        self.y = self.frame.array(np.float32, SHAPE, NBYTES)
        options: dict[str, Any] = {"mode": mode, "policy": "every"} if mode == "streaming" else {}
        if transport == "http":
            self.http = httpx.Client(base_url=service.url, timeout=60)
            mem = self.post("/v2/interop/memory", handle_type="host_shm", name=self.frame.name)
            wid, did = (self.post("/v2/interop/fences", fence_type="host_timeline", name=f.name)
                        for f in (self.wait, self.done))
            view = {"memory": mem, "datatype": "FP32", "shape": SHAPE}
            self.session_id = self.post(
                "/v2/interop/sessions", model="add_64x64", inputs={"x": view | {"offset_bytes": 0}},
                outputs={"y": view | {"offset_bytes": NBYTES}}, wait_fence=wid,
                signal_fence=did, **options)
        else:
            self.client = IpcClient(service.socket, name=f"run-entry-{transport}")
            mem = self.client.import_memory(self.frame)
            wid, did = self.client.import_fence(self.wait), self.client.import_fence(self.done)
            self.session_id = self.client.create_session(
                "add_64x64", {"x": View(mem, "FP32", SHAPE)},
                {"y": View(mem, "FP32", SHAPE, NBYTES)}, wid, did, **options)["id"]

    def post(self, path: str, **body: Any) -> str:
        r = self.http.post(path, json=body)
        assert r.status_code == 201, r.text
        return str(r.json()["id"])

    def run(self, wait_value: int, signal_value: int | None = None,
            session_id: str | None = None) -> int | str:
        """One RUN over this cell's transport: the value signalled, or the error's code."""
        sid = session_id or self.session_id
        if self.transport == "http":
            r = self.http.post(f"/v2/interop/sessions/{sid}/run", json={
                "wait_value": wait_value, "signal_value": signal_value, "timeout_ms": 60_000})
            body = r.json()
            return int(body["signal_value"]) if r.status_code == 200 else str(body["code"])
        try:
            if self.transport == "page":
                reply = self.client.run(sid, wait_value, signal_value, timeout_ms=60_000)
                assert self.client._end.has_page  # carried by the page, not the socket
            else:  # the socket: send_run never takes the page
                reply = self.client.recv_run_reply(
                    self.client.send_run(sid, wait_value, signal_value, timeout_ms=60_000))
        except ServiceError as e:
            return e.code
        return reply.signal_value

    def frames(self, values: range) -> None:
        """A streaming session's frames: each value's input, the fence, then its output, the
        service seen asleep on the fence first."""
        for v in values:
            self.x[:] = v
            asleep_on(self.wait)
            self.wait.signal(v)
            assert self.done.wait(v, 60), v
            assert np.all(self.y == v + 1), v

    def close(self) -> None:
        if self.transport == "http":
            self.http.delete(f"/v2/interop/sessions/{self.session_id}")
            self.http.close()
        else:
            self.client.close()
        for obj in (self.frame, self.wait, self.done):
            obj.close()


@pytest.fixture
def cells(service: Service) -> Iterator[Callable[..., Cell]]:
    made: list[Cell] = []

    def make(transport: str, mode: str = "request") -> Cell:
        made.append(Cell(service, transport, mode))
        return made[-1]

    yield make
    for cell in made:
        cell.close()


@pytest.fixture
def pool() -> Iterator[ThreadPoolExecutor]:
    with ThreadPoolExecutor(4) as p:
        yield p


# -- the table's cells ----------------------------------------------------------------------


@pytest.mark.parametrize("transport", TRANSPORTS)
def test_request_mode(service: Service, cells: Callable[..., Cell], transport: str) -> None:
    """Frames whose input fence is there when their RUN comes."""
    cell = cells(transport)
    with counted(service) as change:
        for v in (1, 2, 3):
            cell.x[:] = 10 * v
            cell.wait.signal(v)
            assert cell.run(v) == v and cell.done.value == v
            assert np.all(cell.y == 10 * v + 1)
    assert change == {"answered": 3}


@pytest.mark.parametrize("transport", ["socket", "http"])
def test_streaming(service: Service, cells: Callable[..., Cell], transport: str) -> None:
    """A streaming session made and started over the transport: the service runs each value of
    its input fence itself, every frame through the engine, which waits for the fence too (the
    service is seen asleep on it before each value comes)."""
    cell = cells(transport, "streaming")
    with counted(service) as change:
        cell.frames(range(1, 4))
    assert change == {"answered": 3, "waited": 3}


def test_pausing_a_stream_ends_its_frame_s_wait_in_the_engine(
        service: Service, cells: Callable[..., Cell]) -> None:
    """A streaming session paused while its frame waits on the input fence in the engine: the
    wait ends, nothing runs or is counted, and once started again the next value runs."""
    cell = cells("socket", "streaming")
    with counted(service) as change:
        asleep_on(cell.wait)
        assert cell.client.pause_session(cell.session_id)["stream"]["state"] == "paused"
        assert sleepers(cell.wait) == 0  # pause returned once the worker's wait ended
        cell.wait.signal(1)
    assert change == {}
    assert cell.done.value == 0
    cell.x[:] = 5
    with counted(service) as change:
        cell.client.start_session(cell.session_id)
        assert cell.done.wait(1, 60) and np.all(cell.y == 6)
        cell.frames(range(2, 3))
    # Value 1 was there when the worker started again; value 2 came late.
    assert change == {"answered": 2, "waited": 1}


def test_streaming_takes_no_run_from_the_page(service: Service,
                                              cells: Callable[..., Cell]) -> None:
    """The run page carries RUNs, and a streaming session takes none: a RUN posted there for
    one is refused, and its frames go on."""
    cell = cells("page", "streaming")
    request = open_session(cell.client, "add_64x64", SHAPE)  # a first RUN opens the page
    request.wait.signal(1)
    assert cell.client.run(request.session_id, 1).signal_value == 1
    try:
        with counted(service) as change:
            assert cell.run(1) == "conflict"
            cell.frames(range(1, 3))
    finally:
        request.close()
    assert change == {"answered": 2, "failed": 1, "waited": 2}


# -- scenarios ------------------------------------------------------------------------------


@pytest.mark.parametrize("transport", TRANSPORTS)
def test_late_fence(service: Service, cells: Callable[..., Cell], pool: ThreadPoolExecutor,
                    transport: str) -> None:
    """A RUN sent ahead of its input fence waits in the engine until the fence comes."""
    cell = cells(transport)
    with counted(service) as change:
        for v in (1, 2):
            cell.x[:] = v
            reply = pool.submit(cell.run, v)
            asleep_on(cell.wait)
            cell.wait.signal(v)
            assert reply.result(60) == v and np.all(cell.y == v + 1)
    assert change == {"answered": 2, "waited": 2}


def test_several_in_flight_on_one_connection(service: Service,
                                             cells: Callable[..., Cell]) -> None:
    """Three RUNs sent at once, each ahead of its fence, answered in order, each waited for
    in the engine."""
    cell = cells("socket")
    with counted(service) as change:
        sent = [cell.client.send_run(cell.session_id, v, timeout_ms=60_000) for v in (1, 2, 3)]
        for v, request_id in zip((1, 2, 3), sent, strict=True):
            cell.x[:] = v
            asleep_on(cell.wait)
            cell.wait.signal(v)
            assert cell.client.recv_run_reply(request_id).signal_value == v
            assert np.all(cell.y == v + 1)
    assert change == {"answered": 3, "waited": 3}


@pytest.mark.parametrize("transport", ["socket", "page"])
def test_two_connections_one_session(service: Service, cells: Callable[..., Cell],
                                     pool: ThreadPoolExecutor, transport: str) -> None:
    """While one connection's RUN waits on its session's fence, another connection of the same
    user that names that session is refused at once (a session is its connection's), and the
    waiting RUN is then answered."""
    owner, other = cells(transport), cells(transport)
    other.wait.signal(1)
    assert other.run(1) == 1  # the other connection is up, its page open
    with counted(service) as change:
        owner.x[:] = 7
        reply = pool.submit(owner.run, 1)
        asleep_on(owner.wait)
        assert other.run(1, session_id=owner.session_id) == "not_found"
        owner.wait.signal(1)
        assert reply.result(60) == 1 and np.all(owner.y == 8)
    assert change == {"answered": 1, "waited": 1, "failed": 1}


def test_two_http_clients_one_session(service: Service, cells: Callable[..., Cell],
                                      pool: ThreadPoolExecutor) -> None:
    """HTTP's sessions belong to no connection: a second client's RUN of the same session,
    sent while the first waits on its fence, is run after it, with its own value."""
    cell = cells("http")
    second = httpx.Client(base_url=service.url, timeout=60)
    try:
        with counted(service) as change:
            cell.x[:] = 2
            first = pool.submit(cell.run, 1)
            asleep_on(cell.wait)
            then = pool.submit(lambda: second.post(
                f"/v2/interop/sessions/{cell.session_id}/run",
                json={"wait_value": 1, "signal_value": 2, "timeout_ms": 60_000}))
            cell.wait.signal(1)
            assert first.result(60) == 1
            answer = then.result(60)
            assert answer.status_code == 200 and answer.json()["signal_value"] == 2
            assert cell.done.value == 2 and np.all(cell.y == 3)
    finally:
        second.close()
    assert change == {"answered": 2, "waited": 1}


@pytest.mark.parametrize("transport", ["socket", "page"])
def test_session_closed_mid_run(service: Service, cells: Callable[..., Cell],
                                pool: ThreadPoolExecutor, transport: str) -> None:
    """A connection that closes while its RUN waits on the input fence: the engine's wait ends
    (nobody sleeps on the fence any more), the session goes with the connection, and the run
    never signals."""
    cell = cells(transport)
    with counted(service) as change:
        reply: Future[int | str] = pool.submit(cell.run, 1)
        asleep_on(cell.wait)
        cell.client._sock.shutdown(socket.SHUT_RDWR)  # the renderer hangs up
        with contextlib.suppress(Exception):
            reply.result(60)
        wait_until(lambda: sleepers(cell.wait) == 0, 30, what="the service's wait ended")
        cell.wait.signal(1)
    assert cell.done.value == 0
    assert change == {"failed": 1, "waited": 1}


def test_http_session_released_mid_run(service: Service, cells: Callable[..., Cell],
                                       pool: ThreadPoolExecutor) -> None:
    """An HTTP session released while its RUN waits on the input fence: it is gone at once for
    everyone else, the release waits for the run, and the run ends as it would have."""
    cell = cells("http")
    path = f"/v2/interop/sessions/{cell.session_id}"
    with counted(service) as change:
        cell.x[:] = 4
        reply = pool.submit(cell.run, 1)
        asleep_on(cell.wait)
        released = pool.submit(cell.http.delete, path)
        wait_until(lambda: cell.http.get(path).status_code == 404, 30,
                   what="the session gone from the table")
        assert cell.run(1, 2) == "not_found"
        cell.wait.signal(1)
        assert reply.result(60) == 1 and np.all(cell.y == 5)
        assert released.result(60).status_code == 204
    assert change == {"answered": 1, "waited": 1, "failed": 1}  # the refusal, the engine's


def test_shutdown_answers_every_waiting_run_unavailable(model_repo: Path, tmp_path: Path) -> None:
    """SIGTERM while a RUN waits on its fence on each transport: each is answered
    ``unavailable`` at once, none signals, and the engine counted each as its failure (the
    service logs its counters when it stops)."""
    with running(model_repo, tmp_path, "--log-format", "json") as svc, ThreadPoolExecutor(3) as pool:
        made = [Cell(svc, transport) for transport in TRANSPORTS]
        try:
            for cell in made:  # the page opened: a first frame
                cell.wait.signal(1)
                assert cell.run(1) == 1
            before = native_runs(svc)
            replies = [pool.submit(cell.run, 2) for cell in made]
            for cell in made:
                asleep_on(cell.wait)
            svc.proc.send_signal(signal.SIGTERM)
            assert [r.result(60) for r in replies] == ["unavailable"] * 3
            assert [cell.done.value for cell in made] == [1, 1, 1]
        finally:
            for cell in made:
                with contextlib.suppress(Exception):
                    cell.close()
        stop_service(svc)
    stopped = stopped_counts(svc)
    assert changed(before, stopped) == {"failed": 3, "waited": 3}


def stopped_counts(svc: Service) -> dict[str, int]:
    """The engine's counters as the service logged them when it stopped."""
    lines = [json.loads(line) for line in svc.log_text().splitlines()]
    return dict(next(line["native_runs"] for line in lines if line["message"] == "fenceline stopped"))
