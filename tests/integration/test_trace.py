"""The per-frame trace (fenceline.trace, docs/tracing.md) of a live service: `fenceline trace`
and POST /v2/interop/trace against renderers in their own processes and in this one."""

from __future__ import annotations

import contextlib
import itertools
import json
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from concurrent import futures
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path
from typing import Any

import httpx
import numpy as np
import pytest

from fenceline import trace
from fenceline.client import Fence, IpcClient, SharedFrame, View
from fenceline.ipc.control_token import read_token, token_path
from tests.integration.test_status import renderer
from tests.support.service import free_port
from tests.support.waiting import wait_until

SHAPE = [1, 3, 64, 64]
NBYTES = int(np.prod(SHAPE)) * 4
HOST_ORDER = ("received", "input_reached", "model_start", "model_end", "signalled", "reply_sent")
TRACE = "/v2/interop/trace"


def auth(service: Any) -> dict[str, str]:
    """The header that lets a client trace the service: its control token, which the service
    keeps beside its socket for its own user (fenceline.ipc.control_token)."""
    token = read_token(token_path(service.socket))
    assert token, f"no control token beside {service.socket}"
    return {"Authorization": f"Bearer {token}"}


def cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "fenceline", "trace", *args],
                          capture_output=True, text=True, timeout=120)


def frames_of(doc: dict[str, Any], label: str) -> list[dict[str, Any]]:
    """The ``frame N`` slices on the row named ``label``."""
    tids = [e["tid"] for e in doc["traceEvents"]
            if e["ph"] == "M" and e["name"] == "thread_name" and e["args"]["name"] == label]
    assert len(tids) == 1, [e for e in doc["traceEvents"] if e["ph"] == "M"]
    return [e for e in doc["traceEvents"]
            if e["ph"] == "X" and e["cat"] == "frame" and e["tid"] == tids[0]]


def trace_on(url: str) -> bool:
    r = httpx.get(url + TRACE, timeout=10)
    return bool(r.json()["recording"])


@contextlib.contextmanager
def trace_in_background(service: Any, seconds: float,
                        **limits: int) -> Iterator[Future[httpx.Response]]:
    """POST /v2/interop/trace from another thread (it answers when its recording ends), once
    the service says it records; the future holds the answer (:func:`answer`)."""
    url = service.url
    with ThreadPoolExecutor(1) as pool:
        tracer = pool.submit(httpx.post, url + TRACE, json={"seconds": seconds, **limits},
                             timeout=seconds + 60, headers=auth(service))
        try:
            wait_until(lambda: tracer.done() or trace_on(url), 60, what="the trace to start recording")
            assert not tracer.done(), f"the trace answered before it was seen recording: {tracer.result()}"
            yield tracer
        finally:
            if not tracer.done():  # a failed test ends its trace, not the next test's
                httpx.delete(url + TRACE, timeout=10, headers=auth(service))


def answer(tracer: Future[httpx.Response], timeout_s: float = 120) -> httpx.Response:
    try:
        return tracer.result(timeout=timeout_s)
    except futures.TimeoutError:
        raise AssertionError(f"the trace did not answer within {timeout_s:g} s") from None


