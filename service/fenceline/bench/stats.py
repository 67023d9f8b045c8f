"""Summaries and the terminal table of a benchmark run."""

from __future__ import annotations

import statistics
import sys
from dataclasses import asdict, dataclass, field
from typing import Any


@dataclass
class Row:
    transport: str
    size: str
    samples_s: list[float] = field(repr=False)
    note: str = ""
    cpu_per_frame_us: float | None = None

    @property
    def p50_us(self) -> float:
        return percentile(self.samples_s, 0.50) * 1e6

    @property
    def p99_us(self) -> float:
        return percentile(self.samples_s, 0.99) * 1e6

    @property
    def mean_us(self) -> float:
        return statistics.fmean(self.samples_s) * 1e6 if self.samples_s else 0.0

    def summary(self) -> dict[str, Any]:
        d = asdict(self)
        del d["samples_s"]
        d.update(n=len(self.samples_s), p50_us=self.p50_us, p99_us=self.p99_us, mean_us=self.mean_us)
        return d


def percentile(values: list[float], q: float) -> float:
    if not values:
        return 0.0
    s = sorted(values)
    return s[min(len(s) - 1, int(q * len(s)))]


def fmt_us(us: float) -> str:
    return f"{us / 1e3:8.2f} ms" if us >= 10_000 else f"{us:8.1f} us"


def table(rows: list[Row], floors: dict[str, Row]) -> str:
    """One line per row; `x floor` is p50 over the in-process p50 of the same size."""
    head = (
        f"{'size':<10} {'transport':<28} {'n':>6} {'p50':>11} {'p99':>11} {'mean':>11} "
        f"{'x floor':>8}  {'cpu/frame':>10}"
    )
    lines = [head, "-" * len(head)]
    for r in rows:
        floor = floors.get(r.size)
        ratio = f"{r.p50_us / floor.p50_us:7.2f}x" if floor and floor.p50_us > 0 else "       -"
        cpu = f"{r.cpu_per_frame_us:8.1f}us" if r.cpu_per_frame_us is not None else ""
        lines.append(
            f"{r.size:<10} {r.transport:<28} {len(r.samples_s):>6} {fmt_us(r.p50_us):>11} "
            f"{fmt_us(r.p99_us):>11} {fmt_us(r.mean_us):>11} {ratio:>8}  {cpu:>10}"
            + (f"  {r.note}" if r.note else "")
        )
    return "\n".join(lines)


class Progress:
    """A one-line progress bar on stderr."""

    def __init__(self, total: int) -> None:
        self.total = max(total, 1)
        self.done = 0
        self.tty = sys.stderr.isatty()

    def step(self, label: str, n: int = 1) -> None:
        self.done += n
        width = 30
        filled = int(width * self.done / self.total)
        bar = "#" * filled + "." * (width - filled)
        text = f"[{bar}] {self.done}/{self.total} {label}"
        if self.tty:
            sys.stderr.write("\r" + text.ljust(90))
        else:
            sys.stderr.write(text + "\n")
        sys.stderr.flush()

    def close(self) -> None:
        if self.tty:
            sys.stderr.write("\r" + " " * 90 + "\r")
            sys.stderr.flush()
