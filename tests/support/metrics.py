"""Reading a live service's /metrics: one sample, or the sum of a family's samples."""

from __future__ import annotations

import re
from typing import Protocol

import httpx

_LABEL = re.compile(r'(\w+)="((?:[^"\\]|\\.)*)"')


class HasUrl(Protocol):
    @property
    def url(self) -> str: ...


def metrics_text(service: HasUrl) -> str:
    return httpx.get(service.url + "/metrics", timeout=30).text


def sample(text: str, name: str, default: float | None = None, **labels: str) -> float:
    """The sample named exactly ``name`` (as exposed: a counter's ``_total`` included) with
    exactly ``labels``, in the exposition ``text``; ``default`` where there is none, else an
    AssertionError."""
    want = ",".join(f'{k}="{v}"' for k, v in sorted(labels.items()))
    key = f"{name}{{{want}}}" if labels else name
    for line in text.splitlines():
        head, _, value = line.rpartition(" ")
        if head == key:
            return float(value)
    if default is not None:
        return default
    raise AssertionError(f"no metric {name} {labels}")


def total(text: str, name: str, **labels: str) -> float:
    """The sum of the samples named exactly ``name`` whose labels include ``labels`` (0 where
    there are none)."""
    out = 0.0
    for line in text.splitlines():
        if line.startswith("#"):
            continue
        head, _, value = line.rpartition(" ")
        family, _, rest = head.partition("{")
        if family == name:
            have = dict(_LABEL.findall(rest))
            if all(have.get(k) == v for k, v in labels.items()):
                out += float(value)
    return out


def metric(service: HasUrl, name: str, default: float | None = None, **labels: str) -> float:
    """:func:`sample` of the service's /metrics now."""
    return sample(metrics_text(service), name, default, **labels)


def imported(service: HasUrl, kind: str) -> float:
    """How many handles of ``kind`` (a memory or fence kind) the service holds imported now."""
    return metric(service, "fenceline_interop_imported_handles", 0.0, kind=kind)
