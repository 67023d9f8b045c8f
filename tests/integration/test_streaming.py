"""Streaming sessions: a real renderer process (tests/support/stream_renderer.py) signals and waits on
fences only, against a real ``fenceline serve``; outputs are checked against onnxruntime."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import onnxruntime as ort
import pytest

from fenceline import _native
from fenceline.client import Fence, HttpClient, ServiceError, SharedFrame, View
from fenceline.models import build_repository
from fenceline.waiting import AdaptiveSpin, SpinGate
from tests.support.metrics import metric, metrics_text, sample
from tests.support.service import Service, start_service, stop_service
from tests.support.stream_renderer import NBYTES, SHAPE, frame
from tests.support.waiting import wait_until

RENDERER = Path(__file__).parents[1] / "support" / "stream_renderer.py"

MODELS = ["add_64x64", "nan_guard_64x64"]


@pytest.fixture(scope="module")
def model_repo(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return build_repository(tmp_path_factory.mktemp("stream-models"), MODELS)


@pytest.fixture(scope="module")
def reference(model_repo: Path) -> Any:
    """Direct onnxruntime runs of the same model files."""
    sessions = {
        m: ort.InferenceSession(str(model_repo / m / "1" / "model.onnx"),
                                providers=["CPUExecutionProvider"])
        for m in MODELS
    }
    return lambda model, x: sessions[model].run(None, {"x": x})[0]


class Renderer:
    def __init__(self, service: Service, scenario: str, tmp: Path, *args: str,
                 cpus: set[int] | None = None) -> None:
        self.out = tmp / f"{scenario}-{time.monotonic_ns()}.npz"
        self.proc = subprocess.Popen(
            [sys.executable, str(RENDERER), scenario, "--socket", str(service.socket),
             "--out", str(self.out), *args],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True,
            preexec_fn=(lambda: os.sched_setaffinity(0, cpus)) if cpus else None,
        )

    def read(self, timeout_s: float = 30) -> dict[str, Any]:
        assert self.proc.stdout is not None
        result: list[str] = []
        reader = threading.Thread(target=lambda: result.append(self.proc.stdout.readline()))  # type: ignore[union-attr]
        reader.start()
        reader.join(timeout_s)
        if not result or not result[0]:
            self.proc.kill()
            raise AssertionError(f"renderer gave no result (exit {self.proc.poll()})")
        return dict(json.loads(result[0]))

    def send(self, line: str) -> None:
        assert self.proc.stdin is not None
        self.proc.stdin.write(line + "\n")
        self.proc.stdin.flush()

    def outputs(self) -> np.ndarray:
        return np.load(self.out)["outputs"]

    def kill(self) -> None:
        self.proc.send_signal(signal.SIGKILL)
        self.proc.wait(10)
        for pipe in (self.proc.stdin, self.proc.stdout):
            if pipe is not None:
                pipe.close()

    def finish(self) -> None:
        """Closes its stdin (the renderer exits at EOF) and checks it exited cleanly."""
        for pipe in (self.proc.stdin, self.proc.stdout):
            if pipe is not None and not pipe.closed:
                pipe.close()
        assert self.proc.wait(30) == 0


def run_renderer(
    service: Service, tmp: Path, scenario: str, *args: str
) -> tuple[dict[str, Any], Renderer]:
    r = Renderer(service, scenario, tmp, *args)
    result = r.read()
    r.finish()
    return result, r


def shared(service: Service) -> tuple[list[str], list[str]]:
    """The service's shared-memory fds and mappings."""
    fds = sorted(f for f in service.fds() if "/dev/shm/" in f or "memfd:" in f)
    return fds, sorted(service.maps())


def threads(service: Service) -> set[str]:
    return set(os.listdir(f"/proc/{service.pid}/task"))


# -- frames --------------------------------------------------------------------------------------


