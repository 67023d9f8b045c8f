"""What a run prints and writes: the table (grouped by scenario, with ratios against the floor
and against Triton's system shared memory in the same scenario), the goals, and the JSON
document."""

from __future__ import annotations

import json
import os
import platform
import time
from collections.abc import Callable
from importlib import metadata
from pathlib import Path
from typing import Any

from fenceline.bench.stats import OUTSIDE, Row, fmt_us
from fenceline.errors import InvalidArgument
from fenceline.stats import percentile

FLOOR = "in-process"
TRITON = "triton-shm"


def _by_group(rows: list[Row]) -> dict[tuple[str, str, int, str], dict[str, Row]]:
    out: dict[tuple[str, str, int, str], dict[str, Row]] = {}
    for r in rows:
        out.setdefault(r.group, {})[r.transport] = r
    return out


def ratios(rows: list[Row]) -> dict[int, dict[str, float | None]]:
    """Per row (by id): p50 over the floor's p50, and Triton system-shm's p50 over the row's
    (how many times faster than Triton) in the same scenario."""
    groups = _by_group(rows)
    out = {}
    for r in rows:
        g = groups[r.group]
        floor, triton = g.get(FLOOR), g.get(TRITON)
        out[id(r)] = {
            "x_floor": r.p50_us / floor.p50_us if floor and floor.p50_us > 0 else None,
            "x_triton_shm": triton.p50_us / r.p50_us if triton and r.p50_us > 0 else None,
        }
    return out


def table(rows: list[Row]) -> str:
    rs = ratios(rows)
    head = (f"  {'transport':<18} {'n':>6} {'p50':>11} {'p99':>11} {'mean':>11} {'frames/s':>9} "
            f"{'x floor':>8} {'vs triton':>9} {'cpu/frame':>11} {'renderer+service':>17} "
            f"{'outputs':>8}")
    lines: list[str] = []
    for members in _by_group(rows).values():
        lines += ["", next(iter(members.values())).scenario_label, head, "  " + "-" * (len(head) - 2)]
        for r in members.values():
            x = rs[id(r)]
            floor, triton = _x(x["x_floor"]), _x(x["x_triton_shm"])
            fps = f"{r.throughput_fps:9.0f}" if r.throughput_fps else "-"
            cpu = fmt_us(r.cpu_per_frame_us) if r.cpu_per_frame_us is not None else "-"
            parts = "-"
            if r.renderer_cpu_us is not None:
                service = "-" if r.service_cpu_us is None else f"{r.service_cpu_us:.0f}"
                parts = f"{r.renderer_cpu_us:.0f} + {service} us"
            lines.append(
                f"  {r.transport:<18} {len(r.samples_s):>6} {fmt_us(r.p50_us):>11} "
                f"{fmt_us(r.p99_us):>11} {fmt_us(r.mean_us):>11} {fps:>9} {floor:>8} "
                f"{triton:>9} {cpu:>11} {parts:>17} {r.check or '-':>8}"
                + (f"  {r.note}" if r.note else "")
            )
        for r in members.values():
            stages = r.stages_p50_us()
            if stages:
                inside = stages.pop("frame", None)
                outside = stages.pop(OUTSIDE, None)
                parts = ", ".join(f"{k} {v:.1f}" for k, v in stages.items())
                lines.append(
                    f"  {r.transport}, the service's side (its trace, p50): "
                    + (f"{inside:.1f} us a frame ({parts})" if inside is not None else parts)
                    + (f"; outside the service (the renderer, the socket, the wakeups: each "
                       f"frame's time less its span in the service) {outside:.1f} us"
                       if outside is not None else ""))
            if r.waits:
                lines.append(f"  {r.transport}, {waits_text(r.waits, len(r.samples_s))}")
    lines += ["", "x floor: p50 over the in-process p50 of the same scenario (1.00x is the floor); "
              "vs triton: Triton system-shm p50 over this p50 (times faster than Triton).",
              "cpu/frame: user+sys of renderer and server processes per frame (renderer+service: "
              "the two parts; a service that spins shows in its part); outputs: equal to a "
              "direct onnxruntime run."]
    return "\n".join(lines)


