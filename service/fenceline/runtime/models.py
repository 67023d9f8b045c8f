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

from fenceline.errors import FencelineError, InvalidArgument, NotFound, Unsupported
from fenceline.interop.datatypes import Datatype, from_ort
from fenceline.runtime.model_config import ControlMode, ModelConfig
from fenceline.runtime.ort_options import (
    cpu_session_options,
    cuda_inference_session,
    pool_threads,
    set_idle,
    single_thread_from,
)

log = logging.getLogger("fenceline.runtime")

ExecutionProvider = Literal["cpu", "cuda"]
SETTINGS_MAX_BYTES = 64 << 10  # config.json: two settings
MAX_NAME_BYTES = 255  # a directory name's limit (NAME_MAX) on Linux, macOS and Windows
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
            with path.open("rb") as f:
                data = f.read(SETTINGS_MAX_BYTES + 1)
            if len(data) > SETTINGS_MAX_BYTES:
                raise ValueError(f"more than {SETTINGS_MAX_BYTES} bytes")
            raw = json.loads(data)
        except (OSError, ValueError, RecursionError) as e:
            raise InvalidArgument(f"cannot read model settings {path}: {e}") from None
        if not isinstance(raw, dict):
            raise InvalidArgument(f"{path}: model settings are a JSON object")
        unknown = set(raw) - {"execution_provider", "intra_op_threads"}
        if unknown:
            raise InvalidArgument(f"{path}: unknown settings {sorted(unknown)}")
        ep = raw.get("execution_provider", "cpu")
        if ep not in PROVIDERS:
            raise InvalidArgument(f"{path}: execution_provider is one of {sorted(PROVIDERS)}")
        threads = raw.get("intra_op_threads", 0)
        if not isinstance(threads, int) or isinstance(threads, bool) or not 0 <= threads <= 1024:
            raise InvalidArgument(f"{path}: intra_op_threads is a count of threads, 0 to 1024")
        return cls(ep, threads)


