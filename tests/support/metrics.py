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