def waits_text(w: dict[str, int], frames: int) -> str:
    """The Python client's waits of a row (IpcClient.waits), in words."""
    n = w.get("spun", 0) + w.get("napped", 0) + w.get("blocked", 0)
    text = (f"the renderer's waits: {n:,} over {frames:,} frames: {w.get('napped', 0):,} napped "
            f"({w.get('nap_missed', 0):,} of them blocked after), {w.get('blocked', 0):,} blocked "
            f"at once, {w.get('spun', 0):,} spun first")
    if w.get("stayed"):
        text += (f"; {w['stayed']:,} stayed runnable first ({w.get('stayed_answered', 0):,} "
                 "answered meanwhile)")
    if "page_posted" in w:  # RUNs sent ahead (send_run)
        text += (f"; {w['page_posted']:,} RUNs posted on the run page, {w.get('page_answered', 0):,}"
                 " answered there")
    return text


def _find(rows: list[Row], group: tuple[str, str, int, str], transport: str) -> Row | None:
    return _by_group(rows).get(group, {}).get(transport)


def goals(rows: list[Row], real_size: str | None = None) -> list[dict[str, Any]]:
    """The issue's goals, as ratios of figures measured in this run. ``met`` is None when a
    row it needs was not measured (``missing`` says which)."""
    one = ("FP32", 1, "sync")
    out: list[dict[str, Any]] = []

    def goal(text: str, size: str, a: str, b: str, kind: str, target: float) -> None:
        ra, rb = _find(rows, (size, *one), a), _find(rows, (size, *one), b)
        entry: dict[str, Any] = {"goal": text, "target": target}
        if ra is None or rb is None or ra.p50_us <= 0 or rb.p50_us <= 0:
            entry.update(value=None, met=None,
                         missing=[f"{size} {t}" for t, r in ((a, ra), (b, rb)) if r is None])
        elif kind == "within":
            v = ra.p50_us / rb.p50_us
            entry.update(value=round(v, 3), met=v <= target)
        elif kind == "ahead":
            v = rb.p50_us / ra.p50_us
            entry.update(value=round(v, 1), met=v >= target)
        else:  # "within_us"
            v = ra.p50_us - rb.p50_us
            entry.update(value=round(v, 1), met=v <= target)
        out.append(entry)

    goal("IPC 1080p within 1.2x of the in-process floor", "1080p", "ipc", FLOOR, "within", 1.2)
    goal("IPC 64x64 within 40 us of the in-process floor", "64x64", "ipc", FLOOR, "within_us",
         40.0)
    goal("IPC 1080p at least 10x ahead of Triton system shm", "1080p", "ipc", TRITON, "ahead",
         10.0)
    goal("IPC 64x64 at least 50x ahead of Triton system shm", "64x64", "ipc", TRITON, "ahead",
         50.0)
    if real_size is not None:
        goal(f"real model ({real_size}) through IPC within 1.05x of the floor", real_size, "ipc",
             FLOOR, "within", 1.05)
    goal("streaming with adaptive waits 64x64 within 15 us of the in-process floor", "64x64",
         "streaming", FLOOR, "within_us", 15.0)
    return out + scaling_goals(rows)


