"""The GStreamer element (fencelinefilter, docs/gstreamer.md) in real pipelines.

- :func:`launch` and :func:`frames` drive ``gst-launch-1.0`` in its own process; frames leave the
  pipeline through ``fdsink`` on stdout, so the tests need no GStreamer Python bindings.
- :func:`play` (``python -m fenceline.bench.gst PIPELINE``) plays a pipeline to its end and prints
  the first error; the tests use it for pipelines that fail at once, where gst-launch-1.0 1.22
  can hang (docs/gstreamer.md).
- :func:`run_gst_bench` (``fenceline bench --gst``) prints frames per second through the element
  beside the same frames pulled out with appsink and run by onnxruntime in this process.
"""

from __future__ import annotations

import importlib
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import numpy as np

from fenceline.client.c_api import gst_plugin_dir
from fenceline.client.errors import ClientError

# Which packed formats the element takes, and their bytes per pixel.
CHANNELS = {"RGBA": 4, "BGRA": 4, "RGBx": 4, "BGRx": 4, "RGB": 3, "BGR": 3}
# A test pattern that changes every frame and covers the whole range of every channel.
SOURCE = "videotestsrc pattern=zone-plate kx2=20 ky2=20 kt=1 kxt=2"


def unavailable() -> str | None:
    """Why GStreamer pipelines cannot run here, or None."""
    if shutil.which("gst-launch-1.0") is None:
        return "gst-launch-1.0 is not installed (Debian: gstreamer1.0-tools)"
    try:
        gst_plugin_dir()
    except ClientError as e:
        return f"fencelinefilter was not built: {e}"
    return None


def gst_env(debug: str = "fencelinefilter:4") -> dict[str, str]:
    env = dict(os.environ)
    env["GST_PLUGIN_PATH"] = str(gst_plugin_dir())
    env["GST_DEBUG"] = debug
    env["GST_DEBUG_NO_COLOR"] = "1"
    # Our element must load even where a stale registry says otherwise.
    env.pop("GST_REGISTRY_UPDATE", None)
    return env


def caps(fmt: str, width: int, height: int) -> str:
    return f"video/x-raw,format={fmt},width={width},height={height},framerate=30/1"


def launch(pipeline: str, stderr: Path, env: dict[str, str] | None = None,
           stdout: int | None = subprocess.PIPE) -> subprocess.Popen[bytes]:
    """gst-launch-1.0 -q (quiet: stdout carries only fdsink's bytes)."""
    with stderr.open("wb") as err:
        return subprocess.Popen(
            ["gst-launch-1.0", "-q", *pipeline.split()],
            stdout=stdout, stderr=err, env=env or gst_env(),
        )


def frames(proc: subprocess.Popen[bytes], shape: tuple[int, ...]) -> Iterator[np.ndarray]:
    """Each frame the pipeline writes to stdout, until it ends."""
    assert proc.stdout is not None
    size = int(np.prod(shape))
    while True:
        data = proc.stdout.read(size)
        if not data:
            return
        assert len(data) == size, f"a torn frame: {len(data)} of {size} bytes"
        yield np.frombuffer(data, np.uint8).reshape(shape)


# ---- the bench: frames per second through the element beside appsink -> onnxruntime ----------

SIZES = {"720p": (1280, 720), "1080p": (1920, 1080)}
MODEL = "image_filter_rgba8"


def _import_gst() -> Any:
    """GStreamer's Python bindings (PyGObject). A virtual environment does not see Debian's
    python3-gi; its directory is added (last, so nothing of the venv is shadowed) when the
    system interpreter has the same Python version."""
    try:
        gi = importlib.import_module("gi")
    except ImportError:
        probe = subprocess.run(
            ["/usr/bin/python3", "-c",
             "import gi, os, sys; print(os.path.dirname(os.path.dirname(gi.__file__))); "
             "print('%d.%d' % sys.version_info[:2])"],
            capture_output=True, text=True, check=False,
        ) if os.path.exists("/usr/bin/python3") else None
        lines = probe.stdout.split() if probe is not None and probe.returncode == 0 else []
        if len(lines) != 2 or lines[1] != f"{sys.version_info[0]}.{sys.version_info[1]}":
            raise ClientError("the appsink reference needs GStreamer's Python bindings "
                              "(Debian: python3-gi gir1.2-gst-plugins-base-1.0)") from None
        sys.path.append(lines[0])
        gi = importlib.import_module("gi")
    gi.require_version("Gst", "1.0")
    gi.require_version("GstApp", "1.0")
    gst = importlib.import_module("gi.repository.Gst")
    importlib.import_module("gi.repository.GstApp")  # adds AppSink's methods (try_pull_sample)
    gst.init(None)
    return gst


