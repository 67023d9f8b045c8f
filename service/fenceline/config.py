"""Service settings: user choices validated once, at construction, with messages that say how
to fix them."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from fenceline.errors import InvalidArgument


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
        if self.log_level not in ("critical", "error", "warning", "info", "debug"):
            raise InvalidArgument("--log-level is one of critical, error, warning, info, debug")
