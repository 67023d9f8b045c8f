"""Summaries and the terminal table of a benchmark run."""

from __future__ import annotations

import shutil
import statistics
import sys
import time
from collections.abc import Iterable
from dataclasses import asdict, dataclass, field, replace
from typing import Any

from fenceline.stats import percentile


def add_counts(counts: Iterable[dict[str, int]]) -> dict[str, int]:
    """Counts by name, summed."""
    out: dict[str, int] = {}
    for c in counts:
        for k, v in c.items():
            out[k] = out.get(k, 0) + v
    return out


# The stage of a traced row that is each frame's time outside the service (registry.trace_stages).
OUTSIDE = "outside"


@dataclass
class Row:
    transport: str
    size: str
    samples_s: list[float] = field(repr=False)
    note: str = ""
    cpu_per_frame_us: float | None = None
    datatype: str = "FP32"
    renderers: int = 1
    mode: str = "sync"  # or "pipelined" (two frames in flight per renderer), "alternating"
    model: str = ""
    throughput_fps: float | None = None
    check: str = ""  # "equal": outputs equal to a direct onnxruntime run; "differs"; "" unchecked
    # The two parts of cpu_per_frame_us: the renderers' processes, and the server's process
    # tree (None where the row has no server: the floor).
    renderer_cpu_us: float | None = None
    service_cpu_us: float | None = None
    # A traced row's service side, from its trace (docs/tracing.md): each frame's span in the
    # service ("frame") and its stages ("model", "reply", ...), in microseconds.
    stages_us: dict[str, list[float]] = field(default_factory=dict, repr=False)
    # The renderers' waits for the service, counted by way (IpcClient.waits) over the timed
    # window: the Python client's rows only.
    waits: dict[str, int] = field(default_factory=dict)

    @property
    def scenario_label(self) -> str:
        who = "1 renderer" if self.renderers == 1 else f"{self.renderers} renderers"
        return f"{self.size} {self.datatype}, {who}, {self.mode}"

    @property
    def group(self) -> tuple[str, str, int, str]:
        """Rows of one group ran the same scenario; ratios compare within a group."""
        return (self.size, self.datatype, self.renderers, self.mode)

    @property
    def p50_us(self) -> float:
        return percentile(self.samples_s, 0.50) * 1e6

    @property
    def p99_us(self) -> float:
        return percentile(self.samples_s, 0.99) * 1e6

    @property
    def mean_us(self) -> float:
        return statistics.fmean(self.samples_s) * 1e6 if self.samples_s else 0.0

    def merged(self, other: Row) -> Row:
        """This row and a later round of the same measurement, as one row."""
        n1, n2 = len(self.samples_s), len(other.samples_s)
        walls = [n / fps for n, fps in ((n1, self.throughput_fps), (n2, other.throughput_fps))
                 if fps]
        def weighted(a: float | None, b: float | None) -> float | None:
            return None if a is None or b is None or not n1 + n2 else (a * n1 + b * n2) / (n1 + n2)

        cpu = weighted(self.cpu_per_frame_us, other.cpu_per_frame_us)
        checks = {self.check, other.check}
        check = "differs" if "differs" in checks else ("equal" if checks == {"equal"} else "")
        return replace(self, samples_s=self.samples_s + other.samples_s, cpu_per_frame_us=cpu,
                       throughput_fps=(n1 + n2) / sum(walls) if len(walls) == 2 else None,
                       check=check,
                       renderer_cpu_us=weighted(self.renderer_cpu_us, other.renderer_cpu_us),
                       service_cpu_us=weighted(self.service_cpu_us, other.service_cpu_us),
                       stages_us={k: self.stages_us.get(k, []) + other.stages_us.get(k, [])
                                  for k in {*self.stages_us, *other.stages_us}},
                       waits=add_counts((self.waits, other.waits)))

    def stages_p50_us(self) -> dict[str, float]:
        """The p50 of each traced stage, the frame's whole span first (empty: not traced)."""
        order = sorted(self.stages_us, key=lambda k: (k != "frame", k))
        return {k: percentile(self.stages_us[k], 0.50) for k in order if self.stages_us[k]}

    def summary(self) -> dict[str, Any]:
        d = asdict(self)
        del d["samples_s"], d["stages_us"]
        if self.stages_us:
            d["service_stages_p50_us"] = {k: round(v, 2) for k, v in self.stages_p50_us().items()}
        d.update(n=len(self.samples_s), p50_us=self.p50_us, p99_us=self.p99_us, mean_us=self.mean_us)
        return d


def fmt_us(us: float) -> str:
    return f"{us / 1e3:8.2f} ms" if us >= 10_000 else f"{us:8.1f} us"


class Progress:
    """A one-line progress bar on stderr."""

    def __init__(self, total: int) -> None:
        self.total = max(total, 1)
        self.done = 0
        self.tty = sys.stderr.isatty()
        self.start = time.monotonic()
        self.width = max(60, min(shutil.get_terminal_size((100, 20)).columns - 1, 140))

    def step(self, label: str, n: int = 1) -> None:
        """Shows that ``label`` starts now (the bar counts the rows before it as done)."""
        bar_width = 24
        filled = int(bar_width * self.done / self.total)
        bar = "#" * filled + "." * (bar_width - filled)
        elapsed = time.monotonic() - self.start
        text = f"[{bar}] {self.done + 1}/{self.total} {elapsed:4.0f}s {label}"
        self.done += n
        if self.tty:
            sys.stderr.write("\r" + text[: self.width].ljust(self.width))
        else:
            sys.stderr.write(text + "\n")
        sys.stderr.flush()

    def note(self, text: str) -> None:
        """A line that stays, printed above the bar."""
        if self.tty:
            sys.stderr.write("\r" + " " * self.width + "\r")
        sys.stderr.write(text + "\n")
        sys.stderr.flush()

    def close(self) -> None:
        if self.tty:
            sys.stderr.write("\r" + " " * self.width + "\r")
            sys.stderr.flush()
