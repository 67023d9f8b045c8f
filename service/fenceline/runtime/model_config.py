"""Triton's ``config.pbtxt``: the fields fenceline honours, one warning naming the rest of
Triton's fields, and a refusal for anything that is not one of Triton's fields.

Honoured: ``name`` (must be the directory's), ``platform``/``backend`` (ONNX Runtime only),
``version_policy`` (which ``<version>/`` directories load), ``default_model_filename``,
``max_batch_size: 0``, and ``input``/``output`` (``name``, ``data_type``, ``dims``), which are
checked against the model file. Every other field of Triton's ``ModelConfig``, such as
``dynamic_batching``, ``instance_group``, ``input.reshape`` or a non-zero ``max_batch_size``,
changes nothing in fenceline; loading the model logs one warning naming them all. A field that
is not Triton's (a typo such as ``foo_bar: 3`` or ``max_batch: 8``) or a value of the wrong
kind refuses the model, as Triton refuses it, with one line naming the file, the line and the
field: a typo must not silently do nothing.

The file is protobuf text format, read by runtime/pbtxt.py (bounded: size, depth, numbers,
strings, escapes; every mistake one line naming the file and line) in a child process, which
avoids needing Triton's generated classes (they come only with tritonclient's gRPC extra) and
keeps a hostile file's cost off the service's GIL. A load request may instead send the
whole config as JSON (``load_model(name, config=...)``): protobuf's JSON form of the same
message, read by :meth:`ModelConfig.from_json` into the same checks; Triton refuses one that
does not parse (``Invalid config override: ...``), and so does fenceline (400).
"""

from __future__ import annotations

import json
import logging
import re
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from fenceline.errors import InvalidArgument
from fenceline.runtime import pbtxt
from fenceline.runtime.pbtxt import Message

log = logging.getLogger("fenceline.runtime")

# Triton's --model-control-mode (runtime/model_control.py).
ControlMode = Literal["none", "explicit", "poll"]
CONTROL_MODES: tuple[ControlMode, ...] = ("none", "explicit", "poll")
# A config's reader (a child process at nice 10) ends past this: a few KB take ~30 ms with its
# start; 1 MiB took 4.6 s on a 2-core machine at load 17, the largest allowed is a quarter.
READ_TIMEOUT_S = 30.0


# The fields of Triton's ModelConfig, ModelInput and ModelOutput messages (model_config.proto);
# anything else is not a Triton config and is refused.
TRITON_FIELDS = frozenset({
    "name", "platform", "backend", "runtime", "version_policy", "max_batch_size", "input",
    "output", "batch_input", "batch_output", "optimization", "dynamic_batching",
    "sequence_batching", "ensemble_scheduling", "instance_group", "default_model_filename",
    "cc_model_filenames", "metric_tags", "parameters", "model_warmup", "model_operations",
    "model_transaction_policy", "model_repository_agents", "response_cache", "model_metrics",
})
TENSOR_FIELDS = {
    "input": frozenset({"name", "data_type", "format", "dims", "reshape", "is_shape_tensor",
                        "allow_ragged_batch", "optional", "is_non_linear_format_io"}),
    "output": frozenset({"name", "data_type", "dims", "reshape", "label_filename",
                         "is_shape_tensor", "is_non_linear_format_io"}),
}
DATA_TYPES = frozenset({
    "BOOL", "UINT8", "UINT16", "UINT32", "UINT64", "INT8", "INT16", "INT32", "INT64", "FP16",
    "FP32", "FP64", "STRING", "BF16",
})

def parse(text: str, where: str = "config.pbtxt") -> Message:
    """Protobuf text format as nested dicts (runtime/pbtxt.py), in this process; a mistake is
    InvalidArgument naming ``where`` and the line."""
    try:
        return pbtxt.parse(text)
    except pbtxt.ParseError as e:
        raise _refusal(where, e.line, e.what) from None


def read(path: Path) -> Message:
    """``path`` read by :mod:`fenceline.runtime.pbtxt` in a child process at low priority, with
    at most READ_TIMEOUT_S and the child's own memory limit: a hostile or huge config costs the
    service neither its GIL nor its memory. A file over pbtxt.MAX_BYTES is refused unread."""
    try:
        size = path.stat().st_size
    except OSError as e:
        raise InvalidArgument(f"cannot read {path}: {e.strerror}") from None
    if size > pbtxt.MAX_BYTES:
        raise _refusal(str(path), 1, f"the file is {size} bytes; a config is at most "
                       f"{pbtxt.MAX_BYTES}")
    try:
        done = subprocess.run(
            [sys.executable, "-I", "-S", pbtxt.__file__, str(path)], stdin=subprocess.DEVNULL,
            capture_output=True, timeout=READ_TIMEOUT_S, check=False,
        )
    except subprocess.TimeoutExpired:
        raise InvalidArgument(f"{path}: reading it took more than {READ_TIMEOUT_S:g} s; "
                              "a config is a few KB of text") from None
    except OSError as e:
        raise InvalidArgument(f"{path}: cannot start its reader: {e.strerror}") from None
    try:
        doc = json.loads(done.stdout)
    except ValueError:
        doc = {"line": 0, "error": f"its reader ended with status {done.returncode} (over its "
               "time or memory limit)"}
    if "error" in doc:
        raise _refusal(str(path), int(doc["line"]) or 1, str(doc["error"]))
    return pbtxt.from_json(doc["message"])


