"""The bench's own measuring tools (fenceline.bench): the C renderer's bench mode, the floor
programs and the streaming handoff measurements, against a real service. Behaviour tests do not
import the bench; these test the bench itself."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from fenceline.bench import streaming as bench
from fenceline.bench.c_client import build_renderer, run_c_client
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


@needs_cc
def test_bench_builds_the_installed_example(tmp_path: Path) -> None:
    exe = build_renderer(tmp_path)
    r = subprocess.run([str(exe), "--model", "nope"], capture_output=True, text=True, timeout=60)
    assert r.returncode == 2 and "usage" in r.stderr


def test_floor_output_parses_in_both_formats() -> None:
    assert bench.parse_floor(
        "SOCK_SEQPACKET 64B round trip across processes: p50=72.1 us p99=125.0 us min=60.0 us "
        "(n=20000)\n") == (72.1, 125.0)
    assert bench.parse_floor("spin shm round trip p50=0.14 us p99=0.18 us\n") == (0.14, 0.18)
    with pytest.raises(ValueError):
        bench.parse_floor("nothing here")


def test_builtin_floor_programs_build_and_measure(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    empty = tmp_path / "no-floors"
    empty.mkdir()
    monkeypatch.setenv("FENCELINE_FLOORS", str(empty))  # the machine's programs "not found"
    cmds = bench.build_floors(tmp_path)
    assert cmds["origin"] == ["builtin"]
    p50, p99 = bench.run_floor([*cmds["uds"][:-1], "500"])
    assert 0 < p50 <= p99
    p50, p99 = bench.run_floor([*cmds["spin"][:-1], "2000"])
    assert 0 < p50 <= p99


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
