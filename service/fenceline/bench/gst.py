"""The GStreamer element (fencelinefilter, docs/gstreamer.md) in real pipelines.

- :func:`launch` and :func:`frames` drive ``gst-launch-1.0`` in its own process; frames leave the
  pipeline through ``fdsink`` on stdout, so the tests need no GStreamer Python bindings.
- :func:`play` (``python -m fenceline.bench.gst PIPELINE``) plays a pipeline to its end and prints
  the first error; the tests use it for pipelines that fail at once, where gst-launch-1.0 1.22
  can hang (docs/gstreamer.md).
- :func:`import_gst` loads GStreamer's Python bindings, from Debian's python3-gi if need be
  (also for ``fenceline bench --gst``, in :mod:`fenceline.bench.gst_fps`).
"""

from __future__ import annotations

import importlib
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np

from fenceline.client.c_api import gst_plugin_dir, plugin_unavailable
from fenceline.client.errors import ClientError

# Which packed formats the element takes, and their bytes per pixel.
CHANNELS = {"RGBA": 4, "BGRA": 4, "RGBx": 4, "BGRx": 4, "RGB": 3, "BGR": 3}
# A test pattern that changes every frame and covers the whole range of every channel.
SOURCE = "videotestsrc pattern=zone-plate kx2=20 ky2=20 kt=1 kxt=2"


def unavailable() -> str | None:
    """Why GStreamer pipelines cannot run here, or None."""
    return plugin_unavailable("gst-launch-1.0", "gstreamer1.0-tools", gst_plugin_dir,
                              "fencelinefilter was not built")


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


def import_gst() -> Any:
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


def play(description: str, timeout_s: float = 120.0, seek_after_s: float | None = None) -> int:
    """Plays a pipeline until EOS or its first error; prints the error (text, debug, details)
    to stderr. With `seek_after_s`, a flushing seek back to 0 happens that long after PLAYING.
    Returns 0 at EOS, 1 after an error, 2 when nothing ended it in time."""
    Gst = import_gst()
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
