"""A trace (fenceline.trace's Chrome trace-event JSON) drawn as a PNG timeline, for a page or a
bug report where no browser opens it: one row per track, each frame as an outlined slice with
its stages coloured inside, over a window of a few frames (``fenceline trace --png``)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from PIL import Image, ImageDraw, ImageFont

COLOURS = {
    "wait for input": (242, 177, 52),
    "model": (66, 133, 244),
    "signal": (52, 168, 83),
    "reply": (171, 71, 188),
    "enqueue": (0, 150, 136),
    "GPU": (234, 67, 53),
}
WIDTH, ROW, LEFT, TOP = 1400, 46, 260, 56


def window(doc: dict[str, Any], frames: int = 6) -> tuple[float, float]:
    """``frames`` consecutive frames of the first row, a quarter of the way into the trace
    (past the start of the recording): (start, end) in microseconds."""
    slices = sorted((e for e in doc["traceEvents"] if e.get("cat") == "frame"),
                    key=lambda e: (e["tid"], e["ts"]))
    if not slices:
        return 0.0, 1000.0
    first_row = [e for e in slices if e["tid"] == slices[0]["tid"]]
    i = min(len(first_row) // 4, max(0, len(first_row) - frames))
    chosen = first_row[i:i + frames]
    start = chosen[0]["ts"]
    end = max(e["ts"] + max(e["dur"], e["args"].get("total_us", 0)) for e in chosen)
    pad = (end - start) * 0.02
    return start - pad, end + pad


def draw(doc: dict[str, Any], path: Path, span: tuple[float, float] | None = None,
         title: str = "") -> None:
    """Writes the PNG; ``span``: the window in microseconds (default :func:`window`)."""
    start, end = span or window(doc)
    names = {e["tid"]: e["args"]["name"] for e in doc["traceEvents"]
             if e.get("ph") == "M" and e.get("name") == "thread_name"}
    rows = sorted(names)
    height = TOP + ROW * max(1, len(rows)) + 70
    img = Image.new("RGB", (WIDTH, height), "white")
    d = ImageDraw.Draw(img)
    font = ImageFont.load_default(size=13)
    small = ImageFont.load_default(size=11)
    scale = (WIDTH - LEFT - 20) / max(end - start, 1e-9)

    def x(t: float) -> float:
        return LEFT + (t - start) * scale

    d.text((10, 8), title or "fenceline trace", fill="black", font=font)
    # Time axis: about eight ticks at a round step.
    span_us = end - start
    step = next(s for s in (1, 2, 5, 10, 20, 50, 100, 200, 500, 1000, 2000, 5000, 10_000,
                            20_000, 50_000, 100_000, 1e9) if span_us / s <= 10)
    t = start
    axis_y = TOP + ROW * len(rows) + 8
    while t < end:
        d.line([(x(t), TOP - 6), (x(t), axis_y)], fill=(225, 225, 225))
        d.text((x(t) - 12, axis_y + 4), f"{(t - start):.0f} us", fill=(90, 90, 90), font=small)
        t += step
    for i, tid in enumerate(rows):
        y = TOP + i * ROW
        d.text((10, y + ROW / 2 - 8), names[tid][:34], fill="black", font=font)
        d.line([(LEFT, y + ROW - 4), (WIDTH - 20, y + ROW - 4)], fill=(200, 200, 200))
    for e in doc["traceEvents"]:
        if e.get("ph") != "X" or e["tid"] not in rows:
            continue
        a, b = e["ts"], e["ts"] + e["dur"]
        if b < start or a > end:
            continue
        y = TOP + rows.index(e["tid"]) * ROW
        x0, x1 = max(x(a), LEFT), min(x(b), WIDTH - 20)
        if e["cat"] == "frame":
            d.rectangle([x0, y + 4, max(x1, x0 + 1), y + ROW - 8], outline=(60, 60, 60))
            if x1 - x0 > 60:
                d.text((x0 + 3, y + 5), e["name"], fill=(60, 60, 60), font=small)
        else:
            colour = COLOURS.get(e["name"], (120, 120, 120))
            d.rectangle([x0, y + 19, max(x1, x0 + 1), y + ROW - 10], fill=colour)
    lx = LEFT
    ly = height - 24
    for name, colour in COLOURS.items():
        d.rectangle([lx, ly, lx + 14, ly + 12], fill=colour)
        d.text((lx + 19, ly - 1), name, fill="black", font=small)
        lx += 40 + int(d.textlength(name, font=small))
    lx = _legend_frames(d, lx, ly, small)
    img.save(path)


def _legend_frames(d: ImageDraw.ImageDraw, lx: int, ly: int, font: Any) -> int:
    """The legend's last two entries, after the stages at ``lx``: a frame's outline, and the
    gap between two frames drawn as it looks in the rows (the end of one outline, the start of
    the next, a grey span across the white between), so neither is taken for the other."""
    outline, grey = (60, 60, 60), (150, 150, 150)
    d.rectangle([lx, ly, lx + 14, ly + 12], outline=outline)
    d.text((lx + 19, ly - 1), "a frame in the service", fill="black", font=font)
    lx += 40 + int(d.textlength("a frame in the service", font=font))
    d.line([(lx, ly), (lx + 4, ly), (lx + 4, ly + 12), (lx, ly + 12)], fill=outline)
    d.line([(lx + 30, ly), (lx + 26, ly), (lx + 26, ly + 12), (lx + 30, ly + 12)], fill=outline)
    mid = ly + 6
    d.line([(lx + 7, mid), (lx + 23, mid)], fill=grey, width=2)
    d.polygon([(lx + 6, mid), (lx + 10, mid - 3), (lx + 10, mid + 3)], fill=grey)
    d.polygon([(lx + 24, mid), (lx + 20, mid - 3), (lx + 20, mid + 3)], fill=grey)
    text = "between frames (the white gap): the renderer and the socket"
    d.text((lx + 35, ly - 1), text, fill="black", font=font)
    return lx + 35 + int(d.textlength(text, font=font))
