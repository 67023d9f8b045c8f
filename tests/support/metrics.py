"""Reading one sample of a live service's /metrics."""

from __future__ import annotations

import httpx

from tests.support.service import Service


def metric(service: Service, name: str, default: float | None = None, **labels: str) -> float:
    text = httpx.get(service.url + "/metrics").text
    want = ",".join(f'{k}="{v}"' for k, v in sorted(labels.items()))
    for line in text.splitlines():
        metric_name, _, value = line.rpartition(" ")
        if metric_name == (f"{name}{{{want}}}" if labels else name):
            return float(value)
    if default is not None:
        return default
    raise AssertionError(f"no metric {name} {labels}")


def imported(service: Service, kind: str) -> float:
    """How many handles of ``kind`` (a memory or fence kind) the service holds imported now."""
    return metric(service, "fenceline_interop_imported_handles", 0.0, kind=kind)
