"""``fenceline bench --scaling 1,4,8,16``: combined frames/s of N renderers through IPC against
the in-process floor run by N threads, for each N, on one frame size (docs/benchmarks.md,
"Scaling"). No GPU. Each renderer is its own process with its own connection, session and
frame; the floor's N threads share one loaded model in one process, as the service's
connections share it. The two take turns, ``rounds`` times, so a change in the machine's load
touches both alike; every row's outputs are checked against a direct onnxruntime run."""

from __future__ import annotations

import contextlib
import importlib.util
import json
import os
import tempfile
import threading
import time
import urllib.error
import urllib.request
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from fenceline.bench import engine, report
from fenceline.bench.buffers import builtin_frame
from fenceline.bench.scenarios import MODELS, SIZES
from fenceline.cli.process import start_service, stop_service
from fenceline.cli.trace import credential, fetch_trace
from fenceline.errors import FencelineError, InvalidArgument, Unsupported
from fenceline.trace import DEFAULT_MAX_FRAMES, Limits, summary_line

_T = "fenceline.bench.transports"
DEFAULT_SIZE = "720p"
GOAL_RENDERERS, GOAL_SHARE = 8, 0.9  # issue #31: IPC keeps at least 90% of the floor's frames/s at 8
TRACE_S = 1.0  # each N's traced IPC run (after its timed rounds): where the frames' time goes


@dataclass
class Point:
    renderers: int
    transport: str  # "in-process" or "ipc"
    frames: int
    wall_s: float
    p50_us: float
    cpu_per_frame_us: float | None
    equal: bool
    server_cpu_per_frame_us: float | None = None  # the service's share of cpu_per_frame_us

    @property
    def fps(self) -> float:
        return self.frames / self.wall_s if self.wall_s > 0 else 0.0


def _merge(a: Point | None, b: Point) -> Point:
    if a is None:
        return b
    n = a.frames + b.frames

    def weighted(x: float | None, y: float | None) -> float | None:
        return None if x is None or y is None else (x * a.frames + y * b.frames) / n

    return Point(a.renderers, a.transport, n, a.wall_s + b.wall_s,
                 weighted(a.p50_us, b.p50_us) or 0.0,  # frame-weighted median of rounds
                 weighted(a.cpu_per_frame_us, b.cpu_per_frame_us), a.equal and b.equal,
                 weighted(a.server_cpu_per_frame_us, b.server_cpu_per_frame_us))


def parse_counts(text: str) -> list[int]:
    try:
        counts = [int(x) for x in text.split(",") if x.strip()]
    except ValueError:
        counts = []
    if not counts or any(c < 1 or c > 256 for c in counts):
        raise InvalidArgument(f"--scaling {text!r}: renderer counts are 1..256, comma-separated "
                              "(e.g. 1,4,8,16)")
    return sorted(set(counts))


def _repository(workdir: Path, model: str, path: Path, intra_op_threads: int) -> Path:
    """A one-model repository whose config.json sets the service's intra-op threads."""
    root = workdir / "models"
    (root / model / "1").mkdir(parents=True)
    (root / model / "1" / "model.onnx").symlink_to(path)
    (root / model / "config.json").write_text(json.dumps({"intra_op_threads": intra_op_threads}))
    return root


