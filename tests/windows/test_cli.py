"""The CLI on Windows, as a user runs it: `fenceline demo` starts the service and a renderer as
two Windows processes that share the frame and fences by NT name over a named pipe."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from PIL import Image


def test_demo_runs_service_and_renderer_and_writes_the_before_after_image(tmp_path: Path) -> None:
    out = tmp_path / "demo.png"
    p = subprocess.run(
        [sys.executable, "-m", "fenceline", "demo", "--frames", "20", "--out", str(out)],
        stdin=subprocess.DEVNULL, capture_output=True, text=True, timeout=600,
    )
    assert p.returncode == 0, p.stdout + p.stderr
    assert "frame   20/20" in p.stdout and f"before/after written to {out}" in p.stdout, p.stdout
    assert "\\\\.\\pipe\\fenceline-" in p.stdout  # the service's own pipe
    with Image.open(out) as image:  # the two halves, then the caption of what the model did
        assert image.size[0] == 2 * 640 + 8 and image.size[1] > 360


def test_bench_says_in_one_line_that_it_runs_on_linux_only() -> None:
    p = subprocess.run(
        [sys.executable, "-m", "fenceline", "bench", "--quick"],
        stdin=subprocess.DEVNULL, capture_output=True, text=True, timeout=300,
    )
    assert p.returncode == 2, p.stdout + p.stderr
    assert p.stderr.strip().splitlines()[-1].startswith("fenceline: fenceline bench runs on Linux only")
    assert "Traceback" not in p.stderr