def _refusal(where: str, line: int, what: str) -> InvalidArgument:
    return InvalidArgument(f"{where}:{line}: {what} (protobuf text format)")


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
        return cls.from_message(read(path), model_dir.name, str(path))

    @classmethod
    def from_json(cls, text: str, dir_name: str) -> ModelConfig:
        """A load request's config override: the JSON form of Triton's ModelConfig (protobuf's:
        field names as in config.pbtxt or in lowerCamelCase, 64-bit integers as numbers or
        strings, enum names in any case). It replaces the directory's config.pbtxt for this
        load; the model files and config.json still come from the directory. Anything that
        does not parse, or that config.pbtxt would be refused for, is refused with Triton's
        words for both: ``failed to load 'm': Invalid config override: ...``."""
        refused = f"failed to load '{dir_name}': Invalid config override:"
        try:
            obj = json.loads(text)
        except (ValueError, RecursionError) as e:
            raise InvalidArgument(f"{refused} not JSON: {e}") from None
        if not isinstance(obj, dict):
            raise InvalidArgument(f"{refused} the config is a JSON object")
        try:
            return cls.from_message(_from_json(obj), dir_name, "the config override")
        except InvalidArgument as e:
            raise InvalidArgument(f"{refused} {e.message}") from None

    @classmethod
    def from_message(cls, msg: Message, dir_name: str, where: str) -> ModelConfig:
        _check_fields(msg, TRITON_FIELDS, "", where)
        ignored: list[str] = []
        name = _one(msg, "name", where, str)
        if name is not None and name != dir_name:
            raise InvalidArgument(
                f"{_at(msg, 'name', where)}: name is {_show(name)} but the directory is "
                f"{dir_name!r}; Triton and fenceline name a model by its directory"
            )
        platform, backend = _one(msg, "platform", where, str), _one(msg, "backend", where, str)
        if platform not in (None, "onnxruntime_onnx") or backend not in (None, "onnxruntime"):
            key = "platform" if platform not in (None, "onnxruntime_onnx") else "backend"
            raise InvalidArgument(
                f"{_at(msg, key, where)}: fenceline runs ONNX models with ONNX Runtime only "
                f"(platform 'onnxruntime_onnx', backend 'onnxruntime'), not {platform or backend!r}"
            )
        batch = _one(msg, "max_batch_size", where, int) or 0
        if batch < 0:
            raise InvalidArgument(
                f"{_at(msg, 'max_batch_size', where)}: field 'max_batch_size' is a count, 0 or more"
            )
        if batch != 0:
            ignored.append(f"max_batch_size: {batch}")
        inputs = tuple(_tensor(t, "input", where, ignored, msg) for t in msg.get("input", []))
        outputs = tuple(_tensor(t, "output", where, ignored, msg) for t in msg.get("output", []))
        honoured = {"name", "platform", "backend", "max_batch_size", "version_policy",
                    "default_model_filename", "input", "output"}  # fmt: skip
        ignored += sorted(set(msg) - honoured)
        filename = _one(msg, "default_model_filename", where, str) or "model.onnx"
        if "/" in filename or filename in (".", ".."):
            raise InvalidArgument(
                f"{_at(msg, 'default_model_filename', where)}: field 'default_model_filename' "
                "must be a file name"
            )
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


def _at(msg: Message, key: str, where: str) -> str:
    """``FILE:LINE`` of ``key`` in ``msg`` (its first line), for an error naming it; ``where``
    alone for a message without lines (a JSON config override)."""
    if not isinstance(msg, Message) or not msg.lines:
        return where
    return f"{where}:{msg.lines.get(key, 1)}"


# The 64-bit integer fields fenceline reads, which protobuf's JSON may give as strings.
_INTEGERS = frozenset({"dims", "max_batch_size", "num_versions", "versions"})


def _snake(key: str) -> str:
    """A protobuf JSON field name as the field's own name: ``maxBatchSize`` -> ``max_batch_size``."""
    return re.sub(r"(?<=[a-z0-9])([A-Z])", lambda m: "_" + m.group(1).lower(), key)


def _from_json(obj: dict[str, Any]) -> Message:
    """A JSON object as the Message that the same config in text format reads as."""
    out = Message()
    for key, value in obj.items():
        name = _snake(key)
        values = value if isinstance(value, list) else [value]
        out.setdefault(name, []).extend(_json_value(name, v) for v in values)
    return out


