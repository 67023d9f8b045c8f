"""Models, sessions and the object table: what every transport (HTTP, IPC) drives.

``service`` is the object table and the one run entry, ``session`` the protocol every session
implements, ``host_session`` and ``cuda_session`` its implementations, ``backends`` the one
place that picks between them, ``streaming`` the workers of streaming sessions."""

from fenceline.runtime.models import Model, ModelRepository
from fenceline.runtime.service import Runtime
from fenceline.runtime.session import RunResult, Session

__all__ = ["Model", "ModelRepository", "RunResult", "Runtime", "Session"]
