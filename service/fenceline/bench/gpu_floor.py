"""The raw floor of ``fenceline bench --gpu`` (docs/gpu.md, "The raw floor"): ``gpu_floor.c``, what
the bench's renderer and service do for each frame with neither fenceline nor onnxruntime
(Vulkan fill + timeline signal, a CUDA wait / y = x + 1 / signal in a second process, host
waits), built here with the host's C compiler and run at the bench's depths. Where it cannot
be built or run, ``measure`` says why, and the bench prints that instead of the row."""

from __future__ import annotations

import json
import os
import shlex
import shutil
import statistics
import subprocess
import tempfile
from dataclasses import dataclass
from pathlib import Path

SOURCE = Path(__file__).with_name("gpu_floor.c")
# The floor's own runs: a round trip of 1,000 frames, then per depth a warm-up and three runs.
RUN_TIMEOUT_S = 600


@dataclass
class RawFloor:
    device: str
    round_trip_p50_us: float
    round_trip_p99_us: float
    round_trips: int
    fps_runs: dict[int, list[float]]  # frames in flight -> frames/s of each run

    def fps(self, depth: int) -> float:
        """The median of the runs at ``depth`` frames in flight."""
        return float(statistics.median(self.fps_runs[depth]))


def compiler() -> list[str] | None:
    """``$CC`` (split as a shell would), else the first of cc, gcc, clang on PATH."""
    cc = os.environ.get("CC", "").strip()
    if cc:
        return shlex.split(cc)
    for name in ("cc", "gcc", "clang"):
        found = shutil.which(name)
        if found:
            return [found]
    return None


def build(out_dir: Path) -> tuple[Path | None, str]:
    """(the program, "") or (None, why it could not be built)."""
    cc = compiler()
    if cc is None:
        return None, "no C compiler (set CC, or install cc, gcc or clang)"
    exe = out_dir / "gpu_floor"
    cmd = [*cc, "-O2", "-std=c11", "-pthread", "-o", str(exe), str(SOURCE), "-ldl"]
    try:
        done = subprocess.run(cmd, capture_output=True, text=True, timeout=120, check=False)
    except (OSError, subprocess.TimeoutExpired) as e:
        return None, f"{cc[0]} failed to run: {e}"
    if done.returncode != 0:
        return None, f"{' '.join(cmd)} failed: {done.stderr.strip()[-500:]}"
    return exe, ""


def parse(stdout: str) -> RawFloor:
    doc = json.loads(stdout.strip().splitlines()[-1])
    rt = doc["round_trip_us"]
    return RawFloor(
        device=str(doc["device"]),
        round_trip_p50_us=float(rt["p50"]),
        round_trip_p99_us=float(rt["p99"]),
        round_trips=int(rt["n"]),
        fps_runs={int(d): [float(x) for x in runs] for d, runs in doc["pipelined_fps"].items()},
    )


def measure(
    shape: list[int], *, frames: int, round_trips: int, warmup: int, depths: tuple[int, ...],
    runs: int = 3,
) -> tuple[RawFloor | None, str]:
    """Builds and runs the floor on 1x3xHxW FP32 frames: (the floor, "") or (None, why not)."""
    if len(shape) != 4 or shape[:2] != [1, 3]:
        return None, f"the raw floor runs 1x3xHxW frames, not {shape}"
    with tempfile.TemporaryDirectory(prefix="fenceline-gpu-floor-") as tmp:
        exe, why = build(Path(tmp))
        if exe is None:
            return None, why
        cmd = [str(exe), "--height", str(shape[2]), "--width", str(shape[3]),
               "--frames", str(frames), "--round-trips", str(round_trips),
               "--warmup", str(warmup), "--runs", str(runs),
               "--depths", ",".join(str(d) for d in depths)]
        try:
            done = subprocess.run(cmd, capture_output=True, text=True, timeout=RUN_TIMEOUT_S,
                                  check=False)
        except subprocess.TimeoutExpired:
            return None, f"the raw floor did not finish in {RUN_TIMEOUT_S} s"
        if done.returncode != 0:
            return None, (done.stderr.strip() or f"exit status {done.returncode}").removeprefix(
                "gpu_floor: ")
        try:
            return parse(done.stdout), ""
        except (ValueError, KeyError, IndexError, TypeError) as e:
            return None, f"the raw floor printed no result ({e}): {done.stdout[-300:]!r}"
