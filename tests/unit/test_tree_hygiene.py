"""The tracked tree holds no unresolved merge (a conflict block once sat in docs/reliability.md
unnoticed because nothing read the file as text), and its Markdown links lead
somewhere (three pointed at headings that never existed)."""

import re
import subprocess
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
MARKER = re.compile(rb"^(<{7} |>{7} |={7}$)", re.MULTILINE)


def _tracked() -> list[Path]:
    listed = subprocess.run(["git", "ls-files", "-z"], cwd=ROOT, capture_output=True, check=False)
    if listed.returncode != 0:
        return [p for p in ROOT.rglob("*") if p.is_file() and ".git" not in p.parts]
    return [ROOT / n.decode() for n in listed.stdout.split(b"\0") if n]


def test_no_tracked_file_holds_a_merge_conflict_marker() -> None:
    files = _tracked()
    marked = [
        str(p.relative_to(ROOT))
        for p in files
        if p.suffix not in {".png", ".onnx", ".whl"} and p.is_file() and MARKER.search(p.read_bytes())
    ]
    assert marked == [], f"merge conflict markers in {marked}"


FENCE = re.compile(r"^```.*?^```", re.MULTILINE | re.DOTALL)
HEADING = re.compile(r"^#{1,6}\s+(.+?)\s*#*$", re.MULTILINE)
LINK = re.compile(r"\]\(([^)\s]+)\)")


def _anchors(text: str) -> set[str]:
    """The fragments of a Markdown text's headings (code blocks left out), as GitHub makes them:
    lower case, spaces to hyphens, other punctuation dropped, a repeated heading numbered from
    -1."""
    seen: dict[str, int] = {}
    out = set()
    for heading in HEADING.findall(text):
        slug = re.sub(r"[^\w\- ]", "", heading.lower()).replace(" ", "-")
        n = seen.get(slug, -1) + 1
        seen[slug] = n
        out.add(slug if n == 0 else f"{slug}-{n}")
    return out


def test_every_relative_markdown_link_reaches_its_file_and_heading() -> None:
    texts = {p.resolve(): FENCE.sub("", p.read_text(encoding="utf-8"))
             for p in _tracked() if p.suffix == ".md" and p.is_file()}
    anchors = {p: _anchors(text) for p, text in texts.items()}
    broken = []
    for doc, text in texts.items():
        for link in LINK.findall(text):
            if re.match(r"[a-z][a-z0-9+.-]*:", link):  # http:, https:, mailto: ...
                continue
            target, _, fragment = link.partition("#")
            path = (doc.parent / target).resolve() if target else doc.resolve()
            where = f"{doc.relative_to(ROOT)}: {link}"
            if not path.exists():
                broken.append(f"{where} (no such file)")
            elif fragment and path in anchors and fragment not in anchors[path]:
                broken.append(f"{where} (no such heading)")
    assert broken == [], "\n".join(broken)
