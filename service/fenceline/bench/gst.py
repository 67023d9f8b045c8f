"""Drives real GStreamer pipelines with gst-launch-1.0 for the fencelinefilter tests and bench:
frames leave the pipeline through fdsink on stdout, so nothing here needs GStreamer's Python
bindings."""

from __future__ import annotations

import os
import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path

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
    """gst-launch-1.0 -q (quiet: stdout carries only fdsink's bytes) -e (EOS on interrupt)."""
    with stderr.open("wb") as err:
        return subprocess.Popen(
            ["gst-launch-1.0", "-q", "-e", *pipeline.split()],
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