def check_name(name: str) -> None:
    """A model name as a repository may hold one: 1 to MAX_NAME_BYTES bytes of UTF-8 text, one
    directory name (no ``/``, ``\\``, control character, ``.`` or ``..``); InvalidArgument
    otherwise."""
    try:
        size = len(name.encode("utf-8"))
    except UnicodeEncodeError:
        raise InvalidArgument(f"model name {name!r} is not UTF-8 text") from None
    if not 0 < size <= MAX_NAME_BYTES:
        raise InvalidArgument(f"a model name is 1 to {MAX_NAME_BYTES} bytes of UTF-8 text, not "
                              f"{size} bytes")
    if name in (".", "..") or any(c in "/\\" or ord(c) < 32 or c == "\x7f" for c in name):
        raise InvalidArgument(f"model name {name!r} is not one directory name (no '/', '\\', "
                              "control character, '.' or '..')")


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
    # The same model on one thread, beside ``session``, for a service's runs while the CPUs are
    # full (runtime/ort_options.py, ``single_thread_from``): loaded by ``load_single``, once
    # the service has as many sessions on the CPU as CPUs; None until then, or where it has none.
    single: ort.InferenceSession | None = None
    single_from: int = 0  # the runs in flight from which a run takes it (0: never)
    _single_lock: threading.Lock = field(default_factory=threading.Lock, init=False, repr=False,
                                         compare=False)
    inputs: dict[str, TensorSpec] = field(default_factory=dict)
    outputs: dict[str, TensorSpec] = field(default_factory=dict)
    pool: list[int] = field(default_factory=list, repr=False)  # its onnxruntime pool's threads

    def load(self, *, service: bool = False) -> None:
        """``service``: load as the service does (runtime/ort_options.py): note the onnxruntime
        pool's threads (``pool``) to change their priority, and whether it may have a one-thread
        session (``single_from``). The bench's floors load as a renderer's own process would."""
        provider = PROVIDERS[self.settings.execution_provider]
        if provider not in ort.get_available_providers():
            raise Unsupported(
                f"model {self.name!r} asks for {provider}, which this onnxruntime lacks"
            )
        so = cpu_session_options(self.settings.intra_op_threads)
        try:
            with pool_threads(so.intra_op_num_threads if service else 0) as tids:
                self.session = (
                    cuda_inference_session(str(self.path), so, provider)
                    if provider == "CUDAExecutionProvider"
                    else ort.InferenceSession(str(self.path), so, providers=[provider]))
        except Exception as e:  # onnxruntime raises its own types for a bad file
            raise InvalidArgument(f"model {self.name!r} at {self.path} does not load: {e}") from e
        self.pool = tids
        self.single_from = (single_thread_from(self.settings.intra_op_threads, provider)
                            if service else 0)
        self.inputs = {a.name: _spec(a) for a in self.session.get_inputs()}
        self.outputs = {a.name: _spec(a) for a in self.session.get_outputs()}
        self.config.check(self.name, self.inputs, self.outputs)

    def load_single(self) -> ort.InferenceSession | None:
        """The one-thread session, loaded on the first call; None where the model has none. A
        load that fails (the file changed since) is logged, and the model keeps its pool."""
        if not self.single_from:
            return None
        with self._single_lock:
            if self.single is None and self.single_from:
                provider = PROVIDERS[self.settings.execution_provider]
                try:
                    self.single = ort.InferenceSession(str(self.path), cpu_session_options(1),
                                                       providers=[provider])
                except Exception as e:  # onnxruntime raises its own types for a bad file
                    log.warning("model %s version %s keeps its pool for every run: its "
                                "one-thread session does not load: %s", self.name, self.version, e)
                    self.single_from = 0
                    return None
                log.info("model %s version %s: one-thread session loaded, for runs while the "
                         "CPUs are full", self.name, self.version)
            return self.single

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
    version gets the newest.

    ``root`` (Triton's layout) and ``sources`` (``NAME=PATH`` models) are where models come
    from; :meth:`load` (re)builds one by name from there, :meth:`unload` forgets it. Sessions
    and in-flight requests hold the :class:`Model` they started with, so a reload or an unload
    never pulls a model from under them (runtime.model_control decides when an unload may go
    ahead)."""

    def __init__(self, root: Path | None = None, sources: dict[str, Path] | None = None,
                 mode: ControlMode = "none") -> None:
        self.root = root
        self.sources = dict(sources or {})
        self.mode: ControlMode = mode
        self._models: dict[str, dict[str, Model]] = {}
        # Of the sources' models not served now: why the last load failed, and the versions
        # an unload stopped serving (Triton's index keeps both, as its model states do).
        self._reasons: dict[str, str] = {}
        self._unloaded: dict[str, list[str]] = {}
        self._lock = threading.Lock()
        self._pool_idle = False  # whether the loaded models' pools run at idle priority
        self._misnamed: set[str] = set()  # directories skipped for their names (logged once)

    @property
    def pool_idle(self) -> bool:
        """Whether the served models' pools run at idle priority now."""
        return self._pool_idle

    def set_pool_idle(self, idle: bool) -> None:
        """Idle or normal priority for the pools of the models served now and of those loaded
        later (runtime/ort_options.py). A model no longer served keeps what it had: its threads
        end with its last session, and a thread id is never touched once they may have."""
        with self._lock:
            if idle == self._pool_idle:
                return
            self._pool_idle = idle
            for versions in self._models.values():
                for m in versions.values():
                    set_idle(m.pool, idle)

    @classmethod
    def from_sources(
        cls, repository: Path | None = None, models: dict[str, Path] | None = None, *,
        mode: ControlMode = "none", load: list[str] | None = None,
    ) -> ModelRepository:
        """Every model of the sources, or in ``explicit`` mode only those named in ``load``
        (``["*"]``: all). A model that does not load raises: a service does not start with a
        model it was told to serve missing."""
        if repository is not None and not repository.is_dir():
            raise InvalidArgument(f"model repository {repository} is not a directory")
        repo = cls(repository, models, mode)
        names = repo.available()
        if mode == "explicit" and load != ["*"]:
            unknown = sorted(set(load or []) - set(names))
            if unknown:
                raise NotFound(f"--load-model {unknown[0]}: no such model in the repository; "
                               f"it has {names}")
            names = sorted(set(load or []))
        for name in names:
            if repo.load(name, skip_empty=True):
                continue
            log.warning("skipping %s: %s", name, repo._reasons[name])
        return repo

    def available(self) -> list[str]:
        """Every model name the sources hold, loaded or not."""
        names = set(self.sources)
        if self.root is not None and self.root.is_dir():
            for p in self.root.iterdir():
                try:
                    check_name(p.name)
                except InvalidArgument as e:
                    if p.name not in self._misnamed:
                        self._misnamed.add(p.name)
                        log.warning("model repository %s: skipping a directory: %s", self.root,
                                    e.message)
                    continue
                if p.is_dir():
                    names.add(p.name)
        return sorted(names)

    def load(self, name: str, *, skip_empty: bool = False, config: str | None = None) -> bool:
        """(Re)loads ``name`` from its source and serves it; on failure the versions already
        loaded stay served (as Triton does) and the reason is kept for the index (a name the
        sources lack leaves nothing behind). ``skip_empty``: a model directory with no version
        inside returns False instead of raising. ``config``: a load request's config override,
        JSON (runtime.model_config.ModelConfig.from_json), in place of config.pbtxt. A name that
        no repository may hold (models.check_name) is refused unrecorded."""
        check_name(name)
        try:
            try:
                models = self._build(name, config)
            except OSError as e:  # a model directory or file the service may not read
                raise InvalidArgument(f"failed to load {name!r}: {e.strerror}: {e.filename}") from None
        except FencelineError as e:
            with self._lock:
                if name not in self._models and name in self.available():
                    self._reasons[name] = e.message
            if skip_empty and isinstance(e, _NoVersions):
                return False
            raise
        with self._lock:
            self._models[name] = {m.version: m for m in models}
            self._reasons.pop(name, None)
            self._unloaded.pop(name, None)
            if self._pool_idle:
                for m in models:
                    set_idle(m.pool, True)
        for m in models:
            log.info("loaded model %s version %s from %s", m.name, m.version, m.path)
        return True

    def _build(self, name: str, config: str | None = None) -> list[Model]:
        if name in self.sources:
            if config is not None:
                raise Unsupported(
                    f"model {name!r} is a file given with --model, which has no config to "
                    "override; put it in a model repository to load it with a config"
                )
            model = Model(name, "1", Path(self.sources[name]))
            if not model.path.is_file():
                raise InvalidArgument(f"model {name!r}: no file at {model.path}")
            model.load(service=True)
            return [model]
        model_dir = self.root / name if self.root is not None and "/" not in name else None
        if model_dir is None or name in (".", "..") or not model_dir.is_dir():
            raise NotFound(f"failed to load '{name}': no model directory named {name!r} in "
                           f"the repository {self.root}")
        if config is None:
            return self._scan_dir(model_dir, ModelConfig.load(model_dir))
        return self._scan_dir(model_dir, ModelConfig.from_json(config, name))

    @staticmethod
    def _scan_dir(model_dir: Path, config: ModelConfig) -> list[Model]:
        filename = config.default_model_filename
        available = [int(v.name) for v in model_dir.iterdir()
                     if v.name.isdigit() and (v / filename).is_file()]  # fmt: skip
        if not available:
            raise _NoVersions(f"failed to load '{model_dir.name}': no <version>/{filename} "
                              f"inside {model_dir}")
        settings_path = model_dir / "config.json"
        settings = ModelSettings.load(settings_path) if settings_path.is_file() else ModelSettings()
        versions = config.version_policy.select(available, str(model_dir / "config.pbtxt"))
        # Directory names as written ("007" stays "007"), ordered by their number.
        names = {int(v.name): v.name for v in model_dir.iterdir() if v.name.isdigit()}
        loaded = [names[v] for v in versions]
        models = [Model(model_dir.name, v, model_dir / v / filename, settings, config, loaded)
                  for v in loaded]
        for m in models:
            m.load(service=True)
        config.warn_ignored(model_dir.name)
        return models

    def add(self, model: Model) -> None:
        """Loads one model file and serves it beside the others (tests, builtin models)."""
        if not model.path.is_file():
            raise InvalidArgument(f"model {model.name!r}: no file at {model.path}")
        model.load(service=True)
        with self._lock:
            self._models.setdefault(model.name, {})[model.version] = model
            self._reasons.pop(model.name, None)
            self._unloaded.pop(model.name, None)
            if self._pool_idle:
                set_idle(model.pool, True)
        log.info("loaded model %s version %s from %s", model.name, model.version, model.path)

    def unload(self, name: str) -> bool:
        """Stops serving ``name``; False when it was not loaded."""
        with self._lock:
            gone = self._models.pop(name, None)
            if gone is None:
                return False
            self._unloaded[name] = sorted(gone, key=_version_order)
            self._reasons.pop(name, None)
        log.info("unloaded model %s", name)
        return True

    def is_loaded(self, model: Model) -> bool:
        """Whether ``model`` is the object served under its name and version now."""
        with self._lock:
            return self._models.get(model.name, {}).get(model.version) is model

    def get(self, name: str, version: str | None = None) -> Model:
        with self._lock:
            versions = dict(self._models.get(name, {}))
            known = name in self._reasons or name in self._unloaded
        model = versions.get(version) if version else self._newest(versions)
        if model is None:
            # Triton's wording, which clients and their log searches know: a model it has
            # tried to load (unloaded, or failed) "has no available versions", one it never
            # tried "is not found".
            if version:
                raise NotFound(f"Request for unknown model: '{name}' version {version} is not found")
            if known:
                raise NotFound(f"Request for unknown model: '{name}' has no available versions")
            raise NotFound(f"Request for unknown model: '{name}' is not found")
        return model

    @staticmethod
    def _newest(versions: dict[str, Model]) -> Model | None:
        return max(versions.values(), key=lambda m: int(m.version) if m.version.isdigit() else -1,
                   default=None)

    def names(self) -> list[str]:
        with self._lock:
            return sorted(self._models)

    def newest(self) -> list[Model]:
        """One model per name, its newest version."""
        with self._lock:
            groups = list(self._models.values())
        return [m for v in groups if (m := self._newest(v)) is not None]

    def index(self, ready_only: bool = False) -> list[dict[str, Any]]:
        """Triton's repository index, in its shapes: every loaded version ``READY``; the
        versions an unload stopped serving ``UNAVAILABLE``, reason ``unloaded``; a model whose
        last load failed ``UNAVAILABLE`` with why; a model never loaded its name alone. Only
        the sources' models are listed (and one still served after its directory went)."""
        with self._lock:
            loaded = {n: sorted(v, key=_version_order) for n, v in self._models.items()}
            reasons, unloaded = dict(self._reasons), dict(self._unloaded)
        out: list[dict[str, Any]] = []
        for name in sorted(set(self.available()) | set(loaded)):
            if name in loaded:
                out += [{"name": name, "version": v, "state": "READY"} for v in loaded[name]]
            elif ready_only:
                continue
            elif name in reasons:
                out.append({"name": name, "state": "UNAVAILABLE", "reason": reasons[name]})
            elif name in unloaded:
                out += [{"name": name, "version": v, "state": "UNAVAILABLE",
                         "reason": "unloaded"} for v in unloaded[name]]
            else:
                out.append({"name": name})
        return out

    def __iter__(self):  # type: ignore[no-untyped-def]
        """Every loaded version of every model."""
        with self._lock:
            return iter([m for v in self._models.values() for m in v.values()])


def _version_order(version: str) -> int:
    return int(version) if version.isdigit() else -1


class _NoVersions(NotFound):
    """A model directory with no version to load."""
