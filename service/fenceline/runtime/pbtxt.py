"""A bounded, strict reader of protobuf text format (Triton's ``config.pbtxt``).

Every input is either a message or one :class:`ParseError` naming a line: the file is at most
:data:`MAX_BYTES` and UTF-8, messages nest at most :data:`MAX_DEPTH` deep, an integer fits in
64 bits (a number token is at most :data:`MAX_NUMBER_CHARS` long), a string is at most
:data:`MAX_STRING_BYTES` once its escapes are read, uses only protobuf's escapes and is UTF-8.
Nothing here recurses without a bound, converts an unbounded number or keeps more than the
file's size in tokens.

This module imports nothing of fenceline, so the service can run it as a script in a child
process (``python -I -S pbtxt.py FILE``: the message as JSON on stdout): a config is read there,
at low priority and under time and memory limits (runtime/model_config.py), and never holds the
service's GIL while renderers run.
"""

from __future__ import annotations

import json
import re
import sys
from typing import Any, NoReturn

MAX_BYTES = 256 << 10  # Triton's configs are a few KB; a larger one is refused unread
MAX_DEPTH = 32  # Triton's deepest message (optimization.cuda.graph_spec...) nests 6
MAX_NUMBER_CHARS = 32  # -9223372036854775808 is 20; a float with an exponent fits too
MAX_STRING_BYTES = 64 << 10
INT_MIN, INT_MAX = -(1 << 63), (1 << 64) - 1  # int64 and uint64 fields
# The child process's own limits: a 256 KiB config of 3,900 entries takes ~0.3 s of CPU and
# ~60 MB; the service's wall-clock limit (model_config.READ_TIMEOUT_S) comes on top.
CHILD_CPU_S = 20
# Below the renderers, not starved by them: at nice 19 a 2-core machine with a renderer and
# other work on both cores gave the 1 MiB config tried first under 1/60 of a CPU (over 30 s);
# nice 10 weighs a tenth of a normal thread.
CHILD_NICE = 10
CHILD_MEMORY = 1 << 30


class ParseError(Exception):
    """``line``: where the input goes wrong (1-based); ``what``: one line saying how."""

    def __init__(self, line: int, what: str) -> None:
        super().__init__(f"{line}: {what}")
        self.line = line
        self.what = what


class Message(dict[str, list[Any]]):
    """A message: every field maps to the list of its values; ``lines`` has the line where each
    field first appears."""

    def __init__(self) -> None:
        super().__init__()
        self.lines: dict[str, int] = {}


_TOKEN = re.compile(
    r"""(?P<space>\s+|\#[^\n]*)
      | (?P<string>"(?:[^"\\\n]|\\.)*"|'(?:[^'\\\n]|\\.)*')
      | (?P<number>[-+]?(?:\d+\.?\d*(?:[eE][-+]?\d+)?|\.\d+(?:[eE][-+]?\d+)?)[fF]?)
      | (?P<word>[A-Za-z_][A-Za-z0-9_.]*)
      | (?P<symbol>[{}\[\]:,;<>])""",
    re.X,
)
_CLOSE = {"{": "}", "<": ">"}
# Protobuf's escapes (text_format's CEscape/CUnescape): simple, octal, hex, Unicode.
_ESCAPE = re.compile(r"\\(?:([abfnrtv\\'\"?])|([0-7]{1,3})|x([0-9A-Fa-f]{1,2})|"
                     r"u([0-9A-Fa-f]{4})|U([0-9A-Fa-f]{8})|(.?))", re.S)
_SIMPLE = {"a": b"\a", "b": b"\b", "f": b"\f", "n": b"\n", "r": b"\r", "t": b"\t", "v": b"\v",
           "\\": b"\\", "'": b"'", '"': b'"', "?": b"?"}


def decode(data: bytes) -> str:
    """``data`` as UTF-8 text of at most MAX_BYTES; ParseError at the line of a bad byte."""
    if len(data) > MAX_BYTES:
        raise ParseError(1, f"the file is {len(data)} bytes; a config is at most {MAX_BYTES}")
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as e:
        raise ParseError(data.count(b"\n", 0, e.start) + 1,
                         f"byte 0x{data[e.start]:02x} is not UTF-8 text") from None


def unescape(body: str, line: int) -> str:
    """A string literal's body (without its quotes) with protobuf's escapes read."""
    if "\\" not in body:
        if len(body) > MAX_STRING_BYTES:  # at least as many bytes as characters
            raise ParseError(line, f"a string is at most {MAX_STRING_BYTES} bytes")
        return body
    out = bytearray()
    pos = 0
    for m in _ESCAPE.finditer(body):
        out += body[pos:m.start()].encode("utf-8", "surrogatepass")
        simple, octal, hexa, u4, u8, bad = m.groups()
        if simple is not None:
            out += _SIMPLE[simple]
        elif octal is not None:
            value = int(octal, 8)
            if value > 0xFF:
                raise ParseError(line, f"escape \\{octal} is more than a byte")
            out.append(value)
        elif hexa is not None:
            out.append(int(hexa, 16))
        elif (u4 or u8) is not None:
            code = int(u4 or u8, 16)
            if code > 0x10FFFF or 0xD800 <= code <= 0xDFFF:
                raise ParseError(line, f"escape \\{'u' if u4 else 'U'}{u4 or u8} is not a "
                                 "Unicode character")
            out += chr(code).encode("utf-8")
        else:
            shown = "\\" + (bad or "")
            raise ParseError(line, f"bad escape {shown!r} in a string (protobuf's escapes: "
                             "\\n \\t \\\\ \\\" \\' \\xHH \\ooo \\uHHHH ...)")
        pos = m.end()
        if len(out) > MAX_STRING_BYTES:
            break
    out += body[pos:].encode("utf-8", "surrogatepass")
    if len(out) > MAX_STRING_BYTES:
        raise ParseError(line, f"a string is at most {MAX_STRING_BYTES} bytes")
    try:
        return out.decode("utf-8")
    except UnicodeDecodeError:
        raise ParseError(line, "a string's escapes make bytes that are not UTF-8 text") from None