def scaling_goals(rows: list[Row]) -> list[dict[str, Any]]:
    """Frames in flight and several renderers (issue #20): throughput with two frames in flight
    against one at a time in the same rounds, four renderers and the 720p frame
    (:func:`frame_move_goal`) against their floors."""
    out: list[dict[str, Any]] = []

    def goal(text: str, a: tuple[tuple[str, str, int, str], str],
             b: tuple[tuple[str, str, int, str], str], kind: str, target: float) -> None:
        ra, rb = _find(rows, *a), _find(rows, *b)
        entry: dict[str, Any] = {"goal": text, "target": target}
        if ra is None or rb is None or ra.p50_us <= 0 or rb.p50_us <= 0:
            entry.update(value=None, met=None, missing=[
                f"{g[0][0]} {g[0][2]}r {g[0][3]} {g[1]}" for g, r in ((a, ra), (b, rb))
                if r is None])
        elif kind == "faster":  # throughput of a over throughput of b
            v = (ra.throughput_fps or 0.0) / (rb.throughput_fps or float("inf"))
            entry.update(value=round(v, 3), met=v >= target)
        else:  # p50 of a over p50 of b
            v = ra.p50_us / rb.p50_us
            entry.update(value=round(v, 3), met=v <= target)
        out.append(entry)

    # Both rows of the pipelined scenario, measured in the same rounds: on 2 CPUs a sync
    # scenario's row, measured minutes before, moved with the machine as much as with the
    # frames in flight (docs/benchmarks.md).
    pipelined = ("64x64", "FP32", 1, "pipelined")
    goal("IPC 64x64 with 2 frames in flight: at least 1.2x the frames/s of one at a time "
         "(measured in the same rounds)", (pipelined, "ipc"), (pipelined, "ipc-one"), "faster",
         1.2)
    goal("IPC 1080p, 4 renderers sync, within 1.25x of the in-process floor",
         (("1080p", "FP32", 4, "sync"), "ipc"), (("1080p", "FP32", 4, "sync"), FLOOR),
         "within", 1.25)
    return [*out, frame_move_goal(rows)]


# Issue #20's 720p goal: IPC within 1.3x of the in-process floor, or within 1.1x of the floor
# whose frame another core wrote, since then what remains is the frame's move between cores.
FRAME_MOVE = (("ipc", FLOOR, 1.3), ("ipc-written", "in-process-cross-core", 1.1))


def frame_move_goal(rows: list[Row], pairs: tuple[tuple[str, str, float], ...] = FRAME_MOVE,
                    prefix: str = "") -> dict[str, Any]:
    """One goal over two pairs of 720p rows (:data:`FRAME_MOVE`): met when either ratio is
    within its target; ``value`` shows both ratios ("-" for a pair not measured), ``ratios``
    keeps them as numbers; ``met`` is None only when neither pair was measured."""
    one = ("720p", "FP32", 1, "sync")
    ratios: list[float | None] = []
    missing: list[str] = []
    for a, b, _ in pairs:
        ra, rb = _find(rows, one, a), _find(rows, one, b)
        if ra is None or rb is None or ra.p50_us <= 0 or rb.p50_us <= 0:
            ratios.append(None)
            missing += [f"720p 1r sync {t}" for t, r in ((a, ra), (b, rb)) if r is None]
        else:
            ratios.append(ra.p50_us / rb.p50_us)
    held = [v <= target for v, (_, _, target) in zip(ratios, pairs, strict=True)
            if v is not None]
    entry: dict[str, Any] = {
        "goal": f"{prefix}IPC 720p within {pairs[0][2]}x of the in-process floor, or (inputs "
                f"written each frame) within {pairs[1][2]}x of the cross-core floor",
        "target": " / ".join(str(t) for _, _, t in pairs),
        "value": None if not held else " / ".join("-" if v is None else f"{v:.2f}"
                                                  for v in ratios),
        "ratios": {"in_process_floor": None if ratios[0] is None else round(ratios[0], 3),
                   "cross_core_floor": None if ratios[1] is None else round(ratios[1], 3)},
        "met": any(held) if held else None,
    }
    if missing:
        entry["missing"] = missing
    return entry


# Issue #31's goals, the same on every machine (the 2-CPU CI VM and 16-core hosts alike):
# ratios in one run. The 720p one is one goal over two pairs, as issue #20's.
MACHINE_FRAME_MOVE = (("ipc", FLOOR, 1.15), ("ipc-written", "in-process-cross-core", 1.1))
MACHINE = "[#31] "


