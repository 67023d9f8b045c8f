"""What a run does, the same over every client (HTTP, Python IPC, the C client), all through the
one run engine: the model runs in place in the renderer's memory, between the renderer's
fences, and every refusal carries the same stable code. Transport-only behaviour stays in
test_interop_http.py and test_interop_ipc.py; every kind of answer a RUN frame can get, with the
engine's counts, is in test_run_paths.py."""

from __future__ import annotations

import subprocess
import sys
import textwrap
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest

from fenceline.client import Fence, HttpClient, SharedFrame, View
from tests.support.metrics import metric
from tests.support.service import Service, running
from tests.support.transports import Failed, Ran, Transport
from tests.support.waiting import wait_until

SHAPE = [1, 3, 64, 64]
NBYTES = 3 * 64 * 64 * 4


class Scene:
    """A renderer's named frame (input, then output) and two fences, imported by `transport`."""

    def __init__(self, transport: Transport) -> None:
        self.t = transport
        self.frame = SharedFrame(2 * NBYTES, named=True)
        self.wait, self.signal = Fence(named=True), Fence(named=True)
        self.memory = transport.import_memory(self.frame)
        self.wait_id = transport.import_fence(self.wait)
        self.signal_id = transport.import_fence(self.signal)
        self.x = self.frame.array(np.float32, SHAPE)
        self.y = self.frame.array(np.float32, SHAPE, NBYTES)

    def session(self, output_memory: str | None = None) -> str:
        return self.t.create_session(
            "add_64x64",
            {"x": View(self.memory, "FP32", SHAPE)},
            {"y": View(output_memory or self.memory, "FP32", SHAPE, NBYTES)},
            self.wait_id, self.signal_id,
        )

    def close(self) -> None:
        for obj in (self.frame, self.wait, self.signal):
            obj.close()


@pytest.fixture(scope="module")
def service(model_repo: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Service]:
    """The service of the ``transport`` fixture."""
    with running(model_repo, tmp_path_factory.mktemp("service")) as svc:
        yield svc


@pytest.fixture
def scene(transport: Transport) -> Iterator[Scene]:
    s = Scene(transport)
    yield s
    s.close()


def fails(code: str, call: object) -> Failed:
    with pytest.raises(Failed) as e:
        call()  # type: ignore[operator]
    assert e.value.code == code, e.value
    assert e.value.message and "Traceback" not in e.value.message
    return e.value


def test_run_computes_in_place_and_sees_later_renderer_writes(scene: Scene) -> None:
    sid = scene.session()
    for v, fill in ((1, 2.5), (2, -1.0), (3, 30.0), (4, 40.0)):
        scene.x[:] = fill  # the renderer changes its buffer; nothing is re-registered
        scene.wait.signal(v)
        assert scene.t.run(sid, v) == Ran(v)
        assert np.all(scene.y == fill + 1)
        assert scene.signal.value == v
    scene.t.release_session(sid)


def test_run_waits_for_the_input_fence_signalled_later(scene: Scene) -> None:
    sid = scene.session()
    result: list[Ran] = []
    t = threading.Thread(target=lambda: result.append(scene.t.run(sid, 3, timeout_ms=20000)))
    t.start()
    time.sleep(0.3)
    assert t.is_alive() and scene.signal.value == 0  # still waiting: nothing ran
    scene.x[:] = 41
    scene.wait.signal(3)
    t.join(20)
    assert result == [Ran(3)] and np.all(scene.y == 42)


def test_wait_timeout_runs_and_signals_nothing(scene: Scene) -> None:
    sid = scene.session()
    scene.y[:] = 7
    fails("timed_out", lambda: scene.t.run(sid, 1, timeout_ms=50))
    assert scene.signal.value == 0 and np.all(scene.y == 7)
    scene.wait.signal(1)  # and the session still runs afterwards
    assert scene.t.run(sid, 1) == Ran(1)


