"""Triton's ``config.pbtxt``: the fields fenceline honours, and one warning naming the rest.

Honoured: ``name`` (must be the directory's), ``platform``/``backend`` (ONNX Runtime only),
``version_policy`` (which ``<version>/`` directories load), ``default_model_filename``,
``max_batch_size: 0``, and ``input``/``output`` (``name``, ``data_type``, ``dims``), which are
checked against the model file. Every other field, such as ``dynamic_batching``,
``instance_group``, ``input.reshape`` or a non-zero ``max_batch_size``, changes nothing in
fenceline; loading the model logs one warning naming them all.

The file is protobuf text format; a small reader here avoids needing Triton's generated
classes, which come only with tritonclient's gRPC extra.
"""

from __future__ import annotations

import logging
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal, NoReturn

from fenceline.errors import InvalidArgument

log = logging.getLogger("fenceline.runtime")

Message = dict[str, list[Any]]

_TOKEN = re.compile(
    r"""(?P<space>\s+|\#[^\n]*)
      | (?P<string>"(?:[^"\\\n]|\\.)*"|'(?:[^'\\\n]|\\.)*')
      | (?P<number>[-+]?(?:\d+\.?\d*(?:[eE][-+]?\d+)?|\.\d+(?:[eE][-+]?\d+)?)[fF]?)
      | (?P<word>[A-Za-z_][A-Za-z0-9_.]*)
      | (?P<symbol>[{}\[\]:,;<>])""",
    re.X,
)
_CLOSE = {"{": "}", "<": ">"}


class _Reader:
    def __init__(self, text: str, where: str) -> None:
        self.where = where
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

    def fail(self, what: str, line: int | None = None) -> NoReturn:
        if line is None:
            line = self.tokens[min(self.i, len(self.tokens) - 1)][2] if self.tokens else 1
        raise InvalidArgument(f"{self.where}:{line}: {what} (protobuf text format)")

    def peek(self) -> str | None:
        return self.tokens[self.i][1] if self.i < len(self.tokens) else None

    def take(self) -> tuple[str, str]:
        if self.i >= len(self.tokens):
            self.fail("unexpected end of file")
        kind, text, _ = self.tokens[self.i]
        self.i += 1
        return kind, text

    def message(self, close: str | None) -> Message:
        out: Message = {}
        while self.peek() != close:
            if self.peek() is None:
                self.fail(f"missing {close!r}")
            kind, name = self.take()
            if kind != "word":
                self.fail(f"expected a field name, not {name!r}")
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
        return out

    def value(self, colon: bool) -> Any:
        if self.peek() in _CLOSE:
            return self.message(_CLOSE[self.take()[1]])
        if not colon:
            self.fail(f"expected ':' or '{{' before {self.peek()!r}")
        kind, text = self.take()
        if kind == "string":
            return text[1:-1].encode().decode("unicode_escape")
        if kind == "number":
            number = text.rstrip("fF")
            return float(number) if any(c in number for c in ".eE") else int(number)
        if kind == "word":
            return {"true": True, "false": False}.get(text, text)
        self.fail(f"expected a value, not {text!r}")


def parse(text: str, where: str = "config.pbtxt") -> Message:
    """Protobuf text format as nested dicts: every field maps to the list of its values."""
    reader = _Reader(text, where)
    return reader.message(None)


@dataclass(frozen=True)
class VersionPolicy:
    """Triton's ``version_policy``; the default serves the newest version only."""

    kind: Literal["latest", "all", "specific"] = "latest"
    num_versions: int = 1
    versions: tuple[int, ...] = ()

    def select(self, available: list[int], where: str) -> list[int]:
        """The versions to load, oldest first, from the ones that have a model file."""
        have = sorted(available)
        if self.kind == "all":
            return have
        if self.kind == "latest":
            return have[-self.num_versions:]
        missing = sorted(set(self.versions) - set(have))
        if missing:
            raise InvalidArgument(
                f"{where}: version_policy asks for version(s) {missing}, which have no "
                f"model file; versions present: {have}"
            )
        return sorted(set(self.versions))


@dataclass(frozen=True)
class TensorConfig:
    name: str
    data_type: str  # a KServe name: TYPE_FP32 -> FP32
    dims: tuple[int, ...] | None


