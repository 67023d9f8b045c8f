"""Service settings: user choices validated once, at construction, with messages that say how
to fix them."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from fenceline.errors import InvalidArgument
from fenceline.logs import LOG_FORMATS, LogFormat


def parse_model_arg(arg: str) -> tuple[str, Path]:
    name, sep, path = arg.partition("=")
    if not sep or not name or not path:
        raise InvalidArgument(f"--model takes NAME=PATH, got {arg!r}")
    return name, Path(path)


@dataclass(frozen=True)
class ServeSettings:
    host: str = "127.0.0.1"
    port: int = 8000
    socket: Path | None = None  # None: $XDG_RUNTIME_DIR/fenceline/fenceline.sock
    model_repository: Path | None = None
    models: dict[str, Path] = field(default_factory=dict)
    ipc_spin_us: int = 100
    fence_spin_us: int = 50
    max_spinners: int | None = None  # None: half the usable CPUs, at least 1 (fenceline.waiting)
    log_level: str = "info"
    log_format: LogFormat = "text"
    client_shared_memory: bool = True  # Triton's system shared-memory registration
    allow_uids: frozenset[int] | None = None  # users besides the service's own (--allow-uid)
    token_file: Path | None = None
    max_body_mb: int = 256
    max_json_mb: int = 16  # the JSON part of a request: parsing costs many times its size
    http_header_timeout_s: float = 10.0  # a request's line and headers must arrive within this
    http_body_idle_s: float = 30.0  # the longest pause inside a request body
    max_sessions: int = 256
    max_imports: int = 1024
    max_mapped_mb: int = 16384
    max_inflight: int = 64
    max_sessions_per_device: int = 1024

    def token(self) -> str | None:
        if self.token_file is None:
            return None
        token = self.token_file.read_text().strip()
        return token or None

    def __post_init__(self) -> None:
        if not 0 <= self.port < 65536:
            raise InvalidArgument(f"--port {self.port} is not a TCP port (0..65535)")
        if self.model_repository is not None and not self.model_repository.is_dir():
            raise InvalidArgument(
                f"--model-repository {self.model_repository} is not a directory; it holds "
                "<name>/<version>/model.onnx"
            )
        for name, path in self.models.items():
            if not path.is_file():
                raise InvalidArgument(f"--model {name}={path}: no such file")
        if self.ipc_spin_us < 0 or self.fence_spin_us < 0:
            raise InvalidArgument("spin budgets are microseconds, 0 or more")
        if self.max_spinners is not None and self.max_spinners < 0:
            raise InvalidArgument("--max-spinners is 0 or more (0: fence waits never spin)")
        if self.token_file is not None:
            if not self.token_file.is_file():
                raise InvalidArgument(f"--token-file {self.token_file}: no such file")
            if not self.token_file.read_text().strip():
                raise InvalidArgument(f"--token-file {self.token_file} is empty")
        for flag, value in (("--max-body-mb", self.max_body_mb), ("--max-json-mb", self.max_json_mb),
                            ("--max-sessions", self.max_sessions),
                            ("--max-imports", self.max_imports), ("--max-mapped-mb", self.max_mapped_mb),
                            ("--max-inflight", self.max_inflight),
                            ("--max-sessions-per-device", self.max_sessions_per_device)):
            if value <= 0:
                raise InvalidArgument(f"{flag} must be positive")
        if not 0 < self.http_header_timeout_s <= 3600:
            raise InvalidArgument("--http-header-timeout-s is a number of seconds in (0, 3600]")
        if not 0 < self.http_body_idle_s <= 3600:
            raise InvalidArgument("--http-body-idle-s is a number of seconds in (0, 3600]")
        if self.log_level not in ("critical", "error", "warning", "info", "debug"):
            raise InvalidArgument("--log-level is one of critical, error, warning, info, debug")
        if self.log_format not in LOG_FORMATS:
            raise InvalidArgument(f"--log-format is one of {', '.join(LOG_FORMATS)}")