def machine_goals(rows: list[Row]) -> list[dict[str, Any]]:
    """Issue #31's goals for the machine the bench runs on (``machine.cpus`` in the JSON says
    which shape it was): 720p, 1080p, 4K and four renderers at 1080p against the floor; 64x64
    over the floor in microseconds, for the Python client (``ipc``) and the C client."""
    out: list[dict[str, Any]] = []

    def goal(text: str, group: tuple[str, str, int, str], a: str, kind: str,
             target: float) -> None:
        ra, rb = _find(rows, group, a), _find(rows, group, FLOOR)
        entry: dict[str, Any] = {"goal": MACHINE + text, "target": target}
        if ra is None or rb is None or ra.p50_us <= 0 or rb.p50_us <= 0:
            entry.update(value=None, met=None, missing=[
                f"{group[0]} {group[2]}r {group[3]} {t}" for t, r in ((a, ra), (FLOOR, rb))
                if r is None])
        elif kind == "within":
            v = ra.p50_us / rb.p50_us
            entry.update(value=round(v, 3), met=v <= target)
        else:  # "within_us"
            v = ra.p50_us - rb.p50_us
            entry.update(value=round(v, 1), met=v <= target)
        out.append(entry)

    def one(size: str, renderers: int = 1, mode: str = "sync") -> tuple[str, str, int, str]:
        return (size, "FP32", renderers, mode)

    out.append(frame_move_goal(rows, MACHINE_FRAME_MOVE, MACHINE))
    goal("IPC 1080p within 1.1x of the in-process floor", one("1080p"), "ipc", "within", 1.1)
    # The 4K rows measured in turn, 8 frames each (scenarios.ALTERNATING); the sync scenario's
    # ratio, whose rows each saw their own seconds of the machine, is shown beside it.
    goal("IPC 4K within 1.05x of the in-process floor (in turn, 8 frames each)",
         one("4K", mode="alternating"), "ipc", "within", 1.05)
    sync_4k = (_find(rows, one("4K"), "ipc"), _find(rows, one("4K"), FLOOR))
    if sync_4k[0] is not None and sync_4k[1] is not None and sync_4k[1].p50_us > 0:
        out[-1]["beside"] = {"4K sync rows": round(sync_4k[0].p50_us / sync_4k[1].p50_us, 3)}
    goal("IPC 1080p, 4 renderers sync, within 1.2x of the in-process floor", one("1080p", 4),
         "ipc", "within", 1.2)
    goal("IPC 64x64 (Python client) within 15 us of the in-process floor", one("64x64"), "ipc",
         "within_us", 15.0)
    goal("IPC 64x64 (C client) within 8 us of the in-process floor", one("64x64"), "c-client",
         "within_us", 8.0)
    return out


def confine(cpus: int) -> list[int]:
    """Confines this process, and every process it starts from now on (the service, the
    renderers, the floors), to the first ``cpus`` CPUs it may use: ``--cpus`` shows a small
    machine's shape on a large one. Returns them."""
    allowed = sorted(os.sched_getaffinity(0))
    if not 1 <= cpus <= len(allowed):
        raise InvalidArgument(f"--cpus {cpus}: this process may use 1 to {len(allowed)} CPUs "
                              f"({', '.join(map(str, allowed))})")
    chosen = allowed[:cpus]
    os.sched_setaffinity(0, chosen)
    return chosen


def floor_goals(rows: list[Row], floors: dict[str, Any]) -> list[dict[str, Any]]:
    """Request-per-frame IPC against the machine's socket round trip between two processes
    pinned to two different CPUs (``uds_round_trip``), plus the in-process run, measured in the
    same run (docs/streaming.md)."""
    one = ("64x64", "FP32", 1, "sync")
    ipc, floor = _find(rows, one, "ipc"), _find(rows, one, FLOOR)
    fl = floors if isinstance(floors, dict) else {}
    uds = fl.get("uds_round_trip")
    entry: dict[str, Any] = {
        "goal": "request-per-frame IPC 64x64 within 1.5x of the two-CPU socket floor + "
                "in-process",
        "target": 1.5,
    }
    if ipc is None or floor is None or not uds:
        why = fl.get("error") or fl.get("skipped", {}).get("uds_round_trip") or "not run"
        missing = [f"64x64 {t}" for t, r in (("ipc", ipc), (FLOOR, floor)) if r is None]
        if not uds:
            missing.append(f"the two-CPU socket floor ({why})")
        entry.update(value=None, met=None, missing=missing)
    else:
        v = ipc.p50_us / (uds["p50_us"] + floor.p50_us)
        entry.update(value=round(v, 2), met=v <= 1.5)
    return [entry]