def number(text: str, line: int) -> int | float:
    if len(text) > MAX_NUMBER_CHARS:
        raise ParseError(line, f"a number of {len(text)} characters; at most "
                         f"{MAX_NUMBER_CHARS}")
    body = text.rstrip("fF")
    if any(c in body for c in ".eE") or body != text:
        return float(body)
    value = int(body)
    if not INT_MIN <= value <= INT_MAX:
        raise ParseError(line, f"integer {body} does not fit in 64 bits")
    return value


class _Reader:
    def __init__(self, text: str) -> None:
        self.tokens: list[tuple[str, str, int]] = []  # kind, text, line
        pos, line = 0, 1
        while pos < len(text):
            m = _TOKEN.match(text, pos)
            if m is None:
                self.fail(f"unexpected {text[pos]!r}", line)
            kind = m.lastgroup or ""
            if kind != "space":
                self.tokens.append((kind, m.group(), line))
            line += m.group().count("\n")
            pos = m.end()
        self.i = 0
        self.depth = 0

    def fail(self, what: str, line: int | None = None) -> NoReturn:
        if line is None:
            line = self.tokens[min(self.i, len(self.tokens) - 1)][2] if self.tokens else 1
        raise ParseError(line, what)

    def peek(self) -> str | None:
        return self.tokens[self.i][1] if self.i < len(self.tokens) else None

    def take(self) -> tuple[str, str, int]:
        if self.i >= len(self.tokens):
            self.fail("unexpected end of file")
        token = self.tokens[self.i]
        self.i += 1
        return token

    def message(self, close: str | None, line: int = 1) -> Message:
        """The fields up to ``close``; ``line``: where the message opens."""
        self.depth += 1
        if self.depth > MAX_DEPTH:
            self.fail(f"messages nest more than {MAX_DEPTH} deep", line)
        out = Message()
        while self.peek() != close:
            if self.peek() is None:
                self.fail(f"missing {close!r}")
            kind, name, line = self.take()
            if kind != "word":
                self.fail(f"expected a field name, not {name[:40]!r}", line)
            out.lines.setdefault(name, line)
            colon = self.peek() == ":"
            if colon:
                self.take()
            if self.peek() == "[":
                self.take()
                values = []
                while self.peek() != "]":
                    values.append(self.value(colon))
                    if self.peek() == ",":
                        self.take()
                self.take()
                out.setdefault(name, []).extend(values)
            else:
                out.setdefault(name, []).append(self.value(colon))
            if self.peek() in (",", ";"):
                self.take()
        if close is not None:
            self.take()
        self.depth -= 1
        return out

    def value(self, colon: bool) -> Any:
        if self.peek() in _CLOSE:
            _, text, line = self.take()
            return self.message(_CLOSE[text], line)
        if not colon:
            self.fail(f"expected ':' or '{{' before {(self.peek() or '')[:40]!r}")
        kind, text, line = self.take()
        if kind == "string":
            return unescape(text[1:-1], line)
        if kind == "number":
            return number(text, line)
        if kind == "word":
            return {"true": True, "false": False}.get(text, text)
        self.fail(f"expected a value, not {text[:40]!r}", line)


def parse(text: str) -> Message:
    """Protobuf text format as nested dicts: every field maps to the list of its values."""
    if len(text) > MAX_BYTES:
        raise ParseError(1, f"the text is {len(text)} characters; a config is at most {MAX_BYTES}")
    return _Reader(text).message(None)


def to_json(msg: Message) -> Any:
    """A message as JSON: ``{"f": {field: [value, ...]}, "l": {field: line}}``, nested alike."""
    return {"f": {k: [to_json(v) if isinstance(v, Message) else v for v in vs]
                  for k, vs in msg.items()}, "l": msg.lines}


def from_json(doc: Any) -> Message:
    """:func:`to_json`'s inverse (the JSON comes from this module's own child process)."""
    out = Message()
    for k, vs in doc["f"].items():
        out[k] = [from_json(v) if isinstance(v, dict) else v for v in vs]
    out.lines = {k: int(v) for k, v in doc["l"].items()}
    return out


def _confine() -> None:
    """The child's limits: nice CHILD_NICE, CHILD_CPU_S of CPU time, CHILD_MEMORY of address
    space (where the platform has them)."""
    try:
        import os
        import resource

        os.nice(CHILD_NICE)
        resource.setrlimit(resource.RLIMIT_CPU, (CHILD_CPU_S, CHILD_CPU_S + 1))
        resource.setrlimit(resource.RLIMIT_AS, (CHILD_MEMORY, CHILD_MEMORY))
    except (ImportError, OSError, ValueError):
        pass


def _child(path: str) -> int:
    """The child process's work: the file's message on stdout, or its error."""
    _confine()
    try:
        with open(path, "rb") as f:
            data = f.read(MAX_BYTES + 1)
        doc: dict[str, Any] = {"message": to_json(parse(decode(data)))}
    except ParseError as e:
        doc = {"line": e.line, "error": e.what}
    except OSError as e:
        doc = {"line": 0, "error": f"cannot read it: {e.strerror}"}
    except MemoryError:
        doc = {"line": 0, "error": "reading it takes more memory than a config may"}
    json.dump(doc, sys.stdout)
    return 0


if __name__ == "__main__":
    sys.exit(_child(sys.argv[1]))
