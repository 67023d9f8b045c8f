"""Triton's statistics extension (``GET /v2/models/stats``), read from the Prometheus registry
at request time, so the per-frame path pays nothing for it.

Every completed run counts, whatever its transport (IPC, HTTP interop, KServe): one inference
and one execution (fenceline does not batch). Time is split as Triton splits it: ``queue`` is
the fence wait (zero for KServe, which has no fence), ``compute_infer`` the model run, and
``compute_input`` the rest (binding the views, signalling); ``compute_output`` is zero since
outputs land in place. ``fail`` counts KServe requests that failed after the model was found.
"""

from __future__ import annotations

from typing import Any

from fenceline.metrics import Metrics
from fenceline.runtime.models import Model


def _by_model(metrics: Metrics) -> dict[str, dict[str, float]]:
    """Per model: runs, run/wait/infer seconds, KServe failures, from one registry scrape."""
    wanted = {
        "fenceline_session_runs_total": "runs",
        "fenceline_session_run_duration_seconds_sum": "run_s",
        "fenceline_session_wait_duration_seconds_sum": "wait_s",
        "fenceline_session_infer_duration_seconds_sum": "infer_s",
        "fenceline_kserve_failures_total": "failures",
    }
    out: dict[str, dict[str, float]] = {}
    for family in metrics.registry.collect():
        for sample in family.samples:
            key = wanted.get(sample.name)
            model = sample.labels.get("model")
            if key is None or model is None:
                continue
            row = out.setdefault(model, {})
            row[key] = row.get(key, 0.0) + sample.value
    return out


def _duration(count: float, seconds: float) -> dict[str, int]:
    return {"count": int(count), "ns": max(0, int(seconds * 1e9))}


def model_statistics(metrics: Metrics, models: list[Model]) -> dict[str, Any]:
    rows = _by_model(metrics)
    stats = []
    for m in models:
        row = rows.get(m.name, {})
        runs = row.get("runs", 0.0)
        run_s, wait_s, infer_s = row.get("run_s", 0.0), row.get("wait_s", 0.0), row.get("infer_s", 0.0)
        stats.append({
            "name": m.name,
            "version": m.version,
            "last_inference": int(metrics.last_run_ms.get(m.name, 0)),
            "inference_count": int(runs),
            "execution_count": int(runs),
            "inference_stats": {
                "success": _duration(runs, run_s),
                "fail": _duration(row.get("failures", 0.0), 0.0),
                "queue": _duration(runs, wait_s),
                "compute_input": _duration(runs, run_s - wait_s - infer_s),
                "compute_infer": _duration(runs, infer_s),
                "compute_output": _duration(runs, 0.0),
                "cache_hit": _duration(0, 0.0),
                "cache_miss": _duration(0, 0.0),
            },
            "batch_stats": [],
        })
    return {"model_stats": stats}