def test_trace_records_each_frame_of_a_renderer_in_order(service: Any, tmp_path: Path) -> None:
    out = tmp_path / "trace.json"
    with renderer(service.socket, "--fps", "400", "--seconds", "30") as (_, ids):
        done = cli("--url", service.url, "--socket", str(service.socket), "--seconds", "20",
                   "--frames", "40", "--out", str(out))
    assert done.returncode == 0, done.stderr
    assert "40 frames" in done.stderr
    doc = json.loads(out.read_text())
    assert doc["otherData"]["frames"] == 40
    assert doc["otherData"]["dropped_moments"] == 0
    frames = frames_of(doc, f"session {ids['session'][:8]} (add_64x64)")
    assert len(frames) == 40
    # The summary is the frames' own moments: the service's part of a frame is received to
    # reply_sent, the renderer's part a reply to the same session's next RUN (p50: the upper
    # median), and one renderer has one model run at a time at most.
    s = doc["otherData"]["summary"]

    def p50(values: list[float]) -> float:
        return sorted(values)[len(values) // 2]

    assert s["sessions"] == 1 and s["model_us"]["p50"] > 0
    assert s["service_us"]["p50"] == pytest.approx(
        p50([f["args"]["reply_sent"] - f["args"]["received"] for f in frames]), abs=0.06)
    assert s["between_frames_us"]["p50"] == pytest.approx(
        p50([b["args"]["received"] - a["args"]["reply_sent"]
             for a, b in itertools.pairwise(frames)]), abs=0.06)
    assert 0 < s["models_in_flight"] <= 1
    assert "between a reply and the session's next frame" in done.stderr
    values = [f["args"]["frame"] for f in frames]
    assert values == list(range(values[0], values[0] + 40))  # every frame, in order
    for f in frames:
        times = [f["args"][m] for m in HOST_ORDER]
        assert times == sorted(times), f
        assert f["ts"] == times[0] and abs(f["ts"] + f["dur"] - times[-1]) < 0.01
    stages = [e for e in doc["traceEvents"] if e["ph"] == "X" and e["cat"] == "stage"
              and e["args"]["frame"] == values[0]]
    assert [s["name"] for s in stages] == ["wait for input", "model", "signal", "reply"]
    first = frames[0]
    for s in stages:  # inside their frame, so Perfetto nests them under it
        assert first["ts"] <= s["ts"] and s["ts"] + s["dur"] <= first["ts"] + first["dur"] + 0.01


def test_a_run_that_waits_for_its_input_fence_is_traced_by_the_python_path(
    service: Any,
) -> None:
    """A RUN sent before the input fence is signalled is served by Python (the native path
    only takes a reached fence): its frame shows the wait."""
    with (IpcClient(service.socket) as client, SharedFrame(2 * NBYTES) as frame, Fence() as ready,
          Fence() as done):
        memory = client.import_memory(frame)
        session = client.create_session(
            "add_64x64", {"x": View(memory, "FP32", SHAPE, 0)},
            {"y": View(memory, "FP32", SHAPE, NBYTES)}, client.import_fence(ready),
            client.import_fence(done))
        signalled: list[int] = []

        def signal_input() -> None:
            signalled.append(time.perf_counter_ns())  # no earlier than the fence's value
            ready.signal(1)

        with trace_in_background(service, seconds=20, frames=1) as tracer:
            signal = threading.Timer(0.05, signal_input)
            signal.start()
            sent = time.perf_counter_ns()
            assert client.run(session["id"], 1).signal_value == 1
            back = time.perf_counter_ns()
            signal.join()
            doc = answer(tracer).json()
    (f,) = frames_of(doc, f"session {session['id'][:8]} (add_64x64)")
    times = [f["args"][m] for m in HOST_ORDER]
    assert times == sorted(times)
    # The trace's moments on this process's clock: the service received the RUN after the
    # client sent it, saw its input only once it was signalled (it waited), and signalled
    # before the client had the reply. (`reply_sent` is marked once the send returned: the
    # client may have the reply a little before.)
    started = doc["otherData"]["started_ns"]
    assert started + f["args"]["input_reached"] * 1000 >= signalled[0] - 1  # ns rounding
    assert sent < started + f["args"]["received"] * 1000 < started + f["args"]["signalled"] * 1000 < back


def test_one_trace_at_a_time(service: Any) -> None:
    with trace_in_background(service, seconds=30) as first:
        refused = httpx.post(service.url + TRACE, json={"seconds": 0.001}, timeout=10,
                             headers=auth(service))
        assert httpx.delete(service.url + TRACE, timeout=10,
                            headers=auth(service)).status_code == 204
        got = answer(first)
    assert refused.status_code == 409 and refused.json()["code"] == "conflict"
    assert "already recording" in refused.json()["error"]
    assert got.status_code == 200
    assert got.json()["otherData"]["duration_us"] < 30e6  # the DELETE ended it, not its limit
    assert trace_on(service.url) is False  # and the next one may record


def test_trace_limits_are_checked(service: Any) -> None:
    for body, status, code in (
        ({"seconds": 0}, 400, "invalid_argument"),
        ({"seconds": 61}, 400, "invalid_argument"),
        ({"frames": 0}, 400, "invalid_argument"),
        ({"frames": 1_000_001}, 400, "invalid_argument"),
        ({"frames": 300_000}, 400, "invalid_argument"),  # over the default --trace-max-frames
        ({"seconds": 1, "extra": 1}, 422, "invalid_request"),
    ):
        r = httpx.post(service.url + TRACE, json=body, timeout=10, headers=auth(service))
        assert (r.status_code, r.json()["code"]) == (status, code), r.text


def test_trace_cli_says_when_no_service_answers(tmp_path: Path) -> None:
    url = f"http://127.0.0.1:{free_port()}"
    done = cli("--url", url, "--seconds", "1", "--out", str(tmp_path / "t.json"))
    assert done.returncode == 2
    assert f"no fenceline service answers at {url}" in done.stderr
    assert "Traceback" not in done.stderr
    assert not (tmp_path / "t.json").exists()


def test_trace_cli_refuses_bad_limits_before_asking(tmp_path: Path) -> None:
    done = cli("--seconds", "0", "--out", str(tmp_path / "t.json"))
    assert done.returncode == 2
    assert "a trace records for more than 0" in done.stderr


def test_tracing_is_off_by_default() -> None:
    assert trace.active() is False


def test_a_trace_ended_early_answers_what_it_recorded(service: Any) -> None:
    with trace_in_background(service, seconds=60) as tracer:
        assert httpx.delete(service.url + TRACE, timeout=10,
                            headers=auth(service)).status_code == 204
        got = answer(tracer)
    assert got.status_code == 200
    assert got.json()["otherData"]["duration_us"] < 60e6
    assert httpx.get(service.url + TRACE, timeout=10).json() == {"recording": False}
    assert httpx.delete(service.url + TRACE, timeout=10,
                        headers=auth(service)).status_code == 204
