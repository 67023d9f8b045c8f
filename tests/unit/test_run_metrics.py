"""The run metrics kept natively (fenceline.metrics, run_metrics.cpp) read at scrape time as
prometheus_client's own Counter and Histograms would give them."""

from __future__ import annotations

import random

from prometheus_client import CollectorRegistry, Counter, Histogram, generate_latest

from fenceline.metrics import _RUN_HISTOGRAMS, LATENCY_BUCKETS, Metrics


def _lines(registry: CollectorRegistry, names: tuple[str, ...]) -> list[str]:
    """The exposition lines of the named families, in a fixed order (series may come in
    another order: the store lists them sorted, prometheus_client as they were made)."""
    text = generate_latest(registry).decode()
    return sorted(line for line in text.splitlines() if any(n in line for n in names))


def test_the_native_store_exposes_what_prometheus_client_would() -> None:
    reference = CollectorRegistry()
    runs = Counter("fenceline_session_runs_total", "Session runs that completed.",
                   ["model", "transport"], registry=reference)
    histograms = [Histogram(name, doc, ["model"], buckets=LATENCY_BUCKETS, registry=reference)
                  for name, doc in _RUN_HISTOGRAMS]
    metrics = Metrics()
    rng = random.Random(3)
    # Values on bucket bounds, between them, past the last one, and zero.
    values = [0.0, 5e-6, 7e-6, 1e-3, 0.3e-3, 2.5e-3, 7.0, *LATENCY_BUCKETS]
    for _ in range(600):
        model, transport = rng.choice(["a", "b"]), rng.choice(["ipc", "http", "kserve"])
        run, wait, infer = (rng.choice(values) for _ in range(3))
        runs.labels(model, transport).inc()
        for h, v in zip(histograms, (run, wait, infer), strict=True):
            h.labels(model).observe(v)
        metrics.observe_run(model, transport, run, wait, infer)
    names = ("fenceline_session_runs_total", *(name for name, _ in _RUN_HISTOGRAMS))
    got, want = _lines(metrics.registry, names), _lines(reference, names)
    assert len(want) > 100
    assert got == want
    assert set(metrics.last_run_ms) == {"a", "b"}


def test_a_series_appears_once_it_has_run() -> None:
    metrics = Metrics()
    metrics.run_series("m", "ipc")  # made, never observed
    text = generate_latest(metrics.registry).decode()
    assert 'model="m"' not in text
    metrics.observe_run("m", "ipc", 1e-3, 0.0, 1e-3)
    text = generate_latest(metrics.registry).decode()
    assert 'fenceline_session_runs_total{model="m",transport="ipc"} 1.0' in text
    assert 'fenceline_session_run_duration_seconds_count{model="m"} 1.0' in text
