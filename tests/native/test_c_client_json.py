"""The C client's own JSON writer and reader (native/client/src/json.c) against Python's json:
property tests for what the client writes, checks, reads field by field and reads as a tree, and
a fuzz test of the reader."""

from __future__ import annotations

import json
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from fenceline.client.c_api import find_c_compiler

ROOT = Path(__file__).resolve().parents[2]
CLIENT = ROOT / "native" / "client"
CC = find_c_compiler()
pytestmark = pytest.mark.skipif(CC is None, reason="no C compiler to build the JSON driver")

OUT_SIZE = 4096  # the driver's output buffer


class Driver:
    def __init__(self, exe: Path) -> None:
        self.proc = subprocess.Popen([str(exe)], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                     text=True)

    def ask(self, *parts: str | bytes) -> str:
        assert self.proc.stdin is not None and self.proc.stdout is not None
        cmd, *args = parts
        hexed = [(a.encode() if isinstance(a, str) else a).hex() for a in args]
        self.proc.stdin.write(" ".join([str(cmd), *hexed]) + "\n")
        self.proc.stdin.flush()
        answer = self.proc.stdout.readline()
        assert answer, f"the JSON driver died (exit {self.proc.poll()})"
        return answer.strip()

    def get_string(self, key: str, doc: bytes) -> str | None:
        r = self.ask("G", key, doc)
        return None if r == "-" else bytes.fromhex(r).decode()

    def tree(self, doc: bytes) -> Any:
        """What fl_json_parse read, as Python values; "-" when it refused the text."""
        r = self.ask("T", doc)
        return r if r == "-" else json.loads(bytes.fromhex(r).decode())

    def close(self) -> None:
        assert self.proc.stdin is not None and self.proc.stdout is not None
        self.proc.stdin.close()
        self.proc.wait(10)
        self.proc.stdout.close()


@pytest.fixture(scope="module")
def driver(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Driver]:
    assert CC is not None
    exe = tmp_path_factory.mktemp("json") / "json_driver"
    cmd = [CC, "-std=c11", "-Wall", "-Wextra", "-Werror", "-O1", "-fsanitize=undefined",
           f"-I{CLIENT / 'include'}", f"-I{CLIENT / 'src'}", f"-I{ROOT / 'native' / 'common'}", str(CLIENT / "tests" / "json_driver.c"),
           str(CLIENT / "src" / "json.c"), "-o", str(exe)]
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=120)
    if r.returncode != 0 and "sanitize" in r.stderr:
        r = subprocess.run([c for c in cmd if "sanitize" not in c], capture_output=True,
                           text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    d = Driver(exe)
    yield d
    d.close()


# Text the client can carry: C strings hold no NUL, UTF-8 holds no lone surrogates.
text = st.text(st.characters(blacklist_categories=("Cs",), blacklist_characters="\x00"),
               max_size=40)
json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False, allow_infinity=False)
    | text,
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(text, inner, max_size=4),
    max_leaves=12,
)
# What the tree holds: no fractions or exponents, integers that fit int64_t.
tree_values = st.recursive(
    st.none() | st.booleans() | st.integers(-(2**63), 2**63 - 1) | text,
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(text, inner, max_size=4),
    max_leaves=12,
)


@settings(max_examples=150, deadline=None)
@given(s=text)
def test_writer_output_is_json_that_round_trips(driver: Driver, s: str) -> None:
    written = bytes.fromhex(driver.ask("W", s)).decode()
    assert json.loads(written) == {s: s, "u": 2**64 - 1, "i": -(2**63), "a": [[], {}]}


@settings(max_examples=150, deadline=None)
@given(doc=st.dictionaries(text, json_values, max_size=6), key=text, value=text,
       ascii_only=st.booleans(), place=st.integers(0, 6))
def test_reader_finds_a_top_level_string_anywhere(
    driver: Driver, doc: dict[str, Any], key: str, value: str, ascii_only: bool, place: int
) -> None:
    items = [(k, v) for k, v in doc.items() if k != key]
    items.insert(min(place, len(items)), (key, value))
    encoded = json.dumps(dict(items), ensure_ascii=ascii_only).encode()
    fits = len(key.encode()) < 64 and len(value.encode()) < OUT_SIZE
    assert driver.get_string(key, encoded) == (value if fits else None)


