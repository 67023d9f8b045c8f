"""The model repository: Triton's layout ``DIR/<name>/<version>/model.onnx`` plus explicit
``NAME=PATH`` models, each version loaded once into an onnxruntime session.

A model directory may hold Triton's ``config.pbtxt`` (runtime.model_config: which versions
load, checked tensors, a warning naming what is not honoured) and fenceline's ``config.json``
with per-model settings::

    {"execution_provider": "cpu", "intra_op_threads": 0}
"""

from __future__ import annotations

import json
import logging
import threading
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

import onnxruntime as ort

from fenceline.errors import InvalidArgument, NotFound, Unsupported
from fenceline.interop.datatypes import Datatype, from_ort
from fenceline.runtime.model_config import ModelConfig

log = logging.getLogger("fenceline.runtime")

ExecutionProvider = Literal["cpu", "cuda"]
PROVIDERS: dict[str, str] = {"cpu": "CPUExecutionProvider", "cuda": "CUDAExecutionProvider"}


@dataclass(frozen=True)
class TensorSpec:
    name: str
    datatype: Datatype
    shape: list[int]  # -1 for a dimension the model leaves free

    def metadata(self) -> dict[str, Any]:
        return {"name": self.name, "datatype": self.datatype.name, "shape": self.shape}

    def check(self, dt: Datatype, shape: list[int], role: str) -> None:
        if dt != self.datatype:
            raise InvalidArgument(
                f"{role} {self.name!r} is {self.datatype.name} in the model, not {dt.name}"
            )
        if len(shape) != len(self.shape) or any(
            want not in (-1, got) for want, got in zip(self.shape, shape, strict=True)
        ):
            raise InvalidArgument(
                f"{role} {self.name!r} has shape {self.shape} in the model, not {shape}"
            )
        if any(d <= 0 for d in shape):
            raise InvalidArgument(f"{role} {self.name!r}: every dimension must be positive")


@dataclass(frozen=True)
class ModelSettings:
    execution_provider: ExecutionProvider = "cpu"
    intra_op_threads: int = 0

    @classmethod
    def load(cls, path: Path) -> ModelSettings:
        try:
            raw = json.loads(path.read_text())
        except (OSError, ValueError) as e:
            raise InvalidArgument(f"cannot read model settings {path}: {e}") from None
        unknown = set(raw) - {"execution_provider", "intra_op_threads"}
        if unknown:
            raise InvalidArgument(f"{path}: unknown settings {sorted(unknown)}")
        ep = raw.get("execution_provider", "cpu")
        if ep not in PROVIDERS:
            raise InvalidArgument(f"{path}: execution_provider is one of {sorted(PROVIDERS)}")
        return cls(ep, int(raw.get("intra_op_threads", 0)))


def _spec(arg: Any) -> TensorSpec:
    dt = from_ort(arg.type)
    if dt is None:
        raise Unsupported(f"model tensor {arg.name!r} has unsupported type {arg.type}")
    shape = [d if isinstance(d, int) and d >= 0 else -1 for d in (arg.shape or [])]
    return TensorSpec(arg.name, dt, shape)