def format_goals(results: list[dict[str, Any]]) -> str:
    cpus = len(os.sched_getaffinity(0))
    lines = [f"goals (ratios of p50 in this run; [#31]: the goals for this machine, {cpus} "
             "CPUs):"]
    for g in results:
        if g["met"] is None:
            lines.append(f"  {'-':>6}  {g['goal']}: not measured ({', '.join(g['missing'])})")
        else:
            beside = "".join(f" ({k}: {v})" for k, v in g.get("beside", {}).items())
            lines.append(f"  {'met' if g['met'] else 'MISSED':>6}  {g['goal']}: {g['value']}"
                         + beside)
    return "\n".join(lines)


def _version(dist: str) -> str | None:
    try:
        return metadata.version(dist)
    except metadata.PackageNotFoundError:
        return None


def machine() -> dict[str, Any]:
    model = ""
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    model = line.split(":", 1)[1].strip()
                    break
    except OSError:
        pass
    return {
        # The CPUs the bench may use (fewer than the machine's under --cpus or a cgroup).
        "arch": platform.machine(), "cpu": model, "cpus": len(os.sched_getaffinity(0)),
        "cpus_online": os.cpu_count(), "cpu_list": sorted(os.sched_getaffinity(0)),
        "system": platform.platform(), "python": platform.python_version(),
        "loadavg": [round(v, 2) for v in os.getloadavg()],
    }


def document(rows: list[Row], goal_results: list[dict[str, Any]], **extra: Any
             ) -> dict[str, Any]:
    rs = ratios(rows)
    out_rows = []
    for r in rows:
        d = r.summary()
        d.update(
            {k: (round(v, 4) if v is not None else None) for k, v in rs[id(r)].items()},
            p90_us=percentile(r.samples_s, 0.90) * 1e6, p1_us=percentile(r.samples_s, 0.01) * 1e6,
            scenario=r.scenario_label,
        )
        out_rows.append(d)
    return {
        "schema": 1,
        "date": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "machine": machine(),
        "versions": {"fenceline": _version("fenceline-inference"),  # the distribution's name
                     **{d: _version(d) for d in ("onnxruntime", "numpy", "tritonclient",
                                                 "nvidia-pytriton")}},
        **extra,
        "rows": out_rows,
        "goals": goal_results,
    }


def write_outputs(doc: dict[str, Any], json_path: Path | None, plot_path: Path | None,
                  draw: Callable[[Path], object], markdown_path: Path | None = None) -> None:
    """Writes what the command line asked for (JSON, Markdown tables, the plot ``draw`` makes),
    each into a folder made for it, and says where."""
    for path, what, write in (
        (json_path, "results", lambda p: p.write_text(json.dumps(doc, indent=2))),
        (markdown_path, "tables", lambda p: p.write_text(markdown(doc))),
        (plot_path, "plot", draw),
    ):
        if path is not None:
            path.parent.mkdir(parents=True, exist_ok=True)
            write(path)
            print(f"{what} written to {path}", flush=True)


def _x(v: float | None) -> str:
    if v is None:
        return "-"
    return f"{v:.2f}x" if v < 10 else (f"{v:.1f}x" if v < 100 else f"{v:.0f}x")


def _fmt(us: float | None) -> str:
    if us is None:
        return "-"
    if us >= 1e6:
        return f"{us / 1e6:.2f} s"
    if us >= 1000:
        return f"{us / 1e3:.1f} ms" if us < 100_000 else f"{us / 1e3:.0f} ms"
    return f"{us:.0f} us" if us >= 10 else f"{us:.1f} us"


