"""``fenceline bench --obs``: OBS's frame rate and its video thread's time per frame with the
fenceline filter, beside a filter that runs the same model inside OBS's filter_video, the way
in-process plugins do (docs/obs.md, "Measured").

Headless OBS (``fenceline-obs-driver`` under Xvfb) renders a 30 fps source of 640x360 RGBA
frames at 30 fps through one of:

- ``none``: no filter, the baseline;
- ``fenceline``: ``fenceline_filter``, the model in the service (its own process);
- ``in-process``: ``fenceline_reference_filter``, the model run by onnxruntime in OBS's process
  on OBS's video thread, loaded with the service's session options.

for a fast model (``image_filter_rgba8``, a few milliseconds a frame) and one slower than the
frame interval (``image_filter_rgba8_slow``). Each run's first seconds are warmup; over the rest
it reports the frames OBS rendered per second (its own count, less the frames it lagged), OBS's
own average of its video thread's time per frame, the time the filter took inside
filter_video per frame, and the model's results per second. The sides take turns, in rounds.
Then the formats rows (``fenceline.bench.obs_formats``): the graphics thread's time per frame
with and without the filter per source kind, format and size.
"""

from __future__ import annotations

import json
import os
import statistics
import sys
import tempfile
from pathlib import Path
from typing import Any

import httpx

from fenceline.bench import obs
from fenceline.bench.obs_formats import HEADER, print_row, run_formats

FAST, SLOW = "image_filter_rgba8", "image_filter_rgba8_slow"
SIDES = ("none", "fenceline", "in-process")
WIDTH, HEIGHT, FPS = 640, 360, 30
SAMPLE_MS = 500


def model_seconds(url: str, model: str) -> tuple[float, float]:
    """(seconds in onnxruntime, runs) of `model` in the service so far, from its metrics."""
    names = ("fenceline_session_infer_duration_seconds_sum", "fenceline_session_runs_total")
    totals = [0.0, 0.0]
    for line in httpx.get(url + "/metrics", timeout=30).text.splitlines():
        for i, name in enumerate(names):
            if line.startswith(name + "{") and f'model="{model}"' in line:
                totals[i] += float(line.rsplit(" ", 1)[1])
    return totals[0], totals[1]


def reference_plugin() -> Path | None:
    path = obs.plugin().parent / "fenceline-obs-reference.so"
    return path if path.is_file() else None


def measure(lines: list[dict[str, Any]], warmup_s: float) -> dict[str, float]:
    """The counters' rates between the first sample past the warmup and the last."""
    a = next(x for x in lines if x["t"] >= warmup_s)
    b = lines[-1]
    dt = b["t"] - a["t"]
    frames = max(b.get("frames", 0) - a.get("frames", 0), 1)
    rendered = (b["rendered"] - a["rendered"]) - (b["lagged"] - a["lagged"])
    return {
        "fps": rendered / dt,
        "lagged_per_s": (b["lagged"] - a["lagged"]) / dt,
        "video_ms_per_frame": statistics.median(
            x["frame_time_ns"] for x in lines if x["t"] >= warmup_s) / 1e6,
        "filter_ms_per_frame": (b.get("video_ns", 0) - a.get("video_ns", 0)) / frames / 1e6,
        # the median of the filter's last 256 frames (the fenceline filter keeps them)
        "filter_ms_median": b.get("video_ns_p50", 0) / 1e6,
        "results_per_s": (b.get("filtered", 0) - a.get("filtered", 0)) / dt,
        "dropped_per_s": (b.get("dropped", 0) - a.get("dropped", 0)) / dt,
        "frames_per_s": (b.get("frames", 0) - a.get("frames", 0)) / dt,
    }


def run_side(display: str, tmp: Path, side: str, model: str, model_path: Path, socket: Path,
             url: str, seconds: float, warmup_s: float,
             intra_op_threads: int | None) -> dict[str, float]:
    settings: dict[str, object] = {"width": WIDTH, "height": HEIGHT, "fps": FPS,
                                   "seconds": seconds, "every_ms": SAMPLE_MS}
    plugins: tuple[Path, ...] = ()
    if side == "none":
        settings["filter"] = "none"
    elif side == "fenceline":
        settings.update(model=model, socket=socket)
    else:
        ref = reference_plugin()
        assert ref is not None
        plugins = (ref,)
        settings.update(filter="fenceline_reference_filter", model_path=model_path,
                        intra_op_threads=intra_op_threads or 0)
    before = model_seconds(url, model)
    run = obs.start(display, tmp / f"{side}-{model}.log", plugins=plugins, **settings)
    last = run.finish(timeout_s=seconds + 120)
    after = model_seconds(url, model)
    if side != "none" and not str(last.get("status", "")).startswith("running"):
        raise RuntimeError(f"the {side} filter did not run: {last.get('status')}")
    out = measure(run.lines, warmup_s)
    out["model_ms_per_run"] = 0.0
    if side == "in-process":
        out["results_per_s"] = out["frames_per_s"]  # it runs every frame it is given
        out["model_ms_per_run"] = out["filter_ms_per_frame"]  # the model, run right there
    elif side == "fenceline" and after[1] > before[1]:
        out["model_ms_per_run"] = (after[0] - before[0]) / (after[1] - before[1]) * 1e3
    return out


