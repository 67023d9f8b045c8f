"""docs/architecture.md names only what exists: every file and folder of its tree and every path
it quotes is in the repository, and every function, method or class it quotes is defined in the
service's Python or the native C and C++ sources. A rename that leaves the page behind fails here."""

from __future__ import annotations

import itertools
import re
from functools import cache
from pathlib import Path

ROOT = Path(__file__).parents[2]
PAGE = ROOT / "docs" / "architecture.md"
# Where a short path on the page is read from: the repository, the Python package, native/ and
# its parts, and tests/.
BASES = [ROOT, ROOT / "service" / "fenceline", ROOT / "native", ROOT / "native" / "importer",
         ROOT / "native" / "client" / "src", ROOT / "native" / "common", ROOT / "tests"]
OSES = ("posix", "win32")
PATHLIKE = re.compile(r"^[\w.<>{},*/-]+$")
NAME = re.compile(r"^[A-Za-z_]\w*(\.[A-Za-z_]\w*)*$")
SOURCES = ("*.py", "*.c", "*.h", "*.cpp")


def _expand(token: str) -> list[str]:
    """``trace.{h,cpp}`` -> both; ``platform/<os>/`` -> each OS's."""
    out = [token]
    for pattern, choices in ((r"\{([^}]*)\}", None), (r"<os>", OSES)):
        expanded = []
        for t in out:
            m = re.search(pattern, t)
            if m is None:
                expanded.append(t)
                continue
            options = m.group(1).split(",") if choices is None else choices
            expanded += [t[:m.start()] + o + t[m.end():] for o in options]
        out = expanded
    return out


def _exists(path: str, bases: list[Path]) -> bool:
    """Whether ``path`` is under one of ``bases``; a bare file name (``host_runs.cpp``) may be
    anywhere in the service's or the native sources."""
    for variant in _expand(path.rstrip("/")):
        if "/" not in variant and "." in variant and any(
                any((ROOT / top).rglob(variant)) for top in ("service", "native")):
            return True
        for base in bases:
            if "*" in variant:
                if any(base.glob(variant)):
                    return True
            elif (base / variant).exists():
                return True
    return False


def _tree() -> list[str]:
    """The full paths of the tree block's entries."""
    text = PAGE.read_text()
    block = text.split("## The tree", 1)[1].split("```", 2)[1]
    paths: list[str] = []
    stack: list[tuple[int, str]] = []
    for line in block.splitlines()[1:]:
        if not line.strip():
            continue
        indent = len(line) - len(line.lstrip())
        names = list(itertools.takewhile(lambda t: t.endswith(","), line.split()))
        names.append(line.split()[len(names)])
        names = [n.rstrip(",") for n in names]
        if not all(PATHLIKE.match(n) and (n.endswith("/") or "." in n) for n in names):
            continue  # a description's continuation line
        while stack and stack[-1][0] >= indent:
            stack.pop()
        prefix = "".join(d for _, d in stack)
        paths += [prefix + n for n in names]
        if len(names) == 1 and names[0].endswith("/"):
            stack.append((indent, names[0]))
    return paths


def _quoted() -> list[str]:
    text = PAGE.read_text()
    return re.findall(r"`([^`\n]+)`", text)


@cache
def _source_text() -> str:
    parts = []
    for base in (ROOT / "service", ROOT / "native"):
        for pattern in SOURCES:
            parts += [p.read_text(errors="replace") for p in base.rglob(pattern)]
    return "\n".join(parts)


def test_every_entry_of_the_tree_exists() -> None:
    tree = _tree()
    assert len(tree) > 50 and "native/importer/engine/" in tree  # the block was read
    missing = [p for p in tree if not _exists(p, [ROOT])]
    assert missing == []


def test_every_quoted_path_exists() -> None:
    paths = [q for q in _quoted() if PATHLIKE.match(q) and ("/" in q or re.search(
        r"\.(py|c|h|cpp|md|txt|toml)$|\.\{", q))]
    assert len(paths) > 30
    missing = [p for p in paths if not _exists(p.removeprefix("fenceline."), BASES)]
    assert missing == []


def test_every_quoted_function_and_class_is_defined() -> None:
    names = [q for q in _quoted() if NAME.match(q) and not re.search(r"\.(py|c|h|cpp|md)$", q)]
    # Each dotted part must be a word of the sources: `RunTable.serve_loop` needs both.
    words = {w for q in names for w in q.split(".") if "_" in w or any(c.isupper() for c in w)}
    assert {"run_one", "wait_late", "RunTable"} <= words  # the names were read
    text = _source_text()
    # A Prometheus counter is quoted as exposed, with its _total.
    missing = sorted(w for w in words
                     if not re.search(rf"\b{re.escape(w.removesuffix('_total'))}\b", text))
    assert missing == []


CELL_TEST = re.compile(r"`(tests/[\w/]+\.py)::(test_\w+)(?:\[([\w-]+)\])?`")


def _run_table() -> list[list[str]]:
    """The rows of "Who serves a run": transport, then one cell per session kind."""
    section = PAGE.read_text().split("## Who serves a run", 1)[1].split("\n## ", 1)[0]
    rows = [[c.strip() for c in line.strip().strip("|").split("|")]
            for line in section.splitlines() if line.startswith("|")]
    return [row for row in rows[2:] if row]  # past the header and its rule


def test_every_test_the_run_table_names_exists() -> None:
    rows = _run_table()
    assert [row[0] for row in rows] == ["Unix socket", "run page", "Windows pipe", "HTTP interop"]
    named = [m for row in rows for cell in row[1:] for m in CELL_TEST.findall(cell)]
    assert all(CELL_TEST.search(row[1]) for row in rows)  # every transport's host request cell
    assert len(named) >= 10
    for path, name, param in named:
        source = (ROOT / path).read_text()
        assert re.search(rf"^def {name}\(", source, re.M), f"{path} has no {name}"
        assert not param or f'"{param}"' in source, f"{path}::{name} is never run with {param}"


def _class_files(name: str) -> list[Path]:
    """The service's Python and native files that define class ``name``."""
    pattern = re.compile(rf"^\s*(class|struct)\s+{re.escape(name)}\b", re.M)
    return [p for base in (ROOT / "service", ROOT / "native") for glob in SOURCES
            for p in base.rglob(glob) if pattern.search(p.read_text(errors="replace"))]


def test_every_quoted_member_is_defined_where_its_class_is() -> None:
    """``HostSession.run_frames`` needs a run_frames in the file of class HostSession (a method,
    attribute or binding), not just the two words somewhere."""
    dotted = {q for q in _quoted() if NAME.match(q) and q.count(".") == 1
              and not re.search(r"\.(py|c|h|cpp|md)$", q) and q[0].isupper()}
    checked, missing = 0, []
    for q in sorted(dotted):
        cls, member = q.split(".")
        files = _class_files(cls)
        if not files:
            continue  # a module or a name the other test reads as words
        checked += 1
        if not any(re.search(rf"\b{re.escape(member)}\b", p.read_text(errors="replace"))
                   for p in files):
            missing.append(q)
    assert checked >= 10
    assert missing == []