def run_scaling(counts: list[int], *, size: str = DEFAULT_SIZE, seconds: float = 10.0,
                rounds: int = 2, json_path: Path | None = None,
                plot_path: Path | None = None, intra_op_threads: int | None = None) -> int:
    """Measures and prints the table; returns 1 when a row failed or its outputs differ.
    ``intra_op_threads``: onnxruntime's intra-op threads per run on both sides (None: the
    model's default, a pool sized to the machine)."""
    if intra_op_threads is not None and not 0 <= intra_op_threads <= 1024:
        raise InvalidArgument("--intra-op-threads is 0 (one per core) .. 1024")
    if size not in SIZES:
        raise InvalidArgument(f"unknown size {size!r}; use one of {', '.join(SIZES)}")
    if plot_path is not None and importlib.util.find_spec("matplotlib") is None:
        raise Unsupported("--plot needs matplotlib: pip install '.[bench]'")
    model = MODELS[(size, "FP32")]
    path, sig, want = builtin_frame(model)
    loadavg = [round(v, 2) for v in os.getloadavg()]
    t_start = time.monotonic()
    threads = "default" if intra_op_threads is None else str(intra_op_threads)
    print(f"fenceline bench --scaling: {size}, renderers {','.join(map(str, counts))}, "
          f"intra-op threads {threads}, {os.cpu_count()} CPUs, load {loadavg[0]}", flush=True)
    budget = engine.Budget(iterations=10**9, warmup=20, seconds=seconds / rounds)
    got: dict[tuple[int, str], Point] = {}
    traced: dict[int, dict[str, Any] | None] = {}
    turns: dict[int, dict[str, int] | None] = {}
    failures: list[str] = []
    with tempfile.TemporaryDirectory(prefix="fenceline-scaling-") as tmp, \
            contextlib.ExitStack() as stack:
        if intra_op_threads is None:
            proc, url, sock = start_service([model], Path(tmp))
        else:
            repo_dir = _repository(Path(tmp), model, path, intra_op_threads)
            proc, url, sock = start_service([], Path(tmp),
                                            extra=("--model-repository", str(repo_dir)))
        stack.callback(stop_service, proc)
        floor_kwargs: dict[str, Any] = {"model_path": str(path)}
        if intra_op_threads is not None:
            floor_kwargs["intra_op_threads"] = intra_op_threads
        lanes = {
            "in-process": (f"{_T}:floor_lane", floor_kwargs, False, []),
            "ipc": (f"{_T}:ipc_lane", {"socket_path": str(sock), "model": model}, True,
                    [proc.pid]),
        }
        for n in counts:
            turns_before = _turns(url)
            for k in range(rounds):
                for name, (target, kwargs, processes, pids) in lanes.items():
                    if any(f.startswith(f"{n} {name}:") for f in failures):
                        continue
                    print(f"  {n:>3} renderer(s), {name}, round {k + 1}/{rounds}", flush=True)
                    try:
                        m = engine.measure(target, {**kwargs, "sig": sig, "fill": "random"},
                                           budget, renderers=n, processes=processes,
                                           server_pids=pids)
                    except (engine.LaneError, OSError, RuntimeError) as e:
                        failures.append(f"{n} {name}: {str(e).splitlines()[0][:200]}")
                        continue
                    samples = sorted(m.samples_s)
                    server_cpu = None
                    if pids and samples and m.server_cpu_s is not None:
                        server_cpu = m.server_cpu_s / len(samples) * 1e6
                    point = Point(n, name, len(samples), m.wall_s,
                                  samples[len(samples) // 2] * 1e6 if samples else 0.0,
                                  m.cpu_per_frame_us(), all(d == want for d in m.digests),
                                  server_cpu)
                    got[(n, name)] = _merge(got.get((n, name)), point)
            if not any(f.startswith(f"{n} ipc:") for f in failures):
                print(f"  {n:>3} renderer(s), ipc, traced for {TRACE_S:g} s (not timed)",
                      flush=True)
                traced[n] = _traced(url, sock, lanes["ipc"], sig, n)
            turns_after = _turns(url)
            if turns_before is not None and turns_after is not None:
                delta = {k: turns_after[k] - turns_before.get(k, 0) for k in turns_after}
                turns[n] = {**delta, "cache_bytes": turns_after["cache_bytes"]}
    points = [got[k] for k in sorted(got)]
    doc = _document(points, size, counts, loadavg, round(time.monotonic() - t_start, 1),
                    failures)
    doc["intra_op_threads"] = intra_op_threads
    for row in doc["rows"]:
        row["ipc_trace"] = traced.get(row["renderers"])
        row["large_frame_turns"] = turns.get(row["renderers"])
    print(table(doc))
    for f in failures:
        print(f"FAILED {f}")
    print(f"scaling took {doc['duration_s']:.0f} s")
    report.write_outputs(doc, json_path, plot_path, lambda path: plot(doc, path))
    differs = [f"{p.renderers} {p.transport}" for p in points if not p.equal]
    if differs:
        print("OUTPUTS DIFFER from a direct onnxruntime run: " + ", ".join(differs))
    return 1 if failures or differs else 0


def _traced(url: str, sock: Path, lane: tuple[str, dict[str, Any], bool, list[int]], sig: Any,
            n: int) -> dict[str, Any] | None:
    """N renderers through IPC once more, the service traced for TRACE_S from the moment they
    start (fenceline.trace.summary: the model, the service's part of a frame, the time between
    a reply and the session's next frame, the models in flight); None when it failed."""
    target, kwargs, processes, pids = lane
    box: dict[str, Any] = {}

    def record() -> None:
        try:
            box["doc"] = fetch_trace(url, Limits(seconds=TRACE_S, frames=DEFAULT_MAX_FRAMES),
                                     credential(None, sock))
        except FencelineError as e:
            box["error"] = str(e)

    recorder = threading.Thread(target=record, name="bench-trace", daemon=True)
    budget = engine.Budget(iterations=10**9, warmup=20, seconds=TRACE_S + 0.5)
    try:
        engine.measure(target, {**kwargs, "sig": sig, "fill": "random"}, budget, renderers=n,
                       processes=processes, server_pids=pids, on_go=recorder.start)
    except (engine.LaneError, OSError, RuntimeError) as e:
        print(f"    the traced run failed: {str(e).splitlines()[0][:200]}")
    recorder.join(TRACE_S + 60)
    if "doc" not in box:
        print(f"    no trace: {box.get('error', 'the recording did not answer')}")
        return None
    summary: dict[str, Any] = box["doc"]["otherData"]["summary"]
    return summary


def _turns(url: str) -> dict[str, int] | None:
    """The service's large frames' turns so far (the status page's ``large_frame_turns``;
    runtime/ort_options.py, "Large frames take turns"); None when the status did not answer."""
    try:
        with urllib.request.urlopen(f"{url}/v2/interop/status", timeout=10) as r:
            got: dict[str, int] = json.load(r)["server"]["large_frame_turns"]
            return got
    except (urllib.error.URLError, OSError, ValueError, KeyError):
        return None


def _document(points: list[Point], size: str, counts: list[int], loadavg: list[float],
              duration_s: float, failures: list[str]) -> dict[str, Any]:
    rows = []
    for n in counts:
        floor = next((p for p in points if p.renderers == n and p.transport == "in-process"), None)
        ipc = next((p for p in points if p.renderers == n and p.transport == "ipc"), None)
        rows.append({
            "renderers": n,
            "floor_fps": round(floor.fps, 1) if floor else None,
            "ipc_fps": round(ipc.fps, 1) if ipc else None,
            "ipc_share_of_floor": round(ipc.fps / floor.fps, 3) if ipc and floor and floor.fps
            else None,
            "floor_p50_us": round(floor.p50_us, 1) if floor else None,
            "ipc_p50_us": round(ipc.p50_us, 1) if ipc else None,
            "floor_cpu_per_frame_us": _r(floor.cpu_per_frame_us if floor else None),
            "ipc_cpu_per_frame_us": _r(ipc.cpu_per_frame_us if ipc else None),
            "ipc_service_cpu_per_frame_us": _r(ipc.server_cpu_per_frame_us if ipc else None),
            "outputs_equal": bool((floor is None or floor.equal) and (ipc is None or ipc.equal)),
        })
    at_goal = next((r for r in rows if r["renderers"] == GOAL_RENDERERS), None)
    share = at_goal["ipc_share_of_floor"] if at_goal else None
    goal = {"goal": f"IPC keeps at least {GOAL_SHARE:.0%} of the floor's frames/s at "
                    f"{GOAL_RENDERERS} renderers", "target": GOAL_SHARE, "value": share,
            "met": None if share is None else share >= GOAL_SHARE}
    return {"schema": 1, "date": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
            "machine": report.machine(), "size": size, "model": MODELS[(size, "FP32")],
            "loadavg_start": loadavg, "duration_s": duration_s, "rows": rows, "goal": goal,
            "failures": failures}


def _r(v: float | None) -> float | None:
    return None if v is None else round(v, 1)


def table(doc: dict[str, Any]) -> str:
    def f(v: Any, spec: str) -> str:
        return "-" if v is None else format(v, spec)

    threads = doc.get("intra_op_threads")
    lines = ["", f"{doc['size']} FP32, sync, one frame in flight per renderer "
             f"({doc['machine']['cpus']} CPUs, intra-op threads "
             f"{'default' if threads is None else threads})",
             f"  {'renderers':>9} {'floor fps':>10} {'ipc fps':>10} {'ipc/floor':>9} "
             f"{'floor p50':>10} {'ipc p50':>10} {'cpu/frame floor':>15} {'ipc':>8} "
             f"{'(service)':>10}"]
    for r in doc["rows"]:
        lines.append(
            f"  {r['renderers']:>9} {f(r['floor_fps'], '10.0f')} {f(r['ipc_fps'], '10.0f')} "
            f"{f(r['ipc_share_of_floor'], '9.2f')} {f(r['floor_p50_us'], '8.0f')} us "
            f"{f(r['ipc_p50_us'], '8.0f')} us {f(r['floor_cpu_per_frame_us'], '12.0f')} us "
            f"{f(r['ipc_cpu_per_frame_us'], '5.0f')} us "
            f"{f(r.get('ipc_service_cpu_per_frame_us'), '7.0f')} us"
            + ("" if r["outputs_equal"] else "  OUTPUTS DIFFER"))
    traced = [r for r in doc["rows"] if r.get("ipc_trace")]
    if traced:
        lines += ["", f"where IPC's frames go (the service traced for {TRACE_S:g} s after the "
                  "timed rounds; docs/tracing.md, the summary):"]
        lines += [f"  {r['renderers']:>3} renderer(s): {summary_line(r['ipc_trace'])}"
                  for r in traced]
    took = [r for r in doc["rows"] if (r.get("large_frame_turns") or {}).get("cache_bytes")]
    if took:
        mib = took[0]["large_frame_turns"]["cache_bytes"] >> 20
        lines += ["", f"large frames' turns (the service's status over each N's IPC rounds; "
                  f"large: a quarter of the {mib} MiB last-level cache or more):"]
        for r in took:
            t = r["large_frame_turns"]
            lines.append(f"  {r['renderers']:>3} renderer(s): {t['runs']} runs took the turn; "
                         f"kept for the session's next frame, taken back {t['kept_taken_back']}, "
                         f"expired {t['kept_expired']}; turned off {t['turned_off']} time(s)")
    g = doc["goal"]
    met = "-" if g["met"] is None else ("met" if g["met"] else "MISSED")
    lines += ["", "floor: N threads running the model in one process; ipc: N renderer processes, "
              "one connection each. cpu/frame: user+sys of every process involved per frame "
              "(service: the service's part of it).",
              f"{met:>6}  {g['goal']}: {g['value'] if g['value'] is not None else 'not measured'}"]
    return "\n".join(lines)


def plot(doc: dict[str, Any], path: Path) -> Path:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    rows = [r for r in doc["rows"] if r["floor_fps"] or r["ipc_fps"]]
    n = [r["renderers"] for r in rows]
    fig, (left, right) = plt.subplots(1, 2, figsize=(10.4, 3.8))
    left.plot(n, [r["floor_fps"] for r in rows], "o-", color="#4d4d4d", label="in-process floor")
    left.plot(n, [r["ipc_fps"] for r in rows], "o-", color="#1b7837", label="IPC")
    left.set_xlabel("renderers (floor: threads)")
    left.set_ylabel("frames/s, all renderers")
    left.set_xticks(n)
    left.grid(alpha=0.3)
    left.legend()
    right.plot(n, [r["ipc_share_of_floor"] for r in rows], "o-", color="#1b7837")
    right.axhline(GOAL_SHARE, color="#b2182b", linestyle="--", linewidth=1,
                  label=f"goal at {GOAL_RENDERERS}: {GOAL_SHARE:.0%}")
    right.set_ylim(0, 1.2)
    right.set_xticks(n)
    right.set_xlabel("renderers")
    right.set_ylabel("IPC frames/s over the floor's")
    right.grid(alpha=0.3)
    right.legend()
    m = doc["machine"]
    fig.suptitle(f"fenceline bench --scaling, {doc['size']} FP32, {doc['date'][:16]} UTC, "
                 f"{m['cpu'] or m['arch']} ({m['cpus']} CPUs, load {doc['loadavg_start'][0]})",
                 fontsize=9)
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path
