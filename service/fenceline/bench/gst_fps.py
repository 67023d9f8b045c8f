"""``fenceline bench --gst``: frames per second through fencelinefilter beside the way one would
do it without fenceline (docs/gstreamer.md, "Measured").

- element: ``SOURCE ! fencelinefilter ! appsink``, the service in its own process.
- reference: ``SOURCE ! appsink``, each frame run by onnxruntime in this process (the same model
  with the service's own session options), the result pushed into ``appsrc ! fakesink``.

Each side's time per frame is split into the model's (onnxruntime's run: the service's
``fenceline_session_infer_duration_seconds`` for the element, the bench's own clock around
``session.run`` for the reference) and the rest, what the path adds: the element's round trip
to the service, the reference's mapping, copies and pushes. The model's share moves with the
machine's load; the path's is what differs between the two.

The two take turns in rounds ordered element, reference, reference, element, ... so that a load
that rises or falls during the bench touches both alike, on a shared machine as much as possible.
Each keeps its median; the ratio of each adjacent pair is reported too.
"""

from __future__ import annotations

import json
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import httpx
import numpy as np

from fenceline.bench.gst import SOURCE, caps, import_gst, unavailable
from fenceline.client.c_api import gst_plugin_dir
from fenceline.client.errors import ClientError

SIZES = {"720p": (1280, 720), "1080p": (1920, 1080)}
MODEL = "image_filter_rgba8"
PULL_TIMEOUT_S = 120


class CpuClock:
    """CPU seconds used by this process (all its threads: GStreamer's, onnxruntime's) and by the
    service's process, so each side's CPU time per frame can be compared whatever the load."""

    def __init__(self, service_pid: int) -> None:
        self.stat = Path(f"/proc/{service_pid}/stat")
        self.tick = os.sysconf("SC_CLK_TCK")

    def __call__(self) -> float:
        # Fields after the command's closing parenthesis; utime and stime are the 12th and 13th.
        fields = self.stat.read_text().rsplit(")", 1)[1].split()
        return time.process_time() + (int(fields[11]) + int(fields[12])) / self.tick


class ModelClock:
    """(seconds in onnxruntime, runs) of the bench's model in the service so far, from its
    metrics."""

    def __init__(self, url: str) -> None:
        self.url = url

    def __call__(self) -> tuple[float, float]:
        names = ("fenceline_session_infer_duration_seconds_sum", "fenceline_session_runs_total")
        totals = [0.0, 0.0]
        for line in httpx.get(self.url + "/metrics", timeout=30).text.splitlines():
            for i, name in enumerate(names):
                if line.startswith(name + "{") and f'model="{MODEL}"' in line:
                    totals[i] += float(line.rsplit(" ", 1)[1])
        return totals[0], totals[1]


class Side:
    """One round of one side: frames per second, CPU and model seconds per frame."""

    def __init__(self, fps: float, cpu_s: float, model_s: float) -> None:
        self.fps, self.cpu_s, self.model_s = fps, cpu_s, model_s

    @property
    def path_s(self) -> float:
        """What the path adds to the model's time per frame."""
        return 1 / self.fps - self.model_s


def _error(Gst: Any, pipeline: Any) -> str | None:
    msg = pipeline.get_bus().pop_filtered(Gst.MessageType.ERROR)
    if msg is None:
        return None
    err, _ = msg.parse_error()
    return str(err.message)


def element_fps(Gst: Any, src: str, socket: Path, frames: int, warmup: int,
                cpu: CpuClock, model_clock: ModelClock) -> Side:
    """Frames per second at the appsink after fencelinefilter, from the warmup-th frame on, and
    CPU and service model seconds per frame meanwhile."""
    pipeline = Gst.parse_launch(
        f"{src} ! fencelinefilter model={MODEL} socket={socket} "
        "! appsink name=sink sync=false max-buffers=4")
    sink = pipeline.get_by_name("sink")
    pipeline.set_state(Gst.State.PLAYING)
    try:
        start, cpu_start, model_start, n = 0.0, 0.0, (0.0, 0.0), 0
        while sink.try_pull_sample(PULL_TIMEOUT_S * Gst.SECOND) is not None:
            n += 1
            if n == warmup:
                start, cpu_start, model_start = time.perf_counter(), cpu(), model_clock()
        end, cpu_end = time.perf_counter(), cpu()
        # Per run, not per frame pulled: the service is a few frames ahead of the appsink.
        model_end = model_clock()
        runs = model_end[1] - model_start[1]
        model_s = (model_end[0] - model_start[0]) / runs if runs > 0 else 0.0
        why = _error(Gst, pipeline)
        if why is not None:
            raise ClientError(f"the element's pipeline failed: {why}")
        if n != frames:
            raise ClientError(f"the element's pipeline delivered {n} of {frames} frames")
        k = n - warmup
        return Side(k / (end - start), (cpu_end - cpu_start) / k, model_s)
    finally:
        pipeline.set_state(Gst.State.NULL)