def _pull_fps(Gst: Any, description: str, frames: int, warmup: int,
              on_sample: Callable[[Any], None] | None = None) -> float:
    """Plays `description` (ending in an appsink named sink) and returns frames per second
    between the warmup-th frame and the last one at the appsink."""
    pipeline = Gst.parse_launch(description)
    sink = pipeline.get_by_name("sink")
    pipeline.set_state(Gst.State.PLAYING)
    try:
        start, n = 0.0, 0
        while True:
            sample = sink.try_pull_sample(60 * Gst.SECOND)
            if sample is None:
                break
            if on_sample is not None:
                on_sample(sample)
            n += 1
            if n == warmup:
                start = time.perf_counter()
        bus = pipeline.get_bus()
        msg = bus.pop_filtered(Gst.MessageType.ERROR)
        if msg is not None:
            err, _ = msg.parse_error()
            raise ClientError(f"the pipeline failed: {err.message}")
        if n != frames:
            raise ClientError(f"the pipeline delivered {n} of {frames} frames")
        return (n - warmup) / (time.perf_counter() - start)
    finally:
        pipeline.set_state(Gst.State.NULL)


def bench_size(Gst: Any, socket: Path, model_path: Path, width: int, height: int, frames: int,
               warmup: int, rounds: int) -> dict[str, Any]:
    """Alternates the two pipelines `rounds` times and keeps each one's median, so load that
    comes and goes on a shared machine falls on both alike."""
    import onnxruntime as ort

    src = f"{SOURCE} num-buffers={frames} ! {caps('RGBA', width, height)}"
    sink = "appsink name=sink sync=false max-buffers=4"
    sess = ort.InferenceSession(str(model_path), providers=["CPUExecutionProvider"])
    shape = (1, height, width, 4)

    def infer(sample: Any) -> None:
        buf = sample.get_buffer()
        ok, info = buf.map(Gst.MapFlags.READ)
        if not ok:
            raise ClientError("could not map an appsink buffer")
        try:
            x = np.frombuffer(info.data, np.uint8, int(np.prod(shape))).reshape(shape)
            sess.run(None, {"image": x})
        finally:
            buf.unmap(info)

    element_runs: list[float] = []
    reference_runs: list[float] = []
    for _ in range(rounds):
        element_runs.append(_pull_fps(
            Gst, f"{src} ! fencelinefilter model={MODEL} socket={socket} ! {sink}", frames,
            warmup))
        reference_runs.append(_pull_fps(Gst, f"{src} ! {sink}", frames, warmup, infer))
    element, reference = statistics.median(element_runs), statistics.median(reference_runs)
    return {"element_fps": element, "appsink_onnxruntime_fps": reference,
            "ratio": element / reference, "element_rounds": element_runs,
            "reference_rounds": reference_runs}


