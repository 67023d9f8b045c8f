"""``fenceline bench``: per-frame latency and throughput through every transport, beside the
in-process floor and (with ``--peers``) a real Triton Inference Server, measured in one run on
the same models and the same frames; a table, JSON and a PNG plot.

Modules: ``suite`` (the run), ``scenarios`` (the matrix and budgets), ``registry`` (the
transports), ``transports`` (lanes: one renderer's frame loop each), ``engine`` (runs lanes in
threads and processes), ``buffers`` (frames and output checks), ``triton`` (the Triton peer),
``realmodel`` (PP-OCRv4 text detection), ``floors`` (the machine's handoff floors), ``report``
and ``plot`` (the output).

This package's import stays light: renderer processes started by the engine import
``fenceline.bench.transports``, and with it this module.
"""

from __future__ import annotations

from typing import Any

__all__ = ["goals", "run_bench"]


def run_bench(**options: Any) -> int:
    """See :func:`fenceline.bench.suite.run_bench`."""
    from fenceline.bench.suite import run_bench as run

    return run(**options)


def goals(rows: list[Any], real_size: str | None = None) -> list[dict[str, Any]]:
    """See :func:`fenceline.bench.report.goals`."""
    from fenceline.bench.report import goals as compute

    return compute(rows, real_size)

