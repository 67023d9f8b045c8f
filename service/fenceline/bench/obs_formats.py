"""``fenceline bench --obs``'s formats rows: OBS's graphics thread per frame with and without the
fenceline filter, for an async source of RGBA and of NV12 frames (NV12: most cameras; the filter
takes it after OBS's own GPU conversion) and a sync source (drawn on the graphics thread, as
game, display and window capture are), at 720p and 1080p (docs/obs.md, "Measured").

Each row is one run of headless OBS at 30 fps with a 30 fps source and the fast model
(``image_filter_rgba8``); the first seconds are warmup. ``filter ms/frame`` is the filter's time
on the graphics thread (its ``video_ns``, the source's own drawing not counted), mean and
median, split in two: ``libobs staging`` is the part spent in libobs's staging calls on the
texture path (``gs_stage_texture`` and the stage surface's map and unmap: the read-back copy,
which a GPU queues as a DMA and a software rasterizer does pixel by pixel on the CPU), ``own``
the rest (the filter's copies, lock and drawing). ``OBS ms/frame`` is OBS's own average of its
graphics thread's time per frame, whose difference between the two sides is what the filter
costs OBS in all.
"""

from __future__ import annotations

import statistics
from pathlib import Path
from typing import Any

from fenceline.bench import obs

SIZES = ((1280, 720), (1920, 1080))
CASES = (("async", "rgba"), ("async", "nv12"), ("sync", "rgba"))
SOURCES = {"async": "fenceline_known_frames", "sync": "fenceline_known_sync"}
FPS, MODEL = 30, "image_filter_rgba8"


def run_case(display: str, tmp: Path, socket: Path, kind: str, fmt: str, size: tuple[int, int],
             side: str, seconds: float, warmup_s: float) -> dict[str, float]:
    width, height = size
    settings: dict[str, object] = {
        "width": width, "height": height, "fps": FPS, "seconds": seconds, "every_ms": 500,
        "source": SOURCES[kind], "format": fmt}
    if side == "none":
        settings["filter"] = "none"
    else:
        settings.update(model=MODEL, socket=socket)
    run = obs.start(display, tmp / f"{kind}-{fmt}-{height}-{side}.log", plugins=(), **settings)
    last = run.finish(timeout_s=seconds + 120)
    if side != "none" and not str(last.get("status", "")).startswith("running"):
        raise RuntimeError(f"the filter did not run: {last.get('status')}")
    a = next(x for x in run.lines if x["t"] >= warmup_s)
    dt = last["t"] - a["t"]
    frames = max(last.get("frames", 0) - a.get("frames", 0), 1)
    filter_ms = (last.get("video_ns", 0) - a.get("video_ns", 0)) / frames / 1e6
    stage_ms = (last.get("stage_ns", 0) - a.get("stage_ns", 0)) / frames / 1e6
    return {
        "obs_ms_per_frame": statistics.median(
            x["frame_time_ns"] for x in run.lines if x["t"] >= warmup_s) / 1e6,
        "filter_ms_per_frame": filter_ms,
        "stage_ms_per_frame": stage_ms,
        "own_ms_per_frame": filter_ms - stage_ms,
        "filter_ms_median": last.get("video_ns_p50", 0) / 1e6,
        "lagged_per_s": (last["lagged"] - a["lagged"]) / dt,
        "results_per_s": (last.get("filtered", 0) - a.get("filtered", 0)) / dt,
    }


def run_formats(display: str, tmp: Path, socket: Path, seconds: float,
                warmup_s: float) -> list[dict[str, Any]]:
    """The rows, printed as they come and returned."""
    rows: list[dict[str, Any]] = []
    print(f"formats: OBS at {FPS} fps, a {FPS} fps source, {MODEL}; {seconds:g} s per run "
          f"({warmup_s:g} s warmup)", flush=True)
    for width, height in SIZES:
        for kind, fmt in CASES:
            pair = {side: run_case(display, tmp, socket, kind, fmt, (width, height), side,
                                   seconds, warmup_s) for side in ("none", "fenceline")}
            row = {"size": f"{width}x{height}", "source": kind, "format": fmt, **pair}
            rows.append(row)
            print_row(row)
    return rows


HEADER = (f"{'size':>10} {'source':>6} {'format':>6} {'OBS ms/frame':>13} {'with filter':>12} "
          f"{'filter ms/frame':>16} {'(median)':>9} {'libobs staging':>15} {'own':>6} "
          f"{'lagged/s':>9} {'results/s':>10}")


def print_row(row: dict[str, Any]) -> None:
    none, fl = row["none"], row["fenceline"]
    print(f"{row['size']:>10} {row['source']:>6} {row['format']:>6} "
          f"{none['obs_ms_per_frame']:>13.2f} {fl['obs_ms_per_frame']:>12.2f} "
          f"{fl['filter_ms_per_frame']:>16.2f} {fl['filter_ms_median']:>9.2f} "
          f"{fl['stage_ms_per_frame']:>15.2f} {fl['own_ms_per_frame']:>6.2f} "
          f"{fl['lagged_per_s']:>9.1f} {fl['results_per_s']:>10.1f}", flush=True)