def test_streaming_session_outputs_equal_direct_onnxruntime_runs(
    service: Service, tmp_path: Path, reference: Any
) -> None:
    before = stream_metrics(service, "add_64x64")
    result, r = run_renderer(service, tmp_path, "sequence", "--frames", "12", "--seed", "7",
                             "--policy", "every")
    assert [s["ok"] for s in result["steps"]] == [True] * 12
    assert [s["value"] for s in result["steps"]] == list(range(1, 13))
    outputs = r.outputs()
    for n in range(1, 13):
        np.testing.assert_array_equal(outputs[n - 1], reference("add_64x64", frame(7, n)))
    final = result["final"]
    assert final["mode"] == "streaming"
    assert final["stream"] | {"spin": None} == final["stream"] | {
        "state": "stopped", "policy": "every", "frames": 12, "skipped": 0, "failed": 0,
        "last_value": 12, "spin": None,
    }
    # The engine records each frame it ran: the counter and the frame-time histogram.
    frames, timed, seconds = (a - b for a, b in zip(stream_metrics(service, "add_64x64"), before,
                                                      strict=True))
    assert (frames, timed) == (12, 12) and 0 < seconds < 12 * 5.0


def stream_metrics(service: Service, model: str) -> tuple[float, float, float]:
    """The streamed frames of ``model`` on /metrics: counted, timed, and their seconds."""
    text = metrics_text(service)
    family = "fenceline_stream_frame_duration_seconds"
    return (sample(text, "fenceline_stream_frames_total", 0.0, model=model),
            sample(text, f"{family}_count", 0.0, model=model),
            sample(text, f"{family}_sum", 0.0, model=model))


@pytest.mark.parametrize(
    ("policy", "frames", "runs", "skipped"),
    [
        ("latest", 5, 2, 3),
        ("every", 5, 5, 0),
        ("every", 2000, 1 + 1024, 2000 - 1 - 1024),  # at most 1024 values of backlog
    ],
)
def test_values_reached_while_paused_follow_the_policy(
    service: Service, tmp_path: Path, reference: Any, policy: str, frames: int, runs: int,
    skipped: int,
) -> None:
    result, r = run_renderer(service, tmp_path, "skip", "--frames", str(frames), "--seed", "3",
                             "--policy", policy)
    assert result["first"]["ok"] and result["paused_state"] == "paused"
    assert result["value_while_paused"] == 1, "a paused session ran a frame"
    assert result["ok"] and result["value"] == frames
    stream = result["final"]["stream"]
    assert (stream["frames"], stream["skipped"], stream["failed"]) == (runs, skipped, 0)
    assert result["final"]["runs"] == runs
    np.testing.assert_array_equal(r.outputs()[0], reference("add_64x64", frame(3, frames)))


def test_model_error_marks_the_output_fence_and_the_next_frame_recovers(
    service: Service, tmp_path: Path, reference: Any
) -> None:
    before = metric(service, "fenceline_stream_failed_frames_total", 0.0,
                    model="nan_guard_64x64", reason="model_error")
    before_frames = stream_metrics(service, "nan_guard_64x64")
    result, r = run_renderer(service, tmp_path, "error", "--model", "nan_guard_64x64",
                             "--frames", "5", "--bad", "3", "--seed", "5")
    steps = result["steps"]
    assert steps[2] == {"n": 3, "ok": False, "value": 3, "status": 2}
    for s in steps[:2] + steps[3:]:
        assert s["ok"] and s["status"] == 0 and s["value"] == s["n"]
    outputs = r.outputs()
    for n in (1, 2, 4, 5):
        np.testing.assert_array_equal(outputs[n - 1], reference("nan_guard_64x64", frame(5, n)))
    stream = result["final"]["stream"]
    assert (stream["frames"], stream["failed"]) == (4, 1)
    assert "nan_guard_64x64" in stream["last_error"]
    assert stream_metrics(service, "nan_guard_64x64")[:2] == (before_frames[0] + 4,
                                                             before_frames[1] + 4)
    after = metric(service, "fenceline_stream_failed_frames_total", model="nan_guard_64x64",
                   reason="model_error")
    assert after == before + 1
    assert "Traceback" not in service.log_text()


def test_input_fence_status_is_passed_on_to_the_output_fence(
    service: Service, tmp_path: Path
) -> None:
    result, _ = run_renderer(service, tmp_path, "statuses")
    ok, failed, recovered, resumed = result["steps"]
    assert ok["ok"] and recovered["ok"] and resumed["ok"]
    assert failed == {"n": 2, "ok": False, "value": 2, "status": 2}  # not run, not stalled
    abandoned = result["abandoned"]
    assert (abandoned["ok"], abandoned["value"], abandoned["status"]) == (False, 3, 1)
    assert abandoned["session"]["state"] == "failed"
    assert "abandoned" in abandoned["session"]["last_error"]
    stream = result["final"]["stream"]
    assert (stream["frames"], stream["failed"], stream["last_value"]) == (3, 1, 4)


