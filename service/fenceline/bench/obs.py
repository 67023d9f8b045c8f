"""Headless OBS for the OBS filter's tests and bench (docs/obs.md): an X server (Xvfb), and
``fenceline-obs-driver``, a small libobs program that renders one source of known frames
through a filter and prints its counters as JSON lines."""

from __future__ import annotations

import contextlib
import json
import os
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from fenceline.cli.process import stop_process
from fenceline.client.c_api import obs_plugin_dir, plugin_unavailable

PERIOD = 16  # the source repeats its frames after this many


def unavailable() -> str | None:
    """Why the OBS filter cannot run here, or None."""
    return plugin_unavailable("Xvfb", "xvfb", obs_plugin_dir,
                              "the OBS filter was not built (Debian: libobs-dev)")


def plugin() -> Path:
    return obs_plugin_dir() / "fenceline-obs.so"


def driver() -> Path:
    return obs_plugin_dir() / "fenceline-obs-driver"


def image_source_module() -> Path | None:
    """OBS's own ``image-source`` module (the color and image sources, ``color_source`` and
    ``image_source``), or None. Debian ships it in the OBS application's package, obs-studio,
    which brings Qt; the module itself needs only libobs, so .ci/run takes it out of the package
    into ``<venv>/lib/obs-plugins`` instead of installing the application. Looked for there, at
    ``$FENCELINE_OBS_IMAGE_SOURCE``, and where an installed OBS Studio keeps it."""
    candidates = [os.environ.get("FENCELINE_OBS_IMAGE_SOURCE", ""),
                  str(Path(sys.prefix) / "lib" / "obs-plugins" / "image-source.so"),
                  "/usr/lib/x86_64-linux-gnu/obs-plugins/image-source.so",
                  "/usr/lib/obs-plugins/image-source.so"]
    return next((Path(c) for c in candidates if c and Path(c).is_file()), None)


def known_frame(k: int, width: int, height: int) -> np.ndarray:
    """Frame k of the driver's source, RGBA (native/obs/driver.c makes the same bytes)."""
    x = np.arange(width, dtype=np.int64)[None, :]
    y = np.arange(height, dtype=np.int64)[:, None]
    c0 = x * 3 + y * 7 + (k % PERIOD) * 13
    rgba = np.stack([c0, c0 + 50, c0 + 100, np.full_like(c0, 255)], axis=-1) % 256
    rgba[..., 3] = 255
    return rgba.astype(np.uint8)


@contextlib.contextmanager
def xvfb() -> Iterator[str]:
    """An X server of its own for the block; yields its DISPLAY."""
    read, write = os.pipe()
    proc = subprocess.Popen(
        ["Xvfb", "-displayfd", str(write), "-nolisten", "tcp", "-screen", "0", "640x480x24"],
        pass_fds=(write,), stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )
    os.close(write)
    try:
        with os.fdopen(read) as f:
            number = f.readline().strip()
        if not number:
            raise RuntimeError(f"Xvfb did not start (exit {proc.poll()})")
        yield f":{number}"
    finally:
        stop_process(proc, 10)


@dataclass
class Run:
    """One driver run: its JSON lines as they came, and its log."""

    proc: subprocess.Popen[str]
    log: Path
    lines: list[dict[str, Any]] = field(default_factory=list)

    def next(self, timeout_s: float = 60.0) -> dict[str, Any] | None:
        """The next counters line; None once the driver has exited."""
        assert self.proc.stdout is not None
        line = self.proc.stdout.readline()
        if not line:
            self.proc.wait(timeout_s)
            return None
        obj: dict[str, Any] = json.loads(line)
        self.lines.append(obj)
        return obj

    def finish(self, timeout_s: float = 120.0) -> dict[str, Any]:
        """Reads to the end; the last line (``done``). Raises when the driver failed."""
        deadline = time.monotonic() + timeout_s
        while self.next() is not None:
            if time.monotonic() > deadline:
                self.proc.kill()
                break
        self.close(timeout_s)
        if self.proc.returncode != 0 or not self.lines or not self.lines[-1].get("done"):
            raise RuntimeError(f"fenceline-obs-driver exited with {self.proc.returncode}:\n"
                               f"{self.log_text()[-4000:]}")
        return self.lines[-1]

    def close(self, timeout_s: float = 30.0) -> None:
        """Ends the driver (SIGTERM if it still runs) and closes its pipe. Safe twice."""
        stop_process(self.proc, timeout_s)
        if self.proc.stdout is not None:
            self.proc.stdout.close()

    def log_text(self) -> str:
        return self.log.read_text(errors="replace")


def start(display: str, log: Path, *, plugins: tuple[Path, ...] = (), **settings: object) -> Run:
    """Starts ``fenceline-obs-driver run`` with key=value settings (native/obs/driver.c)."""
    args = [str(driver()), "run", str(plugin())]
    for extra in plugins:
        args.append(f"plugin2={extra}")
    args += [f"{k}={v}" for k, v in settings.items()]
    env = dict(os.environ, DISPLAY=display)
    with log.open("w") as err:
        proc = subprocess.Popen(args, stdout=subprocess.PIPE, stderr=err, text=True, env=env)
    return Run(proc, log)


def frames(path: Path, width: int, height: int) -> np.ndarray:
    """The frames the driver's probe wrote (``out=``), as [n, height, width, 4]."""
    data = np.fromfile(path, dtype=np.uint8)
    n = data.size // (width * height * 4)
    return data[: n * width * height * 4].reshape(n, height, width, 4)