def test_signal_value_not_above_the_output_fence_is_a_conflict(scene: Scene) -> None:
    sid = scene.session()
    scene.wait.signal(5)
    assert scene.t.run(sid, 5) == Ran(5)
    fails("conflict", lambda: scene.t.run(sid, 5))
    fails("conflict", lambda: scene.t.run(sid, 5, signal_value=4))
    assert scene.signal.value == 5
    assert scene.t.run(sid, 5, signal_value=9) == Ran(9) and scene.signal.value == 9


def test_an_unknown_session_is_not_found(scene: Scene) -> None:
    fails("not_found", lambda: scene.t.run("0" * 32, 1, timeout_ms=100))


def test_read_only_memory_cannot_hold_outputs(scene: Scene) -> None:
    ro = scene.t.import_memory(scene.frame, access="read_only")
    assert "read_write" in fails("invalid_argument", lambda: scene.session(ro)).message
    sid = scene.session()  # the same frame imported read_write binds outputs
    scene.wait.signal(1)
    assert scene.t.run(sid, 1) == Ran(1)


@pytest.mark.parametrize("late_s", [0.3, 1.0])
def test_run_succeeds_when_its_input_fence_is_signalled_late(scene: Scene, late_s: float) -> None:
    """Past the first spin and past the wait's first cancellation slice: the wait goes on."""
    sid = scene.session()
    scene.x[:] = 5
    timer = threading.Timer(late_s, scene.wait.signal, args=(1,))
    timer.start()
    try:
        assert scene.t.run(sid, 1, timeout_ms=20000) == Ran(1)
    finally:
        timer.join()
    assert np.all(scene.y == 6) and scene.signal.value == 1


# A renderer in its own process: a session over the scene's named objects, then a RUN whose
# input fence nobody signals, until the test kills it.
KILLED_RENDERER = textwrap.dedent("""
    import sys, types
    sys.path.insert(0, sys.argv[1])
    from fenceline.client import View
    from tests.support.transports import open_transport
    transport, url, sock, frame, wait, signal, nbytes = sys.argv[2:9]
    t = open_transport(transport, url, sock)
    mem = t.import_memory(types.SimpleNamespace(name=frame))
    shape = [1, 3, 64, 64]
    sid = t.create_session(
        "add_64x64", {"x": View(mem, "FP32", shape)},
        {"y": View(mem, "FP32", shape, int(nbytes))},
        t.import_fence(types.SimpleNamespace(name=wait)),
        t.import_fence(types.SimpleNamespace(name=signal)))
    print(sid, flush=True)
    t.run(sid, 1, timeout_ms=20000)
    print("ran", flush=True)
""")


def test_a_renderer_killed_while_its_run_waits_is_released_within_a_second(
    scene: Scene, service: Service
) -> None:
    """The wait ends when its client is gone: the input fence signalled a second after the kill
    runs nothing, and an IPC connection's objects are released."""
    connections = metric(service, "fenceline_ipc_open_connections")
    child = subprocess.Popen(
        [sys.executable, "-c", KILLED_RENDERER, str(Path(__file__).parents[2]), scene.t.name,
         service.url, str(service.socket), str(scene.frame.name), str(scene.wait.name),
         str(scene.signal.name), str(NBYTES)],
        stdout=subprocess.PIPE, text=True,
    )
    try:
        assert child.stdout is not None
        sid = child.stdout.readline().strip()
        assert len(sid) == 32, sid
        time.sleep(0.3)  # the RUN is in the service, waiting
        assert child.poll() is None and scene.signal.value == 0
    finally:
        child.kill()
        child.communicate()
    scene.y[:] = 7
    time.sleep(1.0)
    scene.wait.signal(1)
    time.sleep(0.3)
    assert scene.signal.value == 0 and np.all(scene.y == 7), "the killed renderer's run ran"
    if scene.t.name == "http":  # HTTP's objects belong to no connection
        with HttpClient(service.url) as http:
            http.release_session(sid)
    else:
        wait_until(lambda: metric(service, "fenceline_ipc_open_connections") <= connections, 5,
                   what="the killed renderer's connection closed")