# -- lifetime ------------------------------------------------------------------------------------


def released(service: Service) -> None:
    """Waits until the service maps nothing of any renderer (earlier tests included)."""
    wait_until(lambda: shared(service) == ([], []), what=lambda: shared(service))


def test_stop_releases_the_worker_and_every_mapping(service: Service, tmp_path: Path) -> None:
    released(service)
    base_shared, base_threads = shared(service), threads(service)
    r = Renderer(service, "hold", tmp_path, "--frames", "4")
    streaming = r.read()
    assert [s["ok"] for s in streaming["steps"]] == [True] * 4
    assert shared(service) != base_shared
    new_threads = threads(service) - base_threads
    assert len(new_threads) >= 2  # the connection's and the session's
    r.send("stop")
    stopped = r.read()["stopped"]
    assert stopped["stream"]["state"] == "stopped" and stopped["stream"]["frames"] == 4
    # The connection is still open: only stop and the releases freed these.
    assert shared(service) == base_shared
    # The worker is gone. join() returns once the thread's Python code is done; the OS thread
    # leaves /proc/PID/task a moment later, so wait for that instead of racing it.
    wait_until(lambda: len(new_threads & threads(service)) == len(new_threads) - 1,
               what="the stopped session's worker thread gone")
    assert len(new_threads & threads(service)) == len(new_threads) - 1
    assert metric(service, "fenceline_stream_running_sessions") == 0
    r.send("exit")
    r.finish()


def test_a_killed_renderer_stops_its_streaming_sessions(service: Service, tmp_path: Path) -> None:
    released(service)
    base_shared = shared(service)
    r = Renderer(service, "hold", tmp_path, "--frames", "3")
    assert r.read()["streaming"]
    assert metric(service, "fenceline_stream_running_sessions") == 1
    r.kill()
    wait_until(lambda: shared(service) == base_shared, what=lambda: shared(service))
    wait_until(lambda: metric(service, "fenceline_stream_running_sessions") == 0, what="no running stream")


# -- HTTP control ----------------------------------------------------------------------------------


@pytest.fixture
def http(service: Service) -> Iterator[HttpClient]:
    with HttpClient(service.url) as c:
        yield c


def test_http_session_streams_for_a_renderer_that_sends_no_messages(
    service: Service, http: HttpClient, tmp_path: Path, reference: Any
) -> None:
    released(service)
    base_shared = shared(service)
    r = Renderer(service, "named", tmp_path, "--frames", "6", "--seed", "11")
    names = r.read()
    mem = http.import_memory(names["frame"])
    fin, fout = http.import_fence(names["input_fence"]), http.import_fence(names["output_fence"])
    info = http.create_session(
        "add_64x64", {"x": View(mem, "FP32", SHAPE)}, {"y": View(mem, "FP32", SHAPE, NBYTES)},
        fin, fout, mode="streaming", policy="every", start=False,
    )
    sid = info["id"]
    assert info["stream"]["state"] == "paused"
    assert http.start_session(sid)["stream"]["state"] == "running"
    r.send("go")
    result = r.read()
    assert [s["ok"] for s in result["steps"]] == [True] * 6
    for n in range(1, 7):
        np.testing.assert_array_equal(r.outputs()[n - 1], reference("add_64x64", frame(11, n)))
    with pytest.raises(ServiceError) as e:
        http.run(sid, 7)
    assert (e.value.status, e.value.code) == (409, "conflict")
    assert http.pause_session(sid)["stream"]["state"] == "paused"
    final = http.stop_session(sid)
    assert final["stream"] | {"spin": None} == final["stream"] | {
        "state": "stopped", "frames": 6, "last_value": 6, "spin": None}
    with pytest.raises(ServiceError) as e:
        http.describe("session", sid)
    assert e.value.status == 404
    http.release_memory(mem)
    http.release_fence(fin)
    http.release_fence(fout)
    assert shared(service) == base_shared
    r.send("exit")
    r.finish()


