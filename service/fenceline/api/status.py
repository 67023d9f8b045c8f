"""The live status page: ``GET /ui`` (one static HTML file, no build step) and the JSON it polls,
``GET /v2/interop/status``.

The status is an admin view over every owner, HTTP and IPC alike. Object ids are cut to their
first 8 hex digits: enough to tell sessions apart and match a client's log, not enough to act on
another client's objects.
"""

from __future__ import annotations

import os
import time
from functools import cache
from importlib import resources
from typing import Any

from fastapi import APIRouter, Request
from fastapi.responses import HTMLResponse

from fenceline import __version__, _native
from fenceline.errors import FencelineError
from fenceline.interop.handles import FenceHandle
from fenceline.runtime.service import Runtime
from fenceline.runtime.session import RECENT_RUNS, RunResult, Session
from fenceline.runtime.table import Entry

router = APIRouter(tags=["status"])

SHORT_ID = 8
FENCE_STATUS = {0: "live", 1: "abandoned", 2: "error"}


def short(id: str) -> str:
    return id[:SHORT_ID]


@cache
def _page() -> str:
    return (resources.files("fenceline.api") / "ui" / "index.html").read_text(encoding="utf-8")


@router.get("/ui", include_in_schema=False)
def ui() -> HTMLResponse:
    return HTMLResponse(_page(), headers={"Cache-Control": "no-cache"})


def fps(ends_ns: list[int], now_ns: int, capacity: int) -> float:
    """Runs per second over the last second; from the span of the recent runs when more ran
    than the ring holds."""
    window = [t for t in ends_ns if t >= now_ns - 1_000_000_000]
    if len(window) == len(ends_ns) == capacity and len(window) >= 2:
        return (len(window) - 1) * 1e9 / max(1, window[-1] - window[0])
    return float(len(window))


def _percentile(sorted_us: list[float], q: float) -> float | None:
    if not sorted_us:
        return None
    return sorted_us[min(len(sorted_us) - 1, int(q * len(sorted_us)))]


def _session_row(
    e: Entry[Session], now_ns: int, fences: dict[int, dict[str, Any]]
) -> dict[str, Any]:
    s = e.obj
    recent = s.recent  # one copy, consistent while the session keeps running
    results: list[RunResult] = [r for _, r in recent]
    total = [r.total_ns / 1e3 for r in results]
    ordered = sorted(total)
    return {
        "id": short(e.id),
        "owner": e.owner,
        "model": s.model.name,
        "device": s.model.device,
        "runs": s.runs,
        "single_thread_runs": s.single_thread_runs,
        "last_signal_value": s.last_signal_value,
        "wait_fence": fences.get(id(s.wait_fence), {"id": "", "value": None}),
        "signal_fence": fences.get(id(s.signal_fence), {"id": "", "value": None}),
        "fps": round(fps([t for t, _ in recent], now_ns, RECENT_RUNS), 2),
        "latency_us": {
            "last": total[-1] if total else None,
            "p50": _percentile(ordered, 0.50),
            "p99": _percentile(ordered, 0.99),
        },
        "recent_us": {
            "total": [round(v, 1) for v in total],
            "wait": [round(r.wait_ns / 1e3, 1) for r in results],
            "infer": [round(r.infer_ns / 1e3, 1) for r in results],
        },
    }


def _fence_row(e: Entry[FenceHandle]) -> dict[str, Any] | None:
    try:
        value, status = e.obj.value, e.obj.status
    except FencelineError:  # released since the snapshot
        return None
    return {
        "id": short(e.id),
        "owner": e.owner,
        "fence_type": e.obj.kind,
        "name": e.obj.name,
        "value": value,
        "status": FENCE_STATUS.get(status, str(status)),
        "sessions": len(e.users),
    }


@router.get("/v2/interop/status", tags=["interop"])
def status(request: Request) -> dict[str, Any]:
    rt: Runtime = request.app.state.runtime
    memory, fence_entries, session_entries = rt.snapshot()
    now_ns = time.perf_counter_ns()
    fences: list[dict[str, Any]] = []
    by_object: dict[int, dict[str, Any]] = {}
    for f in fence_entries:
        row = _fence_row(f)
        if row is not None:
            fences.append(row)
            by_object[id(f.obj)] = {"id": row["id"], "value": row["value"]}
    sessions = [_session_row(e, now_ns, by_object) for e in session_entries]
    per_model: dict[str, int] = {}
    for row in sessions:
        per_model[row["model"]] = per_model.get(row["model"], 0) + 1
    imported = sum(m.obj.size_bytes for m in memory)
    connections = rt.metrics.registry.get_sample_value("fenceline_ipc_open_connections")
    started = getattr(request.app.state, "started", None)
    idle_pools = rt.models.pool_idle
    return {
        "server": {
            "name": "fenceline",
            "version": __version__,
            "pid": os.getpid(),
            "uptime_s": round(time.monotonic() - started, 1) if started is not None else None,
            "ipc_connections": int(connections or 0),
            "imported_bytes": imported,
            "fps": round(sum(r["fps"] for r in sessions), 2),
            "large_frame_turns": _native.large_frame_turns(),
        },
        "models": [
            {**m.metadata(), "version": m.version, "device": m.device,
             "sessions": per_model.get(m.name, 0),
             "pool_priority": "idle" if idle_pools and m.pool else "normal"}
            for m in rt.models
        ],  # fmt: skip
        "sessions": sessions,
        "memory": [
            {
                "id": short(m.id),
                "owner": m.owner,
                "handle_type": m.obj.kind,
                "name": m.obj.name,
                "size_bytes": m.obj.size_bytes,
                "access": m.obj.access,
                "device": m.obj.device,
                "sessions": len(m.users),
            }
            for m in memory
        ],
        "fences": fences,
    }