@settings(max_examples=100, deadline=None)
@given(doc=st.dictionaries(text, json_values, max_size=6), key=text)
def test_reader_ignores_nested_and_non_string_fields(
    driver: Driver, doc: dict[str, Any], key: str
) -> None:
    wrapped = {k: v for k, v in doc.items() if k != key}
    wrapped["nested"] = {key: "deep"}
    if key != "nested":
        wrapped[key] = 7
    assert driver.get_string(key, json.dumps(wrapped).encode()) is None


@settings(max_examples=100, deadline=None)
@given(value=json_values)
def test_validator_accepts_what_python_writes(driver: Driver, value: Any) -> None:
    assert driver.ask("V", json.dumps(value)) == "1"


@settings(max_examples=150, deadline=None)
@given(value=tree_values, ascii_only=st.booleans())
def test_tree_holds_what_python_writes(driver: Driver, value: Any, ascii_only: bool) -> None:
    assert driver.tree(json.dumps(value, ensure_ascii=ascii_only).encode()) == value


@settings(max_examples=300, deadline=None)
@given(data=st.binary(max_size=200) | st.text(alphabet='{}[]":,\\ u0123456789abcdefnrtl-+.eE',
                                               max_size=80).map(str.encode))
def test_reader_survives_arbitrary_bytes(driver: Driver, data: bytes) -> None:
    valid = driver.ask("V", data)
    assert valid in ("0", "1")
    if valid == "1":
        try:
            decoded = data.decode()
        except UnicodeDecodeError:  # the C reader passes bytes through; the service sends ASCII
            decoded = None
        if decoded is not None:
            json.loads(decoded)  # whatever the C side accepts, Python parses too
    driver.get_string("id", data)  # must answer, not crash
    tree = driver.tree(data)
    if tree != "-":
        assert valid == "1"  # the tree reads a subset of what the checker accepts
        if decoded is not None and "\\u0000" not in decoded:  # C strings end at a NUL
            assert tree == json.loads(decoded)


@pytest.mark.parametrize("doc", [b"", b"{", b'{"id"', b'{"id":', b'{"id":"x', b'{"id":"\\u12',
                                 b'{"id":"\\ud800"}', b"[" * 100 + b"]" * 100,
                                 b'{"a":1 "id":"x"}', b'{"id":"\x01"}'])
def test_reader_rejects_malformed_replies(driver: Driver, doc: bytes) -> None:
    assert driver.get_string("id", doc) is None
    assert driver.ask("V", doc) == "0"
    assert driver.ask("T", doc) == "-"


@pytest.mark.parametrize("doc", [b"1.5", b"[1e3]", b'{"a":-0.0}', b"9223372036854775808",
                                 b"-9223372036854775809", b"01", b"[-01]"])
def test_tree_refuses_numbers_that_are_not_int64_integers(driver: Driver, doc: bytes) -> None:
    assert driver.tree(doc) == "-"


def test_tree_reads_the_int64_extremes(driver: Driver) -> None:
    assert driver.tree(b"[9223372036854775807,-9223372036854775808,-0]") == [2**63 - 1, -(2**63), 0]


@pytest.mark.parametrize(("cmd", "limit"), [("V", 64), ("T", 33)])
@pytest.mark.parametrize("opener", [b"[", b'{"a":'])
def test_containers_nest_up_to_the_limit(driver: Driver, cmd: str, limit: int,
                                         opener: bytes) -> None:
    closer = b"]" if opener == b"[" else b"}"

    def accepted(depth: int) -> bool:
        return driver.ask(cmd, opener * depth + b"1" + closer * depth) not in ("0", "-")

    assert accepted(limit)
    assert not accepted(limit + 1)


@pytest.mark.parametrize("doc", [b'{"id":"a"', b'{"id":"a"} x', b'{"id":"a",}', b"{} {}"])
def test_validator_rejects_what_follows_a_match(driver: Driver, doc: bytes) -> None:
    # The reader stops at the field it wants; the client validates whole replies first.
    assert driver.ask("V", doc) == "0"
