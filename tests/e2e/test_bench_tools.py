"""The bench's own measuring tools (fenceline.bench): the C renderer's bench mode, the floor
programs and the streaming handoff measurements, against a real service. Behaviour tests do not
import the bench; these test the bench itself."""

from __future__ import annotations

import contextlib
import json
import os
import resource
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from fenceline import trace
from fenceline.bench import engine, floors, registry, report, suite
from fenceline.bench import streaming as bench
from fenceline.bench.c_client import build_renderer, run_c_client
from fenceline.bench.stats import OUTSIDE, Row
from fenceline.client.c_api import find_c_compiler
from tests.support.metrics import metric
from tests.support.service import Service

needs_cc = pytest.mark.skipif(find_c_compiler() is None, reason="no C compiler")


@needs_cc
def test_renderer_json_line_and_bench_function(tmp_path: Path, service: Service) -> None:
    result = run_c_client(service.socket, frames=200, warmup=20, binary=build_renderer(tmp_path))
    assert result["client"] == "c" and result["frames"] == 200
    assert result["wrong_frames"] == 0
    assert 0 < result["p50_us"] <= result["p99_us"]
    samples = sorted(result["samples_s"])
    assert len(samples) == 200
    assert samples[100] * 1e6 == pytest.approx(result["p50_us"], abs=0.01)
    # the bench warms the program up for engine.WARM_S as well as 20 frames, and counts them
    assert result["warmup_frames"] >= 20


@needs_cc
def test_bench_builds_the_installed_example(tmp_path: Path) -> None:
    exe = build_renderer(tmp_path)
    r = subprocess.run([str(exe), "--model", "nope"], capture_output=True, text=True, timeout=60)
    assert r.returncode == 2 and "usage" in r.stderr


def test_floor_output_parses_in_both_formats() -> None:
    assert floors.parse_floor(
        "SOCK_SEQPACKET 64B round trip across processes: p50=72.1 us p99=125.0 us min=60.0 us "
        "(n=20000)\n") == (72.1, 125.0)
    assert floors.parse_floor("spin shm round trip p50=0.14 us p99=0.18 us\n") == (0.14, 0.18)
    with pytest.raises(ValueError):
        floors.parse_floor("nothing here")
    assert floors.parse_ran_on("ran on: parent=0 child=1,3\nseqpacket ...") == ({0}, {1, 3})


