"""The tracked tree holds no unresolved merge: a conflict block once sat in docs/reliability.md
for a whole session because nothing read the file as text."""

import re
import subprocess
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
MARKER = re.compile(rb"^(<{7} |>{7} |={7}$)", re.MULTILINE)


def test_no_tracked_file_holds_a_merge_conflict_marker() -> None:
    listed = subprocess.run(["git", "ls-files", "-z"], cwd=ROOT, capture_output=True, check=False)
    if listed.returncode != 0:
        files = [p for p in ROOT.rglob("*") if p.is_file() and ".git" not in p.parts]
    else:
        files = [ROOT / n.decode() for n in listed.stdout.split(b"\0") if n]
    marked = [
        str(p.relative_to(ROOT))
        for p in files
        if p.suffix not in {".png", ".onnx", ".whl"} and p.is_file() and MARKER.search(p.read_bytes())
    ]
    assert marked == [], f"merge conflict markers in {marked}"