def test_streaming_requests_are_validated(service: Service, http: HttpClient) -> None:
    with SharedFrame(2 * NBYTES, named=True) as f, Fence(named=True) as a, Fence(named=True) as b:
        assert f.name and a.name and b.name
        mem = http.import_memory(f.name)
        fa, fb = http.import_fence(a.name), http.import_fence(b.name)
        views = ({"x": View(mem, "FP32", SHAPE)}, {"y": View(mem, "FP32", SHAPE, NBYTES)})
        try:
            for kwargs, status, code in (
                ({"mode": "streaming", "policy": "oldest"}, 422, "invalid_request"),
                ({"mode": "streaming", "spin_us": 5_000_000}, 400, "invalid_argument"),
                ({"mode": "streaming", "spin_us": -1}, 422, "invalid_request"),
            ):
                with pytest.raises(ServiceError) as e:
                    http.create_session("add_64x64", *views, fa, fb, **kwargs)
                assert (e.value.status, e.value.code) == (status, code), kwargs
            with pytest.raises(ServiceError) as e:
                http.create_session("add_64x64", *views, fa, fa, mode="streaming")
            assert (e.value.status, e.value.code) == (400, "invalid_argument")
            assert "two fences" in e.value.message
            plain = http.create_session("add_64x64", *views, fa, fb)
            assert plain["mode"] == "request" and "stream" not in plain
            for verb in (http.start_session, http.pause_session, http.stop_session):
                with pytest.raises(ServiceError) as e:
                    verb(plain["id"])
                assert (e.value.status, e.value.code) == (409, "conflict")
            http.release_session(plain["id"])
        finally:
            http.release_memory(mem)
            http.release_fence(fa)
            http.release_fence(fb)


def test_streaming_sessions_per_client_are_limited(model_repo: Path) -> None:
    from fenceline.errors import ResourceExhausted
    from fenceline.runtime.models import ModelRepository
    from fenceline.runtime.service import Runtime
    from fenceline.runtime.table import RuntimeSettings, ViewSpec

    runtime = Runtime(ModelRepository.from_sources(model_repo, {}),
                      settings=RuntimeSettings(max_streaming_sessions_per_owner=1))
    with SharedFrame(2 * NBYTES) as f, Fence() as a, Fence() as b:
        try:
            mem = runtime.import_memory("t", "host_fd", fd=os.dup(f.fd))["id"]
            fa = runtime.import_fence("t", "host_timeline", fd=os.dup(a.fd))["id"]
            fb = runtime.import_fence("t", "host_timeline", fd=os.dup(b.fd))["id"]
            views = ({"x": ViewSpec(mem, 0, "FP32", SHAPE)},
                     {"y": ViewSpec(mem, NBYTES, "FP32", SHAPE)})
            runtime.create_session("t", "add_64x64", *views, fa, fb, mode="streaming")
            with pytest.raises(ResourceExhausted, match="at most 1 streaming session"):
                runtime.create_session("t", "add_64x64", *views, fa, fb, mode="streaming")
            runtime.create_session("t", "add_64x64", *views, fa, fb)  # request mode: fine
        finally:
            runtime.close()


# -- waiting -------------------------------------------------------------------------------------


def test_spin_gate_lets_only_its_slots_spin() -> None:
    gate = SpinGate(2)
    a, b = gate.try_enter(), gate.try_enter()
    assert a is not None and b is not None and gate.try_enter() is None
    assert gate.spinning() == 2
    a.release()
    assert gate.try_enter() is a
    assert SpinGate(0).try_enter() is None


def feed(spin: AdaptiveSpin, waits: int, spun_ns: int, blocked_ns: int,
         every_ns: int = 20_000) -> list[int]:
    """Runs ``waits`` waits, one every ``every_ns`` on a fake clock, that take ``spun_ns`` when
    spun first and ``blocked_ns`` when not; returns the budgets they were given."""
    budgets = []
    for _ in range(waits):
        b = spin.budget_ns()
        budgets.append(b)
        spin.observe(spun_ns if b else blocked_ns, b)
        now = spin.clock() + every_ns
        spin.clock = lambda now=now: now  # type: ignore[misc]
    return budgets


PERIOD = 16 << 21  # one exploration window of 2**21 ns in every 16
NOT_EXPLORING = 1 << 21  # a clock reading outside the exploration window


def test_zero_budget_always_blocks() -> None:
    spin = AdaptiveSpin(0, clock=lambda: 0)
    assert feed(spin, 3000, 1_000, 80_000) == [0] * 3000 and not spin.spinning