@needs_cc
def test_builtin_floor_programs_build_and_measure(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    empty = tmp_path / "no-floors"
    empty.mkdir()
    monkeypatch.setenv("FENCELINE_FLOORS", str(empty))  # the machine's programs "not found"
    cmds = floors.build_floors(tmp_path)
    assert cmds["origin"] == ["builtin"]
    p50, p99 = floors.run_floor([*cmds["uds"][:-1], "500"])
    assert 0 < p50 <= p99
    p50, p99 = floors.run_floor([*cmds["spin"][:-1], "2000"])
    assert 0 < p50 <= p99


@needs_cc
def test_pinned_socket_floor_runs_each_process_on_the_cpu_it_was_given(tmp_path: Path) -> None:
    pair = floors.two_cpus()
    if pair is None:
        pytest.skip("one CPU: the two-CPU socket floor needs two")
    cmd = [*floors.build_floors(tmp_path)["uds_pinned"][:-1], "300"]
    a, b = pair
    # Both orders, so a side that merely stayed where it started cannot pass.
    for parent, child in ((a, b), (b, a)):
        out = subprocess.run([*cmd, str(parent), str(child)], capture_output=True, text=True,
                             timeout=120, check=True).stdout
        assert floors.parse_ran_on(out) == ({parent}, {child}), out
        p50, p99 = floors.parse_floor(out)
        assert 0 < p50 <= p99
    p50, p99 = floors.run_pinned_floor(cmd, b, a)
    assert 0 < p50 <= p99


@needs_cc
def test_pinned_socket_floor_fails_on_a_cpu_it_may_not_use(tmp_path: Path) -> None:
    cmd = [*floors.build_floors(tmp_path)["uds_pinned"][:-1], "50"]
    unusable = max(os.cpu_count() or 1, max(floors.ALL_CPUS) + 1)  # past the last CPU
    with pytest.raises(subprocess.CalledProcessError):
        floors.run_pinned_floor(cmd, min(floors.ALL_CPUS), unusable)


ONE_CPU_FLOORS = """
import json, os
os.sched_setaffinity(0, {min(os.sched_getaffinity(0))})
from fenceline.bench.floors import floors
print(json.dumps(floors()))
"""


@needs_cc
def test_floors_on_one_cpu_skip_the_two_cpu_floor_with_a_reason() -> None:
    done = subprocess.run([sys.executable, "-c", ONE_CPU_FLOORS], capture_output=True,
                          text=True, timeout=300, check=True)
    result = json.loads(done.stdout)
    assert "uds_round_trip" not in result and "spin_round_trip" not in result
    assert "needs two CPUs" in result["skipped"]["uds_round_trip"]
    assert result["uds_round_trip_free_placement"]["p50_us"] > 0
    assert result["uds_round_trip_one_cpu"]["p50_us"] > 0
    line = floors.format_floors(result)
    assert "socket round trip, two CPUs: skipped (needs two CPUs" in line
    assert "socket round trip, free placement" in line


def test_handoff_measurements_report_latency_and_cpu(service: Service) -> None:
    runs = metric(service, "fenceline_session_runs_total", 0.0, model="add_64x64",
                  transport="ipc")
    for h in (
        bench.measure_request_per_frame(service.socket, frames=200, warmup=20),
        bench.measure_streaming(service.socket, frames=200, warmup=20, spin_us=0),
        bench.measure_streaming(service.socket, frames=200, warmup=20),
    ):
        s = h.summary()
        assert s["frames"] == 200 and 0 < s["p50_us"] <= s["p99_us"]
        assert h.client_cpu_s_per_frame >= 0 and h.service_cpu_s_per_frame is not None
    # request-per-frame runs are recorded after their reply is sent, every one of them
    assert metric(service, "fenceline_session_runs_total", model="add_64x64",
                  transport="ipc") == runs + 220


def test_a_streaming_row_is_timed_only_once_both_sides_waits_have_settled(
        service: Service) -> None:
    # Ten frames after one frame of warmup: the warmup still lasts two periods of the adaptive
    # waits' exploration windows, however fast the frames come.
    t0 = time.monotonic_ns()
    h = bench.measure_streaming(service.socket, frames=10, warmup=1)
    assert time.monotonic_ns() - t0 >= bench.SETTLE_NS
    assert h.summary()["frames"] == 10


DIGEST_CPU_S = 0.2


def _cpu_s() -> float:
    r = resource.getrusage(resource.RUSAGE_SELF)
    return r.ru_utime + r.ru_stime


class _HashingLane:
    """Frames that cost nothing and a digest that burns DIGEST_CPU_S of this process's CPU, as
    hashing a 4K frame's outputs does."""

    def frame(self, i: int) -> None:
        return None

    def digest(self) -> str:
        until = _cpu_s() + DIGEST_CPU_S
        while _cpu_s() < until:
            pass
        return "hashed"


@contextlib.contextmanager
def hashing_lane() -> Iterator[_HashingLane]:
    yield _HashingLane()


def test_a_lanes_digest_is_not_counted_in_the_renderers_cpu_per_frame() -> None:
    m = engine.measure(f"{__name__}:hashing_lane", {}, engine.Budget(20, 2, 5.0),
                       processes=False)
    assert m.digests == ["hashed"] and len(m.samples_s) == 20
    # The digest's CPU alone is DIGEST_CPU_S; counted, it would be at least that.
    assert m.client_cpu_s < DIGEST_CPU_S


class _ClockLane:
    """Frames that record their number and when they ran."""

    def __init__(self) -> None:
        self.frames: list[tuple[int, float]] = []

    def frame(self, i: int) -> None:
        self.frames.append((i, time.monotonic()))
        time.sleep(0.001)

    def digest(self) -> str:
        return json.dumps(self.frames)


@contextlib.contextmanager
def clock_lane() -> Iterator[_ClockLane]:
    yield _ClockLane()


def test_a_lane_warms_up_for_its_frames_and_warm_s_then_numbers_run_on() -> None:
    m = engine.measure(f"{__name__}:clock_lane", {}, engine.Budget(10, 2, 5.0), processes=False)
    frames = json.loads(m.digests[0])
    numbers = [i for i, _ in frames]
    assert numbers == list(range(1, len(numbers) + 1))  # fence values never repeat
    timed = numbers[-10:]
    assert len(m.samples_s) == 10
    # two frames would be warm-up enough; WARM_S of 1 ms frames is many more
    first_timed_at = frames[timed[0] - 1][1]
    assert first_timed_at - frames[0][1] >= engine.WARM_S * 0.99
    assert len(numbers) - 10 > 2


FRAME_GAP_NS = 10_000_000  # between the starts of two frames of _trace_doc


def _trace_doc(frame_us: list[int]) -> dict[str, Any]:
    """A service trace with one frame of each length (model half, reply half), the k-th
    received at 2 ms + k * FRAME_GAP_NS on the recording's clock."""
    us = 1000
    moments = []
    for k, n in enumerate(frame_us):
        t = 2_000_000 + k * FRAME_GAP_NS
        for m, at in ((trace.RECEIVED, 0), (trace.INPUT_REACHED, 0), (trace.MODEL_START, 0),
                      (trace.MODEL_END, n // 2), (trace.SIGNALLED, n // 2),
                      (trace.REPLY_SENT, n)):
            moments.append((t + at * us, m, 7, k + 1, 1))
    return trace.chrome_trace(trace.Recording(moments, 0, 1_000_000, 9_000_000_000), {})


def _traced_row(frame_us: list[int]) -> Row:
    """An ipc-traced row of one round, every traced frame timed, each taking twice its span
    in the service at the renderer, as _traced reads a service's trace."""
    samples = [n * 2e-6 for n in frame_us]
    row = Row("ipc-traced", "720p", samples)
    window = (0.0, 2e-3 + len(frame_us) * FRAME_GAP_NS / 1e9)
    row.stages_us = registry.trace_stages(_trace_doc(frame_us), window, samples)
    return row


def test_a_traced_rows_service_side_is_summed_over_its_rounds() -> None:
    row = _traced_row([100, 300]).merged(_traced_row([200]))
    assert row.stages_p50_us() == pytest.approx({
        "frame": 200.0, "model": 100.0, "reply": 100.0, "signal": 0.0, "wait for input": 0.0,
        OUTSIDE: 200.0})
    assert row.summary()["service_stages_p50_us"]["frame"] == 200.0
    text = report.table([row])
    assert "ipc-traced, the service's side (its trace, p50): 200.0 us a frame" in text
    assert "model 100.0" in text
    assert "each frame's time less its span in the service) 200.0 us" in text


def test_the_time_outside_the_service_is_taken_frame_by_frame_over_the_timed_frames() -> None:
    """The trace also holds the row's warm-up frames, here two slow ones before the timed
    window; the time outside the service pairs each timed frame with its own span, so it
    cannot go below zero however the spans vary (the row's p50 less the spans' p50, over
    different frames, read -858 us on a 4K row)."""
    spans = [5000, 5000, 100, 900, 300]
    samples = [110e-6, 905e-6, 320e-6]  # the three timed frames: 10, 5 and 20 us outside
    window = (1e-3 + 2 * FRAME_GAP_NS / 1e9, 1e-3 + 5 * FRAME_GAP_NS / 1e9)
    stages = registry.trace_stages(_trace_doc(spans), window, samples)
    assert stages["frame"] == [100, 900, 300]
    assert [round(v, 6) for v in stages[OUTSIDE]] == [10.0, 5.0, 20.0]
    row = Row("ipc-traced", "4K", samples)
    row.stages_us = stages
    assert row.stages_p50_us()[OUTSIDE] == pytest.approx(10.0)
    assert "its span in the service) 10.0 us" in report.table([row])


def test_the_rounds_of_a_scenario_change_the_order_of_its_rows() -> None:
    """No row has a fixed place in the rounds or always runs right after the same row (on the
    16-core machine the row always run after the floor's read slower than the same client's
    next row): the first round is in table order, each holds every transport once, each
    transport leads a round, and each follows more than one other."""
    transports = ("in-process", "ipc", "ipc-traced", "c-client")
    orders = [suite.turns(transports, k) for k in range(2 * len(transports))]
    assert orders[0] == transports
    assert all(sorted(o) == sorted(transports) for o in orders)
    assert {o[0] for o in orders} == set(transports)
    for t in transports:
        assert len({o[o.index(t) - 1] for o in orders if o[0] != t}) >= 2, t
    assert suite.turns(("ipc",), 3) == ("ipc",) and suite.turns((), 1) == ()


def _children(pid: int) -> set[int]:
    """The processes whose parent is ``pid``."""
    out = set()
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            with contextlib.suppress(OSError), open(f"/proc/{entry}/stat") as f:
                stat = f.read()
            if int(stat[stat.rindex(")") + 2 :].split()[1]) == pid:
                out.add(int(entry))
    return out


def _serves(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            args = f.read().split(b"\0")
    except OSError:
        return False
    return b"serve" in args and any(a.endswith(b"fenceline") for a in args)


def test_sigterm_ends_the_bench_with_the_service_it_started(tmp_path: Path) -> None:
    log = tmp_path / "bench.log"
    with open(log, "wb") as out:
        bench_proc = subprocess.Popen(
            [sys.executable, "-m", "fenceline", "bench", "--quick", "--no-real-model", "--sizes",
             "64x64", "--transports", "in-process,ipc", "--seconds", "60"],
            stdout=out, stderr=subprocess.STDOUT, cwd=tmp_path)
    try:
        deadline = time.monotonic() + 120
        served: set[int] = set()
        while not served and time.monotonic() < deadline and bench_proc.poll() is None:
            served = {p for p in _children(bench_proc.pid) if _serves(p)}
            time.sleep(0.1)
        assert served, f"the bench started no service: {log.read_text()[-2000:]}"
        time.sleep(1)  # into its rows
        bench_proc.terminate()
        assert bench_proc.wait(60) == 130  # as after Ctrl-C
    finally:
        if bench_proc.poll() is None:
            bench_proc.kill()
            bench_proc.wait()
    assert "Traceback" not in log.read_text()
    # The bench stopped and reaped its service on its way out: none is left running, orphaned.
    assert [p for p in served if os.path.exists(f"/proc/{p}")] == []
