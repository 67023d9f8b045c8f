"""Clients of the service, for renderers written in Python.

- :class:`IpcClient`: the Unix-socket fast path, with fd passing (docs/ipc.md).
- :class:`HttpClient`: the HTTP control and run API.
- :class:`SharedFrame` and :class:`Fence`: what a renderer creates and shares.
- :class:`Session` (from ``client.session(...)``) and :class:`Layout` (where each tensor of a
  model lives in one buffer, from ``client.model_metadata(name)``).
- :class:`ClientError`: the root of everything the clients raise on purpose;
  :class:`ServiceError` (the service answered with an error) and :class:`UsageError` (fix
  the call) below it. Timeouts are seconds (``timeout_s``) everywhere.
- :func:`c_library_dir`: where the C client library is (:mod:`fenceline.client.c_api`).
"""

from typing import Any

from fenceline.client.errors import ClientError, ServiceError, UsageError
from fenceline.client.frames import Fence, SharedFrame
from fenceline.client.http import HttpClient
from fenceline.client.ipc import IpcClient
from fenceline.client.session import Layout, Session
from fenceline.client.views import View

__all__ = [
    "ClientError",
    "Fence",
    "HttpClient",
    "IpcClient",
    "Layout",
    "ServiceError",
    "Session",
    "SharedFrame",
    "UsageError",
    "View",
    "c_library_dir",
]


def __getattr__(name: str) -> Any:
    # Imported on first use, so `python -m fenceline.client.c_api` does not find its own module
    # already imported by this package.
    if name == "c_library_dir":
        from fenceline.client.c_api import c_library_dir

        return c_library_dir
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
