"""Capability discovery: which handle and fence kinds can be imported here.

An unsupported kind is a plain ``False``, never an exception (OrtInteropApi's discovery calls).
HTTP ``/v2/interop/capabilities`` and the IPC handshake both answer with :func:`capabilities`.
"""

from __future__ import annotations

import os
import platform
from collections.abc import Callable
from typing import Any

from fenceline import _native
from fenceline.errors import InvalidArgument, Unsupported

MEMORY_TYPES: tuple[str, ...] = (
    "host_shm",
    "host_fd",
    "opaque_fd",
    "cuda_ipc",
    "d3d12_resource",
    "d3d12_heap",
)
FENCE_TYPES: tuple[str, ...] = ("host_timeline", "vk_timeline_opaque_fd", "d3d12_fence")
# Kinds a Windows build reports false whatever its drivers (native module.cpp, kPosix).
POSIX_ONLY: tuple[str, ...] = ("host_fd", "opaque_fd", "cuda_ipc", "vk_timeline_opaque_fd")


def can_import_memory(kind: str) -> bool:
    return bool(_native.can_import_memory(kind))


def can_import_fence(kind: str) -> bool:
    return bool(_native.can_import_fence(kind))


def require_importable(kind: str, field: str, kinds: tuple[str, ...],
                       importable: Callable[[str], bool]) -> None:
    """Refuses a ``field`` value that is none of ``kinds`` (naming them), or that this machine
    cannot import."""
    if kind not in kinds:
        raise InvalidArgument(f"unknown {field} {kind!r}; use one of {', '.join(kinds)}")
    if not importable(kind):
        raise Unsupported(f"{field} {kind!r} cannot be imported on this machine")


def unsupported_reason(kind: str) -> str:
    """Why ``kind`` (a memory or fence kind) cannot be imported here; "" when it can."""
    if kind in MEMORY_TYPES and can_import_memory(kind):
        return ""
    if kind in FENCE_TYPES and can_import_fence(kind):
        return ""
    if kind.startswith("d3d12_"):
        supported, reason = _native.d3d12_capability()
        return "" if supported else str(reason)
    if _native.PLATFORM == "win32" and kind in POSIX_ONLY:
        return f"{kind} is imported only on Linux in this build"
    if kind in MEMORY_TYPES or kind in FENCE_TYPES:
        return str(_native.cuda_unavailable_reason()) or "not supported by this build"
    return f"{kind!r} is not a handle kind fenceline knows"


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
        # Each kind reported false, with why (the D3D12 kinds: docs/windows.md).
        "reasons": {
            k: unsupported_reason(k)
            for k in (*MEMORY_TYPES, *FENCE_TYPES)
            if not (can_import_memory(k) if k in MEMORY_TYPES else can_import_fence(k))
        },
        "devices": devices(),
    }
