"""Small statistics shared by the product (the demo's live line) and the benchmark, so that
neither imports the other."""

from __future__ import annotations

from collections.abc import Iterable


def percentile(values: Iterable[float], q: float) -> float:
    """The ``q`` quantile (0..1) by nearest rank below; 0.0 for no values."""
    s = sorted(values)
    if not s:
        return 0.0
    return s[min(len(s) - 1, int(q * len(s)))]
