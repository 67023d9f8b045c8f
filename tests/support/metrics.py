"""Reading a live service's /metrics: one sample, or the sum of a family's samples."""

from __future__ import annotations

import re
from collections.abc import Iterator
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


def samples(text: str, name: str) -> Iterator[tuple[dict[str, str], float]]:
    """The labels and value of each sample named exactly ``name`` in the exposition ``text``."""
    for line in text.splitlines():
        if line.startswith("#"):
            continue
        head, _, value = line.rpartition(" ")
        family, _, rest = head.partition("{")
        if family == name:
            yield dict(_LABEL.findall(rest)), float(value)


def total(text: str, name: str, **labels: str) -> float:
    """The sum of the samples named exactly ``name`` whose labels include ``labels`` (0 where
    there are none)."""
    return sum(value for have, value in samples(text, name)
               if all(have.get(k) == v for k, v in labels.items()))


def metric(service: HasUrl, name: str, default: float | None = None, **labels: str) -> float:
    """:func:`sample` of the service's /metrics now."""
    return sample(metrics_text(service), name, default, **labels)


def imported(service: HasUrl, kind: str) -> float:
    """How many handles of ``kind`` (a memory or fence kind) the service holds imported now."""
    return metric(service, "fenceline_interop_imported_handles", 0.0, kind=kind)


def native_runs(service: HasUrl) -> dict[str, int]:
    """The native engine's counters (``fenceline_native_runs_total``) by outcome: which engine
    served the service's runs (docs/architecture.md, "Who serves a run")."""
    return {labels["outcome"]: int(value) for labels, value in
            samples(metrics_text(service), "fenceline_native_runs_total")}


def changed(before: dict[str, int], after: dict[str, int]) -> dict[str, int]:
    """The counts of ``after`` that differ from ``before``'s, by how much."""
    return {k: n - before.get(k, 0) for k, n in after.items() if n != before.get(k, 0)}