def _grid(cell: dict[tuple[str, str], dict[str, Any]], transports: list[str], sizes: list[str],
          text: Callable[[str, dict[str, Any]], str]) -> list[str]:
    """A markdown table: a row per transport, a column per size, each cell ``text(transport,
    row)`` of its row, empty where there is none."""
    out = ["| transport | " + " | ".join(sizes) + " |", "|---" * (len(sizes) + 1) + "|"]
    for t in transports:
        cells = [text(t, r) if (r := cell.get((t, s))) is not None else "" for s in sizes]
        out.append(f"| {t} | " + " | ".join(cells) + " |")
    return out


def markdown(doc: dict[str, Any]) -> str:
    """The run as Markdown tables (docs/benchmarks.md shows one)."""
    rows = doc["rows"]
    single = [r for r in rows if r["renderers"] == 1 and r["mode"] == "sync"
              and r["datatype"] == "FP32"]
    sizes = list(dict.fromkeys(r["size"] for r in single))
    transports = list(dict.fromkeys(r["transport"] for r in single))
    cell = {(r["transport"], r["size"]): r for r in single}
    m = doc["machine"]
    out = [f"Measured {doc['date']} on {m['cpu'] or m['arch']} ({m['cpus']} CPUs, load average "
           f"{doc.get('loadavg_start', m['loadavg'])[0]} at the start), "
           f"{'with' if doc.get('peers') else 'without'} the Triton peer"
           + (f" (Triton {doc['servers']['tritonserver']})" if doc.get("servers", {}).get(
               "tritonserver") else "") + f"; the run took {doc.get('duration_s', 0):.0f} s.", "",
           "One renderer, sync, FP32: p50 (p99) per frame, and p50 over the in-process floor.", ""]

    def latency(t: str, r: dict[str, Any]) -> str:
        ratio = f", {_x(r['x_floor'])}" if r["x_floor"] is not None and t != FLOOR else ""
        return f"{_fmt(r['p50_us'])} ({_fmt(r['p99_us'])}){ratio}"

    def cpu(t: str, r: dict[str, Any]) -> str:
        if r.get("renderer_cpu_us") is None:
            return ""
        service = r.get("service_cpu_us")
        return (f"{_fmt(r['renderer_cpu_us'])} + {_fmt(service)}"
                if service is not None else _fmt(r["renderer_cpu_us"]))

    out += _grid(cell, transports, sizes, latency)
    out += ["", "CPU per frame of the same rows, renderer + service (user + sys; a part that "
            "spins shows here).", ""]
    out += _grid(cell, transports, sizes, cpu)
    others = [r for r in rows if r not in single]
    if others:
        out += ["", "Other datatypes, several renderers, pipelined (two frames in flight per "
                "renderer): p50 per frame and frames/s over all renderers.", "",
                "| scenario | transport | p50 | p99 | frames/s | x floor | vs Triton shm |",
                "|---|---|---|---|---|---|---|"]
        for r in others:
            xf, xt = _x(r["x_floor"]), _x(r["x_triton_shm"])
            fps = f"{r['throughput_fps']:.0f}" if r["throughput_fps"] else "-"
            out.append(f"| {r['scenario']} | {r['transport']} | {_fmt(r['p50_us'])} | "
                       f"{_fmt(r['p99_us'])} | {fps} | {xf} | {xt} |")
    if doc.get("skipped"):
        out += ["", "Not measured in this run: " + "; ".join(
            f"{k} ({v})" for k, v in doc["skipped"].items()) + "."]
    out += ["", "| goal | value | met |", "|---|---|---|"]
    for g in doc["goals"]:
        met = "not measured" if g["met"] is None else ("yes" if g["met"] else "**no**")
        out.append(f"| {g['goal']} | {g['value'] if g['value'] is not None else '-'} | {met} |")
    return "\n".join(out) + "\n"