def run_gst_bench(*, quick: bool = False, json_path: Path | None = None,
                  sizes: list[str] | None = None) -> int:
    """``fenceline bench --gst``: starts a service, then for each size runs the same frames
    through fencelinefilter and through appsink into onnxruntime in this process."""
    from fenceline.cli.process import start_service, stop_service
    from fenceline.models import build_repository
    from fenceline.models.builtin import cache_dir

    why = unavailable()
    if why is not None:
        print(f"fenceline: {why}", file=sys.stderr)
        return 2
    os.environ["GST_PLUGIN_PATH"] = str(gst_plugin_dir())
    try:
        Gst = _import_gst()
    except ClientError as e:
        print(f"fenceline: {e}", file=sys.stderr)
        return 2
    unknown = sorted(set(sizes or []) - set(SIZES))
    if unknown:
        print(f"fenceline: --gst sizes are {', '.join(SIZES)}, not {', '.join(unknown)}",
              file=sys.stderr)
        return 2
    frames, warmup, rounds = (60, 10, 1) if quick else (150, 20, 3)
    model_path = build_repository(cache_dir(), [MODEL]) / MODEL / "1" / "model.onnx"
    results: dict[str, Any] = {"model": MODEL, "frames": frames, "warmup": warmup,
                               "rounds": rounds,
                               "loadavg_before": os.getloadavg()[0], "sizes": {}}
    with tempfile.TemporaryDirectory(prefix="fenceline-gst-bench-") as tmp:
        proc, _, sock = start_service([MODEL], Path(tmp))
        try:
            print(f"{'size':>6} {'fencelinefilter fps':>20} {'appsink->onnxruntime fps':>25} "
                  f"{'ratio':>6}")
            for name in sizes or list(SIZES):
                width, height = SIZES[name]
                r = bench_size(Gst, sock, model_path, width, height, frames, warmup, rounds)
                results["sizes"][name] = r
                print(f"{name:>6} {r['element_fps']:>20.1f} {r['appsink_onnxruntime_fps']:>25.1f} "
                      f"{r['ratio']:>6.2f}", flush=True)
        finally:
            stop_service(proc)
    results["loadavg_after"] = os.getloadavg()[0]
    print(f"load average (1 min) before/after: {results['loadavg_before']:.2f} / "
          f"{results['loadavg_after']:.2f} on {os.cpu_count()} CPUs")
    if json_path is not None:
        json_path.write_text(json.dumps(results, indent=2))
    return 0


def play(description: str, timeout_s: float = 120.0, seek_after_s: float | None = None) -> int:
    """Plays a pipeline until EOS or its first error; prints the error (text, debug, details)
    to stderr. With `seek_after_s`, a flushing seek back to 0 happens that long after PLAYING.
    Returns 0 at EOS, 1 after an error, 2 when nothing ended it in time."""
    Gst = _import_gst()
    pipeline = Gst.parse_launch(description)
    bus = pipeline.get_bus()
    ending = Gst.MessageType.ERROR | Gst.MessageType.EOS
    try:
        pipeline.set_state(Gst.State.PLAYING)
        msg = None
        if seek_after_s is not None:
            msg = bus.timed_pop_filtered(int(seek_after_s * Gst.SECOND), ending)
            if msg is None:
                if not pipeline.seek_simple(Gst.Format.TIME, Gst.SeekFlags.FLUSH, 0):
                    print("the flushing seek was refused", file=sys.stderr)
                    return 1
                print("flushing seek to 0", file=sys.stderr)
        if msg is None:
            msg = bus.timed_pop_filtered(int(timeout_s * Gst.SECOND), ending)
        if msg is None:
            print(f"no EOS or error within {timeout_s} s", file=sys.stderr)
            return 2
        if msg.type == Gst.MessageType.EOS:
            return 0
        err, debug = msg.parse_error()
        details = msg.parse_error_details()
        print(f"ERROR: from element {msg.src.get_path_string()}: {err.message}\n{debug}",
              file=sys.stderr)
        if details is not None:
            print(f"details: {details.to_string()}", file=sys.stderr)
        return 1
    finally:
        pipeline.set_state(Gst.State.NULL)


def main(argv: list[str] | None = None) -> int:
    import argparse

    p = argparse.ArgumentParser(prog="python -m fenceline.bench.gst",
                                description="Play a GStreamer pipeline to EOS or its first error.")
    p.add_argument("pipeline", help="a gst-launch-1.0 pipeline description, as one argument")
    p.add_argument("--seek-after", type=float, metavar="SECONDS",
                   help="a flushing seek back to 0 this long after PLAYING")
    args = p.parse_args(argv)
    os.environ.setdefault("GST_PLUGIN_PATH", str(gst_plugin_dir()))
    return play(args.pipeline, seek_after_s=args.seek_after)


if __name__ == "__main__":
    raise SystemExit(main())