def reference_fps(Gst: Any, src: str, session: Any, width: int, height: int, frames: int,
                  warmup: int, cpu: CpuClock) -> Side:
    """Frames per second pushed back into the pipeline after onnxruntime in this process, from
    the warmup-th frame to the result pipeline's EOS, and CPU and model seconds per frame
    meanwhile."""
    shape = (1, height, width, 4)
    size = int(np.prod(shape))
    source = Gst.parse_launch(f"{src} ! appsink name=frames sync=false max-buffers=4")
    results = Gst.parse_launch(
        f"appsrc name=results format=time caps={caps('RGBA', width, height)} "
        "! fakesink sync=false")
    frames_sink, appsrc = source.get_by_name("frames"), results.get_by_name("results")
    results.set_state(Gst.State.PLAYING)
    source.set_state(Gst.State.PLAYING)
    try:
        start, cpu_start, model_s, n = 0.0, 0.0, 0.0, 0
        while (sample := frames_sink.try_pull_sample(PULL_TIMEOUT_S * Gst.SECOND)) is not None:
            buf = sample.get_buffer()
            ok, info = buf.map(Gst.MapFlags.READ)
            if not ok:
                raise ClientError("could not map an appsink buffer")
            try:
                x = np.frombuffer(info.data, np.uint8, size).reshape(shape)
                t0 = time.perf_counter()
                y = session.run(None, {"image": x})[0]
                if n >= warmup:
                    model_s += time.perf_counter() - t0
            finally:
                buf.unmap(info)
            out = Gst.Buffer.new_wrapped(y.tobytes())
            out.pts, out.duration = buf.pts, buf.duration
            if appsrc.push_buffer(out) != Gst.FlowReturn.OK:
                raise ClientError("appsrc refused a result")
            n += 1
            if n == warmup:
                start, cpu_start = time.perf_counter(), cpu()
        appsrc.end_of_stream()
        ending = Gst.MessageType.EOS | Gst.MessageType.ERROR
        msg = results.get_bus().timed_pop_filtered(PULL_TIMEOUT_S * Gst.SECOND, ending)
        end, cpu_end = time.perf_counter(), cpu()
        why = _error(Gst, source) or (
            "no EOS" if msg is None else
            str(msg.parse_error()[0].message) if msg.type == Gst.MessageType.ERROR else None)
        if why is not None:
            raise ClientError(f"the reference pipeline failed: {why}")
        if n != frames:
            raise ClientError(f"the reference pipeline delivered {n} of {frames} frames")
        k = n - warmup
        return Side(k / (end - start), (cpu_end - cpu_start) / k, model_s / k)
    finally:
        source.set_state(Gst.State.NULL)
        results.set_state(Gst.State.NULL)


def bench_size(Gst: Any, socket: Path, cpu: CpuClock, model_clock: ModelClock, model_path: Path,
               width: int, height: int, frames: int, warmup: int, rounds: int,
               intra_op_threads: int | None) -> dict[str, Any]:
    from fenceline.runtime.models import Model, ModelSettings

    settings = ModelSettings() if intra_op_threads is None else ModelSettings(
        intra_op_threads=intra_op_threads)
    model = Model(MODEL, "1", model_path, settings)
    model.load()  # the service's session options: the comparison is the path, not the settings
    src = f"{SOURCE} num-buffers={frames} ! {caps('RGBA', width, height)}"
    runs: dict[str, list[Side]] = {"element": [], "reference": []}
    for r in range(rounds):
        # ABBA: neither side always goes first, so a steady drift in load favours neither.
        for side in ("element", "reference") if r % 2 == 0 else ("reference", "element"):
            runs[side].append(
                element_fps(Gst, src, socket, frames, warmup, cpu, model_clock)
                if side == "element" else
                reference_fps(Gst, src, model.session, width, height, frames, warmup, cpu))
        e, ref = runs["element"][-1], runs["reference"][-1]
        print(f"  round {r + 1}/{rounds}: element {e.fps:.1f} fps (model {e.model_s * 1e3:.1f} + "
              f"path {e.path_s * 1e3:.1f} ms/frame, {e.cpu_s * 1e3:.0f} CPU ms/frame), "
              f"reference {ref.fps:.1f} fps (model {ref.model_s * 1e3:.1f} + path "
              f"{ref.path_s * 1e3:.1f} ms/frame, {ref.cpu_s * 1e3:.0f} CPU ms/frame), "
              f"load {os.getloadavg()[0]:.2f}", flush=True)

    def each(side: str, field: str, scale: float = 1.0) -> list[float]:
        return [getattr(x, field) * scale for x in runs[side]]

    fps = {side: each(side, "fps") for side in runs}
    element, reference = statistics.median(fps["element"]), statistics.median(fps["reference"])
    pair_ratios = [e / r for e, r in zip(fps["element"], fps["reference"], strict=True)]
    row: dict[str, Any] = {
        "element_fps": element, "appsink_onnxruntime_fps": reference,
        "ratio": element / reference, "pair_ratios": pair_ratios,
        "median_pair_ratio": statistics.median(pair_ratios),
        "element_rounds": fps["element"], "reference_rounds": fps["reference"]}
    for side in runs:
        for field, key in (("cpu_s", "cpu_ms"), ("model_s", "model_ms"), ("path_s", "path_ms")):
            values = each(side, field, 1e3)
            row[f"{side}_{key}_per_frame"] = statistics.median(values)
            row[f"{side}_{key}_rounds"] = values
    return row