def run_obs_bench(*, quick: bool, json_path: Path | None, seconds: float | None,
                  rounds: int | None, intra_op_threads: int | None = None) -> int:
    """``intra_op_threads``: onnxruntime's intra-op threads on both sides (None: the model's
    default, a pool sized to the machine)."""
    from fenceline.bench.scaling import _repository
    from fenceline.cli.process import start_service, stop_service
    from fenceline.models import build_repository
    from fenceline.models.builtin import cache_dir

    why = obs.unavailable()
    if why is None and reference_plugin() is None:
        why = ("the in-process filter was not built (it needs Python's embedding library, "
               "Debian: libpython3-dev)")
    if why is not None:
        print(f"fenceline: {why}", file=sys.stderr)
        return 2
    seconds = seconds or (5.0 if quick else 10.0)
    rounds = rounds or (1 if quick else 2)
    warmup_s = 2.0
    if intra_op_threads is not None and not 0 <= intra_op_threads <= 1024:
        print("fenceline: --intra-op-threads is 0 (one per core) .. 1024", file=sys.stderr)
        return 2
    if seconds <= warmup_s + 1 or rounds < 1:
        print(f"fenceline: --seconds must be more than {warmup_s + 1:g} and --rounds at least 1",
              file=sys.stderr)
        return 2
    # The embedded Python of the in-process filter imports onnxruntime, numpy and fenceline from
    # this interpreter's paths.
    os.environ["PYTHONPATH"] = os.pathsep.join(p for p in sys.path if p)
    results: dict[str, Any] = {"size": f"{WIDTH}x{HEIGHT}", "fps": FPS, "seconds": seconds,
                               "intra_op_threads": intra_op_threads,
                               "warmup_s": warmup_s, "rounds": rounds, "cpus": os.cpu_count(),
                               "loadavg_before": os.getloadavg()[0], "models": {}}
    print(f"OBS at {FPS} fps, a {FPS} fps source of {WIDTH}x{HEIGHT} RGBA; {rounds} round(s) of "
          f"{seconds:g} s per side ({warmup_s:g} s warmup); onnxruntime intra-op threads "
          f"{'default' if intra_op_threads is None else intra_op_threads}; load average (1 min) "
          f"{results['loadavg_before']:.2f} on {os.cpu_count()} CPUs", flush=True)
    with tempfile.TemporaryDirectory(prefix="fenceline-obs-bench-") as tmp_name:
        tmp = Path(tmp_name)
        paths = {m: build_repository(cache_dir(), [m]) / m / "1" / "model.onnx"
                 for m in (FAST, SLOW)}
        if intra_op_threads is None:
            proc, url, sock = start_service([FAST, SLOW], tmp)
        else:
            repo = _repository(tmp, FAST, paths[FAST], intra_op_threads)
            _repository(tmp, SLOW, paths[SLOW], intra_op_threads)
            proc, url, sock = start_service([], tmp, extra=("--model-repository", str(repo)))
        try:
            with obs.xvfb() as display:
                for model in (FAST, SLOW):
                    path = paths[model]
                    runs: dict[str, list[dict[str, float]]] = {s: [] for s in SIDES}
                    for r in range(rounds):
                        for side in SIDES if r % 2 == 0 else tuple(reversed(SIDES)):
                            m = run_side(display, tmp, side, model, path, sock, url,
                                         seconds, warmup_s, intra_op_threads)
                            runs[side].append(m)
                            print(f"  {model} round {r + 1}/{rounds} {side:>10}: "
                                  f"{m['fps']:.1f} fps, video thread {m['video_ms_per_frame']:.2f}"
                                  f" ms/frame, in the filter {m['filter_ms_per_frame']:.2f} "
                                  f"ms/frame (median {m['filter_ms_median']:.2f}), model "
                                  f"{m['model_ms_per_run']:.1f} ms/run, "
                                  f"{m['results_per_s']:.1f} results/s, "
                                  f"{m['dropped_per_s']:.1f} dropped/s", flush=True)
                    results["models"][model] = {
                        side: {k: statistics.median(m[k] for m in ms) for k in ms[0]} | {
                            "rounds": ms} for side, ms in runs.items()}
                results["formats"] = run_formats(display, tmp, sock, seconds, warmup_s)
        finally:
            stop_service(proc)
    results["loadavg_after"] = os.getloadavg()[0]
    print(f"{'model':>24} {'side':>10} {'OBS fps':>8} {'video ms/frame':>15} "
          f"{'filter ms/frame':>16} {'(median)':>9} {'model ms/run':>13} {'results/s':>10} "
          f"{'dropped/s':>10}")
    for model, sides in results["models"].items():
        for side, m in sides.items():
            print(f"{model:>24} {side:>10} {m['fps']:>8.1f} {m['video_ms_per_frame']:>15.2f} "
                  f"{m['filter_ms_per_frame']:>16.2f} {m['filter_ms_median']:>9.2f} "
                  f"{m['model_ms_per_run']:>13.1f} {m['results_per_s']:>10.1f} "
                  f"{m['dropped_per_s']:>10.1f}")
    print(HEADER)
    for row in results["formats"]:
        print_row(row)
    fast = results["models"][FAST]
    print(f"fast model: the fenceline filter adds "
          f"{fast['fenceline']['filter_ms_per_frame']:.2f} ms per frame inside filter_video "
          f"(median {fast['fenceline']['filter_ms_median']:.2f}; "
          f"video thread {fast['fenceline']['video_ms_per_frame']:.2f} ms/frame against "
          f"{fast['none']['video_ms_per_frame']:.2f} with no filter); medians of the rounds; "
          f"load average (1 min) after: {results['loadavg_after']:.2f}")
    if json_path is not None:
        json_path.write_text(json.dumps(results, indent=2))
    return 0
