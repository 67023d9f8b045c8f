"""The committed type stub of fenceline._native is what the build generates, not hand-written."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

STUB = Path(__file__).parents[2] / "service" / "fenceline" / "_native.pyi"


def test_native_stub_matches_the_build(tmp_path: Path) -> None:
    subprocess.run(
        [sys.executable, "-m", "pybind11_stubgen", "fenceline._native", "-o", str(tmp_path)],
        check=True, capture_output=True,
    )
    generated = (tmp_path / "fenceline" / "_native.pyi").read_text()
    assert generated == STUB.read_text(), (
        "service/fenceline/_native.pyi is out of date: run "
        "`python -m pybind11_stubgen fenceline._native -o service`"
    )
