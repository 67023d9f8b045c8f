"""Triton's statistics extension (``GET /v2/models/stats``), read at request time from what
the metrics hold, so the per-frame path pays nothing for it.

Every completed run counts, whatever its transport: one inference and one execution (fenceline
does not batch). A KServe request's part is read from Triton's own counters
(``nv_inference_*``, :class:`fenceline.metrics.TritonMetrics`), so the two surfaces report the
same numbers, as Triton's do: ``compute_input`` binding the tensors, ``compute_infer`` the
model run, ``compute_output`` collecting the outputs, ``queue`` zero, and ``fail`` the requests
that failed once their model was found; dropped, like the metrics, when the model unloads. A
run over the IPC socket or the interop routes comes from fenceline's run histograms:
``queue`` is its fence wait, ``compute_infer`` the model run, ``compute_input`` the rest
(binding, signalling) and ``compute_output`` nothing, since its outputs land in place.
"""

from __future__ import annotations

from typing import Any

from fenceline.metrics import Metrics
from fenceline.runtime.models import Model


def _renderer_runs(metrics: Metrics) -> dict[str, dict[str, float]]:
    """Per model: runs and run/wait/infer seconds over every transport but KServe, from one
    registry scrape (the histograms' sums less what KServe requests added to them)."""
    wanted = {
        "fenceline_session_runs_total": "runs",
        "fenceline_session_run_duration_seconds_sum": "run_s",
        "fenceline_session_wait_duration_seconds_sum": "wait_s",
        "fenceline_session_infer_duration_seconds_sum": "infer_s",
    }
    out: dict[str, dict[str, float]] = {}
    for family in metrics.registry.collect():
        for sample in family.samples:
            key = wanted.get(sample.name)
            model = sample.labels.get("model")
            if key is None or model is None or sample.labels.get("transport") == "kserve":
                continue
            row = out.setdefault(model, {})
            row[key] = row.get(key, 0.0) + sample.value
    for model, row in out.items():
        run_s, infer_s = metrics.kserve_seconds(model)
        row["run_s"] = row.get("run_s", 0.0) - run_s
        row["infer_s"] = row.get("infer_s", 0.0) - infer_s
    return out


def _duration(count: float, ns: float) -> dict[str, int]:
    return {"count": int(count), "ns": max(0, int(ns))}


def model_statistics(metrics: Metrics, models: list[Model]) -> dict[str, Any]:
    rows = _renderer_runs(metrics)
    stats = []
    for m in models:
        row = rows.get(m.name, {})
        k = metrics.triton.totals(m.name)  # microseconds
        runs = row.get("runs", 0.0) + k["nv_inference_request_success"]
        run_ns = row.get("run_s", 0.0) * 1e9 + k["nv_inference_request_duration_us"] * 1e3
        wait_ns = row.get("wait_s", 0.0) * 1e9 + k["nv_inference_queue_duration_us"] * 1e3
        infer_ns = (row.get("infer_s", 0.0) * 1e9
                    + k["nv_inference_compute_infer_duration_us"] * 1e3)
        output_ns = k["nv_inference_compute_output_duration_us"] * 1e3
        stats.append({
            "name": m.name,
            "version": m.version,
            "last_inference": int(metrics.last_run_ms.get(m.name, 0)),
            "inference_count": int(runs),
            "execution_count": int(runs),
            "inference_stats": {
                "success": _duration(runs, run_ns),
                "fail": _duration(k["failures"], 0.0),
                "queue": _duration(runs, wait_ns),
                "compute_input": _duration(runs, run_ns - wait_ns - infer_ns - output_ns),
                "compute_infer": _duration(runs, infer_ns),
                "compute_output": _duration(runs, output_ns),
                "cache_hit": _duration(0, 0.0),
                "cache_miss": _duration(0, 0.0),
            },
            "batch_stats": [],
        })
    return {"model_stats": stats}