@dataclass(frozen=True)
class ModelConfig:
    version_policy: VersionPolicy = VersionPolicy()
    default_model_filename: str = "model.onnx"
    max_batch_size: int = 0  # >0: Triton's dims leave out the model's first (batch) dimension
    inputs: tuple[TensorConfig, ...] = ()
    outputs: tuple[TensorConfig, ...] = ()
    ignored: tuple[str, ...] = field(default=())  # fields read but not honoured

    @classmethod
    def load(cls, model_dir: Path) -> ModelConfig:
        """``model_dir/config.pbtxt``, or the defaults when there is none."""
        path = model_dir / "config.pbtxt"
        if not path.is_file():
            return cls()
        try:
            text = path.read_text()
        except (OSError, UnicodeDecodeError) as e:
            raise InvalidArgument(f"cannot read {path}: {e}") from None
        return cls.from_message(parse(text, str(path)), model_dir.name, str(path))

    @classmethod
    def from_message(cls, msg: Message, dir_name: str, where: str) -> ModelConfig:
        ignored: list[str] = []
        name = _one(msg, "name", where)
        if name is not None and name != dir_name:
            raise InvalidArgument(
                f"{where}: name is {name!r} but the directory is {dir_name!r}; Triton and "
                "fenceline name a model by its directory"
            )
        platform, backend = _one(msg, "platform", where), _one(msg, "backend", where)
        if platform not in (None, "onnxruntime_onnx") or backend not in (None, "onnxruntime"):
            raise InvalidArgument(
                f"{where}: fenceline runs ONNX models with ONNX Runtime only (platform "
                f"'onnxruntime_onnx', backend 'onnxruntime'), not {platform or backend!r}"
            )
        batch = _one(msg, "max_batch_size", where) or 0
        if batch != 0:
            ignored.append(f"max_batch_size: {batch}")
        inputs = tuple(_tensor(t, "input", where, ignored) for t in msg.get("input", []))
        outputs = tuple(_tensor(t, "output", where, ignored) for t in msg.get("output", []))
        honoured = {"name", "platform", "backend", "max_batch_size", "version_policy",
                    "default_model_filename", "input", "output"}  # fmt: skip
        ignored += sorted(set(msg) - honoured)
        filename = _one(msg, "default_model_filename", where) or "model.onnx"
        if "/" in filename or filename in (".", ".."):
            raise InvalidArgument(f"{where}: default_model_filename must be a file name")
        if not isinstance(batch, int) or batch < 0:
            raise InvalidArgument(f"{where}: max_batch_size is a count, 0 or more")
        return cls(_policy(msg, where), filename, batch, inputs, outputs, tuple(ignored))

    def check(self, model: str, inputs: dict[str, Any], outputs: dict[str, Any]) -> None:
        """The configured tensors against the model's specs (name -> runtime.models.TensorSpec),
        as Triton checks them: a tensor the model lacks, another datatype or other fixed dims
        is an error naming it."""
        for role, configured, specs in (("input", self.inputs, inputs), ("output", self.outputs, outputs)):
            for t in configured:
                spec = specs.get(t.name)
                if spec is None:
                    raise InvalidArgument(
                        f"model {model!r}: config.pbtxt names {role} {t.name!r}, which the model "
                        f"lacks; its {role}s are {sorted(specs)}"
                    )
                if t.data_type and t.data_type != spec.datatype.name:
                    raise InvalidArgument(
                        f"model {model!r}: config.pbtxt says {role} {t.name!r} is "
                        f"TYPE_{t.data_type}; the model has {spec.datatype.name}"
                    )
                shape = spec.shape[1:] if self.max_batch_size else spec.shape
                if t.dims is not None and (len(t.dims) != len(shape) or any(
                    -1 not in (a, b) and a != b for a, b in zip(t.dims, shape, strict=True)
                )):
                    batch = " after the batch dimension" if self.max_batch_size else ""
                    raise InvalidArgument(
                        f"model {model!r}: config.pbtxt gives {role} {t.name!r} dims "
                        f"{list(t.dims)}; the model has {shape}{batch} (-1: free)"
                    )

    def warn_ignored(self, model: str) -> None:
        if self.ignored:
            log.warning(
                "model %s: config.pbtxt field(s) fenceline does not honour, ignored: %s",
                model, ", ".join(self.ignored),
            )


def _one(msg: Message, key: str, where: str) -> Any:
    values = msg.get(key, [])
    if len(values) > 1:
        raise InvalidArgument(f"{where}: {key} is given {len(values)} times")
    return values[0] if values else None


def _tensor(msg: Any, role: str, where: str, ignored: list[str]) -> TensorConfig:
    if not isinstance(msg, dict):
        raise InvalidArgument(f"{where}: each {role} is a message {{ name: ... }}")
    name = _one(msg, "name", where)
    if not isinstance(name, str):
        raise InvalidArgument(f"{where}: an {role} without a name")
    data_type = _one(msg, "data_type", where)
    dt = str(data_type).removeprefix("TYPE_") if data_type is not None else ""
    dims = msg.get("dims")
    if dims is not None and not all(isinstance(d, int) for d in dims):
        raise InvalidArgument(f"{where}: {role} {name!r}: dims are integers")
    for key in sorted(set(msg) - {"name", "data_type", "dims"}):
        label = f"{role}.{key}"
        if label not in ignored:
            ignored.append(label)
    return TensorConfig(name, "BYTES" if dt == "STRING" else dt, tuple(dims) if dims is not None else None)


def _policy(msg: Message, where: str) -> VersionPolicy:
    policy = _one(msg, "version_policy", where)
    if policy is None:
        return VersionPolicy()
    if not isinstance(policy, dict) or len(policy) != 1:
        raise InvalidArgument(f"{where}: version_policy is one of latest {{ }}, all {{ }}, specific {{ }}")
    [(kind, bodies)] = policy.items()
    if len(bodies) != 1:
        raise InvalidArgument(f"{where}: version_policy {kind} is given {len(bodies)} times")
    body = bodies[0]
    if kind == "all":
        return VersionPolicy("all")
    if kind == "latest":
        n = _one(body, "num_versions", where) if isinstance(body, dict) else None
        if not isinstance(n, int) or n < 1:
            raise InvalidArgument(f"{where}: version_policy latest needs num_versions of 1 or more")
        return VersionPolicy("latest", num_versions=n)
    if kind == "specific":
        versions = body.get("versions", []) if isinstance(body, dict) else []
        if not versions or not all(isinstance(v, int) and v >= 0 for v in versions):
            raise InvalidArgument(f"{where}: version_policy specific needs versions: [1, ...]")
        return VersionPolicy("specific", versions=tuple(versions))
    raise InvalidArgument(
        f"{where}: version_policy {kind!r} is not one of latest, all, specific"
    )
