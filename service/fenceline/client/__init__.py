"""Clients of the service, for renderers written in Python.

- :class:`IpcClient`: the Unix-socket fast path, with fd passing (docs/ipc.md).
- :class:`HttpClient`: the HTTP control and run API.
- :class:`SharedFrame` and :class:`Fence`: what a renderer creates and shares.
"""

from fenceline.client.errors import ClientError, ServiceError
from fenceline.client.frames import Fence, SharedFrame
from fenceline.client.http import HttpClient
from fenceline.client.ipc import IpcClient, View

__all__ = [
    "ClientError",
    "Fence",
    "HttpClient",
    "IpcClient",
    "ServiceError",
    "SharedFrame",
    "View",
]