def test_waits_spin_when_spinning_is_faster_and_block_when_it_is_not() -> None:
    spin = AdaptiveSpin(50_000, clock=lambda: NOT_EXPLORING)
    n = PERIOD // 20_000
    budgets = feed(spin, 2 * n, 3_000, 80_000)  # an idle machine: wakeups cost ~70 us
    assert spin.spinning and sum(b > 0 for b in budgets[-n:]) >= 0.9 * n
    assert max(budgets[-n:]) <= 4 * 3_000 + 10_000  # the budget follows the waits
    budgets = feed(spin, 2 * n, 30_000, 15_000)  # a loaded machine: the spinner is in the way
    assert not spin.spinning and sum(b > 0 for b in budgets[-n:]) <= 0.1 * n
    budgets = feed(spin, 256, 16_000_000, 16_000_000, 16_666_667)  # 60 fps: later than a spin
    assert not spin.spinning and sum(b > 0 for b in budgets) <= 0.2 * 256


def test_exploration_windows_come_from_the_shared_clock() -> None:
    """Two waiters with the same clock, in different processes, explore at the same time."""
    a = AdaptiveSpin(50_000, clock=lambda: NOT_EXPLORING)
    b = AdaptiveSpin(50_000, clock=lambda: NOT_EXPLORING + 12_345)
    feed(a, 3000, 3_000, 80_000)
    feed(b, 3000, 3_000, 80_000)
    for t in range(0, 2 * PERIOD, 1 << 19):
        a.clock = b.clock = lambda t=t: t  # type: ignore[misc]
        assert (a.budget_ns() == 0) == (b.budget_ns() == 0)


def test_a_waiter_gives_its_spin_slot_back_before_it_sleeps() -> None:
    gate = SpinGate(1)
    with Fence() as fence:
        spin = AdaptiveSpin(1_000_000, gate, clock=lambda: NOT_EXPLORING)
        results: list[int] = []
        waiter = threading.Thread(
            target=lambda: results.append(spin.wait_fence(fence.handle, 1, 5_000_000_000))
        )
        waiter.start()
        time.sleep(0.1)  # well past the 1 ms spin: the waiter sleeps on the futex now
        assert waiter.is_alive()
        assert gate.spinning() == 0, "a sleeping waiter still holds the spin slot"
        fence.signal(1)
        waiter.join(5)
        assert results == [_native.WAIT_REACHED]
        held = gate.try_enter()  # while all slots are taken, waits block at once
        assert held is not None
        other = AdaptiveSpin(1_000_000, gate, clock=lambda: NOT_EXPLORING)
        fence.signal(2)
        assert other.wait_fence(fence.handle, 3, 1_000_000) == _native.WAIT_TIMED_OUT
        assert other.denied == 1
        held.release()


def test_a_service_without_spinner_slots_never_spins(model_repo: Path, tmp_path: Path) -> None:
    svc = start_service(model_repo, tmp_path, "--max-spinners", "0")
    try:
        r = Renderer(svc, "hold", tmp_path, "--frames", "300")  # longer than a 2 ms window
        steps = r.read()["steps"]
        assert all(s["ok"] for s in steps)
        r.send("stop")
        spin = r.read()["stopped"]["stream"]["spin"]
        assert spin["denied"] > 0  # it wanted to spin and blocked at once instead
        r.send("exit")
        r.finish()
        assert "at most 0 spinning waiters" in svc.log_text()
    finally:
        stop_service(svc)


def test_four_streaming_sessions_on_two_cores_all_make_progress(
    service: Service, tmp_path: Path
) -> None:
    cpus = set(sorted(os.sched_getaffinity(0))[:2])
    if len(cpus) < 2:
        pytest.skip("needs two CPUs")
    for tid in os.listdir(f"/proc/{service.pid}/task"):
        os.sched_setaffinity(int(tid), cpus)  # threads started later inherit it
    frames = 300
    renderers = [Renderer(service, "progress", tmp_path, "--frames", str(frames), "--seed",
                          str(i), "--policy", "every", cpus=cpus) for i in range(4)]
    for r in renderers:
        assert r.read()["ready"]
    for r in renderers:
        r.send("go")
    results = [r.read(timeout_s=90) for r in renderers]
    for r in renderers:
        r.finish()
    for res in results:
        assert res["wrong"] == 0
        assert len(res["done"]) == frames and res["final"]["stream"]["frames"] == frames
    # Progress together, not in turns: when the first renderer is done, every other one has
    # made progress too (about as much on a quiet machine; a starved one would have none).
    first_finish = min(res["done"][-1] for res in results)
    shares = [sum(t <= first_finish for t in res["done"]) / frames for res in results]
    assert min(shares) >= 0.05, shares