def _json_value(name: str, value: Any) -> Any:
    if isinstance(value, dict):
        return _from_json(value)
    # At most 20 digits, as 64 bits hold (pbtxt.MAX_NUMBER_CHARS bounds the text form).
    if isinstance(value, str) and name in _INTEGERS and re.fullmatch(r"-?\d{1,20}", value):
        return int(value)
    if isinstance(value, str) and name == "data_type":
        return value.upper()  # protobuf's JSON reads enum names in any case, as Triton parses
    return value


def _check_fields(msg: Message, known: frozenset[str], prefix: str, where: str) -> None:
    """Refuses the first field (by line) that Triton's message does not have."""
    unknown = sorted(set(msg) - known, key=lambda k: msg.lines.get(k, 0))
    if unknown:
        key = unknown[0]
        message = "ModelConfig" if not prefix else f"Model{prefix.title()}"
        raise InvalidArgument(
            f"{_at(msg, key, where)}: unknown field '{prefix}{'.' if prefix else ''}{key}': not "
            f"a field of Triton's {message}; fix or remove it (the model is not loaded)"
        )


_KINDS: dict[type, str] = {str: "a string", int: "an integer", dict: "a message { ... }"}


def _show(value: Any) -> str:
    """A value for an error line: its repr, cut to 80 characters."""
    text = repr(value)
    return text if len(text) <= 80 else f"{text[:60]}... ({len(text)} characters)"


def _one(msg: Message, key: str, where: str, kind: type | None = None) -> Any:
    values = msg.get(key, [])
    if len(values) > 1:
        raise InvalidArgument(f"{_at(msg, key, where)}: field {key!r} is given {len(values)} times")
    value = values[0] if values else None
    if value is not None and kind is not None and (
        not isinstance(value, kind) or (kind is int and isinstance(value, bool))
    ):
        raise InvalidArgument(
            f"{_at(msg, key, where)}: field {key!r} is {_KINDS[kind]}, not {_show(value)}"
        )
    return value


def _tensor(msg: Any, role: str, where: str, ignored: list[str], parent: Message) -> TensorConfig:
    if not isinstance(msg, Message):
        raise InvalidArgument(
            f"{_at(parent, role, where)}: field {role!r}: each {role} is a message {{ name: ... }}"
        )
    _check_fields(msg, TENSOR_FIELDS[role], role, where)
    name = _one(msg, "name", where, str)
    if name is None:
        raise InvalidArgument(f"{_at(parent, role, where)}: field {role!r}: an {role} without a name")
    data_type = _one(msg, "data_type", where)
    dt = ""
    if data_type is not None:
        dt = str(data_type).removeprefix("TYPE_")
        if not isinstance(data_type, str) or not data_type.startswith("TYPE_") or dt not in DATA_TYPES:
            raise InvalidArgument(
                f"{_at(msg, 'data_type', where)}: field '{role}.data_type' of {_show(name)} is "
                f"{_show(data_type)}, not one of Triton's TYPE_FP32, TYPE_UINT8, ..."
            )
    dims = msg.get("dims")
    if dims is not None and not all(isinstance(d, int) and not isinstance(d, bool) for d in dims):
        raise InvalidArgument(
            f"{_at(msg, 'dims', where)}: field '{role}.dims' of {name!r}: dims are integers"
        )
    for key in sorted(set(msg) - {"name", "data_type", "dims"}):
        label = f"{role}.{key}"
        if label not in ignored:
            ignored.append(label)
    return TensorConfig(name, "BYTES" if dt == "STRING" else dt, tuple(dims) if dims is not None else None)


def _policy(msg: Message, where: str) -> VersionPolicy:
    policy = _one(msg, "version_policy", where)
    if policy is None:
        return VersionPolicy()
    at = _at(msg, "version_policy", where)
    if not isinstance(policy, dict) or len(policy) != 1:
        raise InvalidArgument(
            f"{at}: field 'version_policy' is one of latest {{ }}, all {{ }}, specific {{ }}"
        )
    [(kind, bodies)] = policy.items()
    if len(bodies) != 1:
        raise InvalidArgument(f"{at}: field 'version_policy.{kind}' is given {len(bodies)} times")
    body = bodies[0]
    if kind == "all":
        return VersionPolicy("all")
    if kind == "latest":
        n = _one(body, "num_versions", where) if isinstance(body, Message) else None
        if not isinstance(n, int) or isinstance(n, bool) or n < 1:
            raise InvalidArgument(
                f"{at}: field 'version_policy.latest' needs num_versions of 1 or more"
            )
        return VersionPolicy("latest", num_versions=n)
    if kind == "specific":
        versions = body.get("versions", []) if isinstance(body, dict) else []
        if not versions or not all(isinstance(v, int) and v >= 0 for v in versions):
            raise InvalidArgument(
                f"{at}: field 'version_policy.specific' needs versions: [1, ...]"
            )
        return VersionPolicy("specific", versions=tuple(versions))
    raise InvalidArgument(
        f"{at}: field 'version_policy.{kind}' is not one of latest, all, specific"
    )
