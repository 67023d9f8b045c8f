"""Capability discovery: which handle and fence kinds can be imported here.

An unsupported kind is a plain ``False``, never an exception (OrtInteropApi's discovery calls).
HTTP ``/v2/interop/capabilities`` and the IPC handshake both answer with :func:`capabilities`.
"""

from __future__ import annotations

import os
import platform
from typing import Any

from fenceline import _native

MEMORY_TYPES: tuple[str, ...] = (
    "host_shm",
    "host_fd",
    "opaque_fd",
    "cuda_ipc",
    "d3d12_resource",
    "d3d12_heap",
)
FENCE_TYPES: tuple[str, ...] = ("host_timeline", "vk_timeline_opaque_fd", "d3d12_fence")


def can_import_memory(kind: str) -> bool:
    return bool(_native.can_import_memory(kind))


def can_import_fence(kind: str) -> bool:
    return bool(_native.can_import_fence(kind))


def devices() -> list[dict[str, Any]]:
    cpu: dict[str, Any] = {
        "kind": "cpu",
        "id": 0,
        "name": platform.processor() or platform.machine(),
        "cores": os.cpu_count() or 1,
    }
    gpus = [
        {
            "kind": "cuda", "id": d["ordinal"], "name": d["name"], "uuid": bytes(d["uuid"]).hex(),
            "total_memory_bytes": int(d["total_memory"]),
        }
        for d in _native.cuda_devices()
    ]
    return [cpu, *gpus]


def capabilities() -> dict[str, Any]:
    return {
        "memory": {k: can_import_memory(k) for k in MEMORY_TYPES},
        "fences": {k: can_import_fence(k) for k in FENCE_TYPES},
        "devices": devices(),
    }
