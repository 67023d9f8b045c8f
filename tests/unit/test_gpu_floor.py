"""The raw floor of ``fenceline bench --gpu`` (bench/gpu_floor.c, bench/gpu_floor.py) where no GPU
is needed: it builds with the host's C compiler, warning-free; it refuses bad arguments before it
touches a GPU; and where it cannot be built or run, the bench gets the reason to print. Its
figures are measured on the GPU machine (docs/gpu.md, "The raw floor")."""

from __future__ import annotations

import ctypes.util
import subprocess
from pathlib import Path

import pytest

from fenceline.bench import gpu_floor

SHAPE = [1, 3, 1080, 1920]


def _compiler() -> list[str]:
    cc = gpu_floor.compiler()
    if cc is None:
        pytest.skip("no C compiler here")
    return cc


def test_the_floor_builds_without_a_warning(tmp_path: Path) -> None:
    cc = _compiler()
    done = subprocess.run(
        [*cc, "-std=c11", "-pthread", "-Wall", "-Wextra", "-Werror", "-o",
         str(tmp_path / "gpu_floor"), str(gpu_floor.SOURCE), "-ldl"],
        capture_output=True, text=True, check=False)
    assert done.returncode == 0, done.stderr


@pytest.mark.parametrize(("args", "message"), [
    (["--depths", "0"], "bad --depths"),
    (["--depths", "3,99"], "bad --depths"),
    (["--frames", "many"], "bad --frames"),
    (["--width", "5", "--height", "5"], "not a multiple of 16"),
    (["--runs", "40"], "--runs is at most"),
    (["--colour", "red"], "unknown argument --colour"),
])
def test_the_floor_refuses_bad_arguments_before_it_touches_a_gpu(
    tmp_path: Path, args: list[str], message: str
) -> None:
    _compiler()
    exe, why = gpu_floor.build(tmp_path)
    assert exe is not None, why
    done = subprocess.run([str(exe), *args], capture_output=True, text=True, timeout=30,
                          check=False)
    assert done.returncode == 2
    assert message in done.stderr
    assert done.stdout == ""


def test_a_compiler_that_does_not_run_is_the_rows_reason(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("CC", str(tmp_path / "no-such-cc"))
    floor, why = gpu_floor.measure(SHAPE, frames=10, round_trips=10, warmup=1, depths=(1,))
    assert floor is None
    assert "no-such-cc failed to run" in why


def test_a_frame_the_floor_does_not_run_is_the_rows_reason() -> None:
    floor, why = gpu_floor.measure([1, 4, 8, 8], frames=10, round_trips=10, warmup=1,
                                   depths=(1,))
    assert floor is None
    assert "1x3xHxW" in why


@pytest.mark.skipif(ctypes.util.find_library("vulkan") is not None,
                    reason="this machine has a Vulkan loader: the floor runs (tests/gpu, bench)")
def test_without_a_vulkan_loader_the_floor_says_so() -> None:
    _compiler()
    floor, why = gpu_floor.measure(SHAPE, frames=10, round_trips=10, warmup=1, depths=(1,))
    assert floor is None
    assert why.startswith("the Vulkan loader (libvulkan.so.1) is not installed"), why


def test_the_floors_report_is_read_into_its_row() -> None:
    out = ('{"device": "NVIDIA H100", "frame_bytes": 24883200, "round_trip_us": {"n": 1000, '
           '"p50": 351.5, "p99": 372.0}, "pipelined_fps": {"1": [2800.0, 2810.5, 2790.0], '
           '"3": [8000.0, 8100.0, 8050.0]}, "frames": 6000, "outputs": "bit-exact"}\n')
    floor = gpu_floor.parse(out)
    assert floor.device == "NVIDIA H100"
    assert (floor.round_trip_p50_us, floor.round_trip_p99_us, floor.round_trips) == (351.5, 372.0,
                                                                                      1000)
    assert floor.fps(1) == 2800.0
    assert floor.fps(3) == 8050.0
