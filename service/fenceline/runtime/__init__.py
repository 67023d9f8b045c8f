"""Models, sessions and the object table: what every transport (HTTP, IPC) drives."""

from fenceline.runtime.models import Model, ModelRepository
from fenceline.runtime.service import Runtime
from fenceline.runtime.session import RunResult, Session

__all__ = ["Model", "ModelRepository", "RunResult", "Runtime", "Session"]