@dataclass
class Model:
    name: str
    version: str
    path: Path
    settings: ModelSettings = field(default_factory=ModelSettings)
    config: ModelConfig = field(default_factory=ModelConfig)
    versions: list[str] = field(default_factory=list)  # every loaded version of this name
    session: ort.InferenceSession | None = None
    inputs: dict[str, TensorSpec] = field(default_factory=dict)
    outputs: dict[str, TensorSpec] = field(default_factory=dict)

    def load(self) -> None:
        provider = PROVIDERS[self.settings.execution_provider]
        if provider not in ort.get_available_providers():
            raise Unsupported(
                f"model {self.name!r} asks for {provider}, which this onnxruntime lacks"
            )
        so = ort.SessionOptions()
        so.intra_op_num_threads = self.settings.intra_op_threads
        # Idle intra-op threads would otherwise spin after each run and take the cores that
        # renderers and fence waiters need on small machines.
        so.add_session_config_entry("session.intra_op.allow_spinning", "0")
        try:
            self.session = ort.InferenceSession(str(self.path), so, providers=[provider])
        except Exception as e:  # onnxruntime raises its own types for a bad file
            raise InvalidArgument(f"model {self.name!r} at {self.path} does not load: {e}") from e
        self.inputs = {a.name: _spec(a) for a in self.session.get_inputs()}
        self.outputs = {a.name: _spec(a) for a in self.session.get_outputs()}
        self.config.check(self.name, self.inputs, self.outputs)

    def check_bindings(self, inputs: dict[str, Any], outputs: dict[str, Any]) -> None:
        """Every model tensor bound, nothing else, each with the model's datatype and shape."""
        for role, bound, specs in (("input", inputs, self.inputs), ("output", outputs, self.outputs)):
            unknown = sorted(set(bound) - set(specs))
            missing = sorted(set(specs) - set(bound))
            if unknown:
                raise InvalidArgument(
                    f"model {self.name!r} has no {role} named {', '.join(map(repr, unknown))}; "
                    f"its {role}s are {sorted(specs)}"
                )
            if missing:
                raise InvalidArgument(
                    f"every {role} of model {self.name!r} must be bound; missing "
                    f"{', '.join(map(repr, missing))}"
                )
            for name, b in bound.items():
                specs[name].check(b.datatype, b.shape, role)

    @property
    def device(self) -> str:
        return self.settings.execution_provider

    def metadata(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "versions": self.versions or [self.version],
            "platform": "onnxruntime_onnx",
            "inputs": [s.metadata() for s in self.inputs.values()],
            "outputs": [s.metadata() for s in self.outputs.values()],
        }


class ModelRepository:
    """Models by name, each with the versions its ``version_policy`` loads; a request without a
    version gets the newest."""

    def __init__(self) -> None:
        self._models: dict[str, dict[str, Model]] = {}
        self._lock = threading.Lock()

    @classmethod
    def from_sources(
        cls, repository: Path | None = None, models: dict[str, Path] | None = None
    ) -> ModelRepository:
        repo = cls()
        if repository is not None:
            repo.scan(repository)
        for name, path in (models or {}).items():
            repo.add(Model(name, "1", Path(path)))
        return repo

    def scan(self, root: Path) -> None:
        if not root.is_dir():
            raise InvalidArgument(f"model repository {root} is not a directory")
        for model_dir in sorted(p for p in root.iterdir() if p.is_dir()):
            config = ModelConfig.load(model_dir)
            filename = config.default_model_filename
            available = [int(v.name) for v in model_dir.iterdir()
                         if v.name.isdigit() and (v / filename).is_file()]  # fmt: skip
            if not available:
                log.warning("skipping %s: no <version>/%s inside", model_dir, filename)
                continue
            settings_path = model_dir / "config.json"
            settings = ModelSettings.load(settings_path) if settings_path.is_file() else ModelSettings()
            config.warn_ignored(model_dir.name)
            versions = config.version_policy.select(available, str(model_dir / "config.pbtxt"))
            # Directory names as written ("007" stays "007"), ordered by their number.
            names = {int(v.name): v.name for v in model_dir.iterdir() if v.name.isdigit()}
            loaded = [names[v] for v in versions]
            for v in loaded:
                self.add(Model(model_dir.name, v, model_dir / v / filename, settings, config,
                               loaded))

    def add(self, model: Model) -> None:
        if not model.path.is_file():
            raise InvalidArgument(f"model {model.name!r}: no file at {model.path}")
        model.load()
        with self._lock:
            self._models.setdefault(model.name, {})[model.version] = model
        log.info("loaded model %s version %s from %s", model.name, model.version, model.path)

    def get(self, name: str, version: str | None = None) -> Model:
        versions = self._models.get(name, {})
        model = versions.get(version) if version else self._newest(versions)
        if model is None:
            suffix = f" version {version}" if version else ""
            raise NotFound(f"no model named {name!r}{suffix}")
        return model

    @staticmethod
    def _newest(versions: dict[str, Model]) -> Model | None:
        return max(versions.values(), key=lambda m: int(m.version) if m.version.isdigit() else -1,
                   default=None)

    def names(self) -> list[str]:
        return sorted(self._models)

    def newest(self) -> list[Model]:
        """One model per name, its newest version."""
        return [m for v in self._models.values() if (m := self._newest(v)) is not None]

    def __iter__(self):  # type: ignore[no-untyped-def]
        """Every loaded version of every model."""
        return iter([m for v in list(self._models.values()) for m in v.values()])
