"""``fenceline demo``: the service and a renderer, two processes, one image model, live."""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
from pathlib import Path

from fenceline.cli.process import start_service, stop_service
from fenceline.errors import FencelineError


def demo(frames: int, out: Path) -> int:
    if frames <= 0:
        raise FencelineError("--frames must be positive")
    # Checked before anything starts: a bad path found after the run would waste it.
    folder = out.parent if str(out.parent) else Path(".")
    if not folder.is_dir():
        raise FencelineError(f"--out {out}: the directory {folder} does not exist; create it first")
    if not os.access(folder, os.W_OK) or (out.exists() and not os.access(out, os.W_OK)):
        raise FencelineError(f"--out {out}: cannot write there; choose another path")
    with tempfile.TemporaryDirectory(prefix="fenceline-demo-") as tmp:
        proc, url, sock = start_service(["image_filter"], Path(tmp))
        try:
            print(f"service pid {proc.pid} on {url} and {sock}")
            print("renderer: 1280x720 frames -> sharpen + tone map (ONNX) -> back in shared memory")
            renderer = subprocess.run(
                [sys.executable, "-m", "fenceline.demo.renderer", "--socket", str(sock),
                 "--frames", str(frames), "--png", str(out)],
                env=dict(os.environ, PYTHONUNBUFFERED="1"),
            )
        finally:
            stop_service(proc)
    return renderer.returncode
