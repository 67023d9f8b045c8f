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


@dataclass(frozen=True)
class Module:
    """An OBS module for the driver's ``plugin2=``, and the LD_LIBRARY_PATH it loads with ("":
    the system's libraries suffice)."""

    path: Path
    library_path: str = ""


def ffmpeg_module() -> Module | str:
    """OBS's own ``obs-ffmpeg`` module (the media source, ``ffmpeg_source``), or why it cannot
    load here. Debian ships it in obs-studio; it links FFmpeg's libavdevice, libsrt and libpci,
    which a system without OBS Studio lacks, so .ci/obs-modules takes the module out of the
    package into ``<venv>/lib/obs-plugins`` and those libraries into ``obs-ffmpeg-libs`` beside
    it. Looked for there, at ``$FENCELINE_OBS_FFMPEG``, and where an installed OBS Studio keeps
    it; the dynamic linker must find every library it links (``ldd``)."""
    local = Path(sys.prefix) / "lib" / "obs-plugins"
    candidates = [os.environ.get("FENCELINE_OBS_FFMPEG", ""), str(local / "obs-ffmpeg.so"),
                  "/usr/lib/x86_64-linux-gnu/obs-plugins/obs-ffmpeg.so",
                  "/usr/lib/obs-plugins/obs-ffmpeg.so"]
    path = next((Path(c) for c in candidates if c and Path(c).is_file()), None)
    if path is None:
        return ("OBS's obs-ffmpeg module is not here (Debian: obs-studio; .ci/obs-modules takes "
                "it out of the package)")
    libs = path.parent / "obs-ffmpeg-libs"
    module = Module(path, str(libs) if libs.is_dir() else "")
    env = dict(os.environ, LD_LIBRARY_PATH=module.library_path) if module.library_path else None
    try:
        out = subprocess.run(["ldd", str(path)], capture_output=True, text=True, env=env,
                             timeout=30)
    except (OSError, subprocess.TimeoutExpired) as e:
        return f"cannot check {path}'s libraries with ldd: {e}"
    missing = sorted({line.split()[0] for line in out.stdout.splitlines() if "not found" in line})
    if missing:
        return (f"{path} cannot load: the dynamic linker finds no {', '.join(missing)} "
                "(.ci/obs-modules unpacks them beside the venv)")
    return module


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


def start(display: str, log: Path, *, plugins: tuple[Path | Module, ...] = (),
          **settings: object) -> Run:
    """Starts ``fenceline-obs-driver run`` with key=value settings (native/obs/driver.c), loading
    ``plugins`` too (with their libraries' path)."""
    args = [str(driver()), "run", str(plugin())]
    env = dict(os.environ, DISPLAY=display)
    for extra in plugins:
        module = extra if isinstance(extra, Module) else Module(extra)
        args.append(f"plugin2={module.path}")
        if module.library_path:
            env["LD_LIBRARY_PATH"] = os.pathsep.join(
                p for p in (module.library_path, env.get("LD_LIBRARY_PATH", "")) if p)
    args += [f"{k}={v}" for k, v in settings.items()]
    with log.open("w") as err:
        proc = subprocess.Popen(args, stdout=subprocess.PIPE, stderr=err, text=True, env=env)
    return Run(proc, log)


def frames(path: Path, width: int, height: int) -> np.ndarray:
    """The frames the driver's probe wrote (``out=``), as [n, height, width, 4]."""
    data = np.fromfile(path, dtype=np.uint8)
    n = data.size // (width * height * 4)
    return data[: n * width * height * 4].reshape(n, height, width, 4)