def run_gst_bench(*, quick: bool = False, json_path: Path | None = None,
                  sizes: list[str] | None = None, rounds: int | None = None,
                  frames: int | None = None, intra_op_threads: int | None = None) -> int:
    """Starts a service, then for each size alternates the element and the reference.
    ``intra_op_threads``: onnxruntime's intra-op threads on both sides (None: the model's
    default, a pool sized to the machine)."""
    from fenceline.bench.scaling import _repository
    from fenceline.cli.process import start_service, stop_service
    from fenceline.models import build_repository
    from fenceline.models.builtin import cache_dir

    why = unavailable()
    if why is not None:
        print(f"fenceline: {why}", file=sys.stderr)
        return 2
    os.environ["GST_PLUGIN_PATH"] = str(gst_plugin_dir())
    try:
        Gst = import_gst()
    except ClientError as e:
        print(f"fenceline: {e}", file=sys.stderr)
        return 2
    unknown = sorted(set(sizes or []) - set(SIZES))
    if unknown:
        print(f"fenceline: --gst sizes are {', '.join(SIZES)}, not {', '.join(unknown)}",
              file=sys.stderr)
        return 2
    n, warmup, default_rounds = (60, 10, 1) if quick else (150, 20, 4)
    frames = frames or n
    rounds = rounds or default_rounds
    if intra_op_threads is not None and not 0 <= intra_op_threads <= 1024:
        print("fenceline: --intra-op-threads is 0 (one per core) .. 1024", file=sys.stderr)
        return 2
    if rounds < 1 or frames <= warmup:
        print(f"fenceline: --rounds must be at least 1 and --frames more than the {warmup} of "
              "warmup", file=sys.stderr)
        return 2
    model_path = build_repository(cache_dir(), [MODEL]) / MODEL / "1" / "model.onnx"
    results: dict[str, Any] = {"model": MODEL, "frames": frames, "warmup": warmup,
                               "rounds": rounds, "intra_op_threads": intra_op_threads,
                               "cpus": os.cpu_count(),
                               "loadavg_before": os.getloadavg()[0], "sizes": {}}
    threads = "default" if intra_op_threads is None else str(intra_op_threads)
    print(f"{rounds} round(s) of {frames} frames ({warmup} of warmup) per side and size, "
          f"onnxruntime intra-op threads {threads}; "
          f"load average (1 min) {results['loadavg_before']:.2f} on {os.cpu_count()} CPUs",
          flush=True)
    with tempfile.TemporaryDirectory(prefix="fenceline-gst-bench-") as tmp:
        if intra_op_threads is None:
            proc, url, sock = start_service([MODEL], Path(tmp))
        else:
            repo = _repository(Path(tmp), MODEL, model_path, intra_op_threads)
            proc, url, sock = start_service([], Path(tmp), extra=("--model-repository", str(repo)))
        try:
            for name in sizes or list(SIZES):
                width, height = SIZES[name]
                print(f"{name}:", flush=True)
                results["sizes"][name] = bench_size(Gst, sock, CpuClock(proc.pid),
                                                    ModelClock(url), model_path, width, height,
                                                    frames, warmup, rounds, intra_op_threads)
        finally:
            stop_service(proc)
    results["loadavg_after"] = os.getloadavg()[0]
    print(f"{'size':>6} {'fencelinefilter fps':>20} {'appsink->onnxruntime fps':>25} "
          f"{'ratio':>6} {'pair ratio':>10} {'model ms/frame':>15} {'path ms/frame':>14} "
          f"{'CPU ms/frame':>13}")

    def both(r: dict[str, Any], key: str, digits: int) -> str:
        return (f"{r[f'element_{key}_per_frame']:.{digits}f} / "
                f"{r[f'reference_{key}_per_frame']:.{digits}f}")

    for name, r in results["sizes"].items():
        print(f"{name:>6} {r['element_fps']:>20.1f} {r['appsink_onnxruntime_fps']:>25.1f} "
              f"{r['ratio']:>6.2f} {r['median_pair_ratio']:>10.2f} {both(r, 'model_ms', 1):>15} "
              f"{both(r, 'path_ms', 1):>14} {both(r, 'cpu_ms', 0):>13}")
    print(f"load average (1 min) before/after: {results['loadavg_before']:.2f} / "
          f"{results['loadavg_after']:.2f} on {os.cpu_count()} CPUs; medians of the rounds "
          "(element / reference); pair ratio: the median of each round's element/reference; "
          "path: 1/fps - model")
    if json_path is not None:
        json_path.write_text(json.dumps(results, indent=2))
    return 0
