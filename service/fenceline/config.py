"""Service settings: one object read from flags, then ``FENCELINE_*`` environment variables, then
defaults, validated once, at construction, with messages that say how to fix them.

Flags win over the environment: ``FENCELINE_PORT=9000 fenceline serve --port 8001`` serves on
8001. Every field is a variable of the same name in upper case (``max_body_mb`` is
``FENCELINE_MAX_BODY_MB``); ``FENCELINE_MODELS`` and ``FENCELINE_ALLOW_UIDS`` take JSON
(``{"net": "/models/net.onnx"}``, ``[1001, 1002]``).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from pydantic import ValidationError, field_validator, model_validator
from pydantic_settings import BaseSettings, SettingsConfigDict

from fenceline import trace
from fenceline.errors import InvalidArgument
from fenceline.ipc import limits
from fenceline.logs import LOG_FORMATS, LogFormat
from fenceline.runtime.model_config import CONTROL_MODES, ControlMode

ENV_PREFIX = "FENCELINE_"
LOG_LEVELS = ("critical", "error", "warning", "info", "debug")
# sockaddr_un.sun_path is 108 bytes on Linux, the terminating NUL included.
MAX_SOCKET_PATH = 107


def parse_model_arg(arg: str) -> tuple[str, Path]:
    name, sep, path = arg.partition("=")
    if not sep or not name or not path:
        raise InvalidArgument(f"--model takes NAME=PATH, got {arg!r}")
    return name, Path(path)


def flag_of(field: str) -> str:
    return "--" + field.replace("_", "-")


def env_of(field: str) -> str:
    return ENV_PREFIX + field.upper()


class ServeSettings(BaseSettings):
    model_config = SettingsConfigDict(
        env_prefix=ENV_PREFIX, env_ignore_empty=True, frozen=True, extra="forbid"
    )

    host: str = "127.0.0.1"
    port: int = 8000
    socket: Path | None = None  # None: $XDG_RUNTIME_DIR/fenceline/fenceline.sock
    # Neither a repository nor models: the builtin models (fenceline.models.builtin).
    model_repository: Path | None = None
    models: dict[str, Path] = {}
    model_control_mode: ControlMode = "none"  # Triton's: none, explicit, poll
    load_models: list[str] = []  # explicit mode: the models loaded at start ("*": all)
    repository_poll_secs: float = 15.0  # poll mode: seconds between rescans
    ipc_spin_us: int = 100
    fence_spin_us: int = 50
    max_spinners: int | None = None  # None: half the usable CPUs, at least 1 (fenceline.waiting)
    log_level: str = "info"
    log_format: LogFormat = "text"
    client_shared_memory: bool = True  # Triton's system shared-memory registration
    allow_uids: frozenset[int] | None = None  # users besides the service's own (--allow-uid)
    token_file: Path | None = None
    # Traces show every user's sessions (fenceline.trace, docs/tracing.md "Who may trace"):
    # without --token-file, HTTP traces need the control token beside the socket unless this
    # is on.
    http_trace: bool = False
    trace_max_frames: int = trace.DEFAULT_MAX_FRAMES  # the most frames one trace may ask for
    max_body_mb: int = 256
    max_json_mb: int = 16  # the JSON part of a request: parsing costs many times its size
    http_header_timeout_s: float = 10.0  # a request's line and headers must arrive within this
    http_body_idle_s: float = 30.0  # the longest pause inside a request body
    max_sessions: int = 256
    max_imports: int = 1024
    max_imports_per_user: int = 4096
    max_mapped_mb: int = 16384
    max_inflight: int = 64
    max_sessions_per_device: int = 1024
    # IPC connections (fenceline.ipc.limits, docs/reliability.md "Connections")
    max_connections: int = limits.DEFAULT_MAX_CONNECTIONS
    max_connections_per_user: int = limits.DEFAULT_MAX_CONNECTIONS_PER_USER
    ipc_send_timeout_s: float = limits.DEFAULT_SEND_TIMEOUT_S

    def __init__(self, **values: Any) -> None:
        try:
            super().__init__(**values)
        except ValidationError as e:
            raise InvalidArgument(_explain(e)) from None

    @property
    def builtin_models(self) -> bool:
        """Whether the service serves the builtin models (no model option given)."""
        return self.model_repository is None and not self.models

    def connection_limits(self) -> limits.ConnectionLimits:
        return limits.ConnectionLimits(
            self.max_connections, self.max_connections_per_user, self.ipc_send_timeout_s)

    def token(self) -> str | None:
        if self.token_file is None:
            return None
        token = self.token_file.read_text().strip()
        return token or None

    @field_validator("log_level", mode="before")
    @classmethod
    def _lower(cls, v: Any) -> Any:
        return v.lower() if isinstance(v, str) else v

    @model_validator(mode="after")
    def _check(self) -> ServeSettings:
        if not 0 <= self.port < 65536:
            raise InvalidArgument(f"--port {self.port} is not a TCP port (0..65535)")
        if self.model_repository is not None and not self.model_repository.is_dir():
            raise InvalidArgument(
                f"--model-repository {self.model_repository} is not a directory; it holds "
                "<name>/<version>/model.onnx (`fenceline models write DIR` writes the builtin ones)"
            )
        for name, path in self.models.items():
            if not path.is_file():
                raise InvalidArgument(f"--model {name}={path}: no such file")
        if self.socket is not None and len(bytes(self.socket)) > MAX_SOCKET_PATH:
            raise InvalidArgument(
                f"--socket {self.socket}: {len(bytes(self.socket))} bytes is longer than a Unix "
                f"socket path may be ({MAX_SOCKET_PATH}); choose a shorter path"
            )
        if self.load_models and self.model_control_mode != "explicit":
            raise InvalidArgument("--load-model goes with --model-control-mode explicit")
        if not 0 < self.repository_poll_secs <= 86400:
            raise InvalidArgument("--repository-poll-secs is a number of seconds in (0, 86400]")
        if self.ipc_spin_us < 0 or self.fence_spin_us < 0:
            raise InvalidArgument("spin budgets are microseconds, 0 or more")
        if not 0 < self.trace_max_frames <= trace.MAX_FRAMES:
            raise InvalidArgument(f"--trace-max-frames is 1 to {trace.MAX_FRAMES}")
        if self.max_spinners is not None and self.max_spinners < 0:
            raise InvalidArgument("--max-spinners is 0 or more (0: the service never spins)")
        if self.token_file is not None:
            if not self.token_file.is_file():
                raise InvalidArgument(f"--token-file {self.token_file}: no such file")
            if not self.token_file.read_text().strip():
                raise InvalidArgument(f"--token-file {self.token_file} is empty")
        for flag, value in (("--max-body-mb", self.max_body_mb), ("--max-json-mb", self.max_json_mb),
                            ("--max-sessions", self.max_sessions),
                            ("--max-imports", self.max_imports),
                            ("--max-imports-per-user", self.max_imports_per_user),
                            ("--max-mapped-mb", self.max_mapped_mb),
                            ("--max-inflight", self.max_inflight),
                            ("--max-sessions-per-device", self.max_sessions_per_device),
                            ("--max-connections", self.max_connections),
                            ("--max-connections-per-user", self.max_connections_per_user)):
            if value <= 0:
                raise InvalidArgument(f"{flag} must be positive")
        if not 0 < self.http_header_timeout_s <= 3600:
            raise InvalidArgument("--http-header-timeout-s is a number of seconds in (0, 3600]")
        if not 0 < self.http_body_idle_s <= 3600:
            raise InvalidArgument("--http-body-idle-s is a number of seconds in (0, 3600]")
        if not 0 < self.ipc_send_timeout_s <= 3600:
            raise InvalidArgument("--ipc-send-timeout-s is a number of seconds in (0, 3600]")
        if self.log_level not in LOG_LEVELS:
            raise InvalidArgument(f"--log-level is one of {', '.join(LOG_LEVELS)}")
        return self


def _explain(e: ValidationError) -> str:
    """One line per bad value, naming both the flag and the variable it may have come from."""
    parts = []
    for err in e.errors():
        field = str(err["loc"][0]) if err["loc"] else ""
        if err["type"] == "extra_forbidden":
            parts.append(f"unknown setting {field!r}")
            continue
        where = f"{flag_of(field)} (or {env_of(field)})" if field else "settings"
        got = err.get("input")
        if field == "log_format" and err["type"] == "literal_error":
            parts.append(f"{where} is one of {', '.join(LOG_FORMATS)}, not {got!r}")
        elif field == "model_control_mode" and err["type"] == "literal_error":
            parts.append(f"{where} is one of {', '.join(CONTROL_MODES)}, not {got!r}")
        else:
            parts.append(f"{where}: {err['msg'].lower()}, got {got!r}")
    return "; ".join(parts)


def setting_help(field: str, text: str = "", *, default: str | None = None) -> str:
    """``text`` followed by the field's default (or ``default``, where None means something)
    and its variable, for ``--help``."""
    value = ServeSettings.model_fields[field].default
    if default is not None:
        shown = default
    elif isinstance(value, bool):
        shown = "on" if value else "off"
    elif value is None or value == {}:
        shown = "none"
    else:
        shown = str(value)
    extra = f"default: {shown}; env {env_of(field)}"
    return f"{text} ({extra})" if text else extra
