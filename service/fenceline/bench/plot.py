"""The PNG a person looks at instead of reading numbers: per frame size, the latency
distribution of every transport (one renderer, sync, FP32) on a log scale, and the frames per
second of the concurrent and pipelined scenarios. matplotlib is a ``[bench]`` extra."""

from __future__ import annotations

from pathlib import Path

from fenceline.bench.stats import Row
from fenceline.errors import Unsupported
from fenceline.stats import percentile

COLORS = {
    "in-process": "#4d4d4d", "ipc": "#1b7837", "streaming": "#5aae61", "c-client": "#a6dba0",
    "streaming-blocking": "#b8e186",
    "http": "#2166ac", "kserve-binary": "#92c5de", "system-shm": "#4393c3",
    "triton-binary": "#d6604d", "triton-shm": "#b2182b",
}


def _color(transport: str) -> str:
    return COLORS.get(transport, "#8c6bb1")


def plot(rows: list[Row], path: Path, title: str) -> Path:
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
        from matplotlib.ticker import FuncFormatter, LogLocator, NullFormatter
    except ImportError:
        raise Unsupported("--plot needs matplotlib: pip install '.[bench]'") from None

    single = [r for r in rows if r.renderers == 1 and r.mode == "sync" and r.datatype == "FP32"
              and r.samples_s]
    sizes = list(dict.fromkeys(r.size for r in single))
    multi = [r for r in rows if (r.renderers > 1 or r.mode != "sync") and r.throughput_fps]
    panels = len(sizes) + (1 if multi else 0)
    if panels == 0:
        raise Unsupported("nothing to plot: no row was measured")
    cols = min(3, panels)
    rows_n = -(-panels // cols)
    fig, axes = plt.subplots(rows_n, cols, figsize=(5.2 * cols, 3.4 * rows_n), squeeze=False)
    flat = [ax for line in axes for ax in line]
    for ax, size in zip(flat, sizes, strict=False):
        members = [r for r in single if r.size == size]
        data = [[s * 1e3 for s in r.samples_s] for r in members]
        labels = [r.transport for r in members]
        box = ax.boxplot(data, vert=False, whis=(1, 99), showfliers=False, widths=0.6,
                         patch_artist=True, medianprops={"color": "white", "linewidth": 1.5})
        for patch, r in zip(box["boxes"], members, strict=True):
            patch.set_facecolor(_color(r.transport))
            patch.set_edgecolor(_color(r.transport))
        ax.set_yticks(range(1, len(labels) + 1), labels, fontsize=8)
        ax.invert_yaxis()
        ax.set_xscale("log")
        # The median as a dot too: a row of one or two frames has no visible box.
        ax.scatter([percentile(r.samples_s, 0.5) * 1e3 for r in members],
                   range(1, len(members) + 1), s=14, zorder=3,
                   c=[_color(r.transport) for r in members], edgecolors="black", linewidths=0.5)
        ax.set_title(size, fontsize=10, loc="left")
        ax.set_xlabel("latency per frame, ms (box p25-p75, whiskers p1-p99)", fontsize=7)
        ax.grid(axis="x", which="both", alpha=0.25)
        ax.tick_params(axis="x", labelsize=7)
        for k, r in enumerate(members, start=1):
            p50 = percentile(r.samples_s, 0.5) * 1e3
            ax.annotate(_ms(p50), (percentile(r.samples_s, 0.99) * 1e3, k), fontsize=6.5,
                        xytext=(4, -2), textcoords="offset points", va="center")
        lo, hi = ax.get_xlim()
        ax.set_xlim(lo, hi * 4)  # room for the p50 labels
        ax.xaxis.set_major_locator(LogLocator(base=10, subs=(1, 2, 5) if hi / lo < 100 else (1,)))
        ax.xaxis.set_major_formatter(FuncFormatter(lambda v, _: f"{v:g}"))
        ax.xaxis.set_minor_formatter(NullFormatter())
    if multi:
        ax = flat[len(sizes)]
        labels = [f"{r.size} r{r.renderers} {r.mode[:4]} {r.transport}" for r in multi]
        ax.barh(range(len(multi)), [r.throughput_fps or 0 for r in multi],
                color=[_color(r.transport) for r in multi])
        ax.set_yticks(range(len(multi)), labels, fontsize=6.5)
        ax.invert_yaxis()
        ax.set_xscale("log")
        ax.set_title("concurrent and pipelined: frames/s, all renderers", fontsize=10, loc="left")
        ax.xaxis.set_major_formatter(FuncFormatter(lambda v, _: f"{v:g}"))
        ax.xaxis.set_minor_formatter(NullFormatter())
        ax.grid(axis="x", which="both", alpha=0.25)
        ax.tick_params(axis="x", labelsize=7)
    for ax in flat[panels:]:
        ax.axis("off")
    fig.suptitle(title, fontsize=10)
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110)
    plt.close(fig)
    _shrink(path)
    return path


def _shrink(path: Path) -> None:
    """A palette PNG: a third of the size (the plot goes into the repository's docs)."""
    from PIL import Image

    with Image.open(path) as im:
        small = im.convert("RGB").quantize(colors=96)
    small.save(path, optimize=True)


def _ms(ms: float) -> str:
    if ms < 1:
        return f"p50 {ms * 1e3:.0f} us"
    return f"p50 {ms:.1f} ms" if ms < 100 else f"p50 {ms:.0f} ms"
