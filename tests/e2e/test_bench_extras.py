"""`fenceline bench` after the README's plain install (no [test] or [bench] extra): the rows
whose client or peer is not installed are skipped with one line naming the extra that brings
them, and the run exits 0. The optional modules are hidden from a real bench process (as a
base install lacks them); its rows run in real lanes and a real service."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

HIDE = ("tritonclient", "rapidocr_onnxruntime")  # what only the extras install


def test_bench_without_the_extras_skips_their_rows_with_one_line_and_exits_0(tmp_path: Path) -> None:
    code = (
        "import sys\n"
        f"for m in {HIDE!r}: sys.modules[m] = None  # as if not installed\n"
        "from fenceline.cli import main\n"
        "sys.exit(main(sys.argv[1:]))\n"
    )
    args = ["bench", "--quick", "--sizes", "64x64", "--transports",
            "in-process,kserve-binary,system-shm", "--seconds", "0.3", "--json", "out.json"]
    env = dict(os.environ, FENCELINE_CACHE=str(tmp_path / "cache"))
    r = subprocess.run([sys.executable, "-c", code, *args], capture_output=True, text=True,
                       timeout=300, env=env, cwd=tmp_path)
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    assert "FAILED" not in r.stdout and "ModuleNotFoundError" not in r.stdout + r.stderr
    lines = [line for line in r.stdout.splitlines() if line.startswith("not measured:")]
    assert len(lines) == 1, r.stdout
    assert ("kserve-binary, system-shm (needs tritonclient, from the [bench] or [test] extra: "
            "pip install '.[bench]')") in lines[0]
    assert "ppocr_det (needs rapidocr-onnxruntime, from the [bench] extra" in lines[0]
    doc = json.loads((tmp_path / "out.json").read_text())
    assert doc["failures"] == []
    assert {r["transport"] for r in doc["rows"]} == {"in-process"}
    assert doc["skipped"]["kserve-binary"].startswith("needs tritonclient")
