"""``fenceline bench --control-plane``: what the control plane's attackers cost another
renderer (docs/reliability.md, "The control plane").

One renderer (add_64x64, one frame in flight, a process of its own) runs at full rate against
one service in explicit model-control mode, through phases measured in one run:

- ``quiet``: the renderer alone;
- ``cpu burner``: beside a process that only spins (one CPU taken away, nothing else);
- ``reload flood``: beside 80 clients (threads of one process) each reloading one model over
  HTTP in a loop;
- ``big config``: beside a client reloading a model whose config.pbtxt is 256 KiB (the most a
  config may be: 3,900 ``parameters`` entries) and another loading one of 5 MB, in loops;
- ``trace``: beside a client recording traces of the service's largest size
  (``--trace-max-frames``, its default) and reading the answers, in a loop.

Printed: each phase's runs, p50, p99 and max, its p50 over the quiet one, the service's CPU
time, and what the attackers got (answers by status). Bounded: each phase ``seconds`` (at most
60), loopback only. Every renderer output is checked against a direct onnxruntime run.
"""

from __future__ import annotations

import contextlib
import multiprocessing as mp
import os
import shutil
import tempfile
import threading
import time
from array import array
from collections import Counter
from pathlib import Path
from typing import Any

from fenceline.bench import engine, report
from fenceline.bench.buffers import builtin_frame
from fenceline.bench.flood import MODEL, _burner, _phase, start_renderer
from fenceline.cli.process import start_service, stop_service
from fenceline.errors import InvalidArgument
from fenceline.ipc.control_token import read_token, token_path
from fenceline.models.builtin import build_repository, cache_dir
from fenceline.runtime import pbtxt
from fenceline.trace import DEFAULT_MAX_FRAMES

RELOAD_CLIENTS = 80


def _repository(root: Path) -> None:
    """The renderer's model, ``r`` to reload, ``big`` with a 256 KiB config, ``huge`` with 5 MB."""
    model = cache_dir() / MODEL / "1" / "model.onnx"
    for name in (MODEL, "r", "big", "huge"):
        (root / name / "1").mkdir(parents=True)
        shutil.copyfile(model, root / name / "1" / "model.onnx")
    entry = 'parameters {{ key: "p{0:05d}" value: {{ string_value: "vvvvvvvvvv" }} }}\n'
    size = len(entry.format(0))
    big = "".join(entry.format(i) for i in range((pbtxt.MAX_BYTES - 100) // size))
    (root / "big" / "config.pbtxt").write_text('name: "big"\n' + big)
    copies = (5 << 20) // len(big) + 1
    (root / "huge" / "config.pbtxt").write_text('name: "huge"\n' + big * copies)


_LOAD = "/v2/repository/models/{}/load"
# Each attack's clients: (label, path, JSON body), one thread each.
ATTACKS: dict[str, list[tuple[str, str, dict[str, Any] | None]]] = {
    "reload flood": [("r", _LOAD.format("r"), None)] * RELOAD_CLIENTS,
    "big config": [("big", _LOAD.format("big"), None), ("huge", _LOAD.format("huge"), None)],
    "trace": [("trace", "/v2/interop/trace", {"seconds": 1.0, "frames": DEFAULT_MAX_FRAMES})],
}
PHASES = ("cpu burner", *ATTACKS)


def _attacker(conn: Any, url: str, kind: str, token: str | None, seconds: float) -> None:
    """Requests of ``kind`` until ``seconds`` pass; sends (start, end, statuses). A plain
    http.client connection per client: the attackers' own CPU stays small beside the
    service's (an httpx client per thread built 80 TLS contexts, seconds of CPU)."""
    import http.client
    import json
    from urllib.parse import urlsplit

    statuses: Counter[str] = Counter()
    refusals: dict[str, str] = {}  # the first refusal's message, by label
    lock = threading.Lock()
    where = urlsplit(url)
    conn.recv()
    start = time.monotonic()
    end = start + seconds

    def loop(label: str, path: str, body: dict[str, Any] | None) -> None:
        headers = {"Content-Type": "application/json"}
        if token:
            headers["Authorization"] = f"Bearer {token}"
        data = json.dumps(body).encode() if body is not None else b""
        c = http.client.HTTPConnection(where.hostname or "127.0.0.1", where.port, timeout=120)
        try:
            while time.monotonic() < end:
                try:
                    c.request("POST", path, body=data, headers=headers)
                    r = c.getresponse()
                    answer = r.read()
                    got = str(r.status)
                    if r.status >= 400:
                        refusals.setdefault(label, answer.decode(errors="replace")[:300])
                except (OSError, http.client.HTTPException) as e:
                    got = type(e).__name__
                    c.close()
                with lock:
                    statuses[f"{label} {got}"] += 1
        finally:
            c.close()

    jobs = ATTACKS[kind]
    threads = [threading.Thread(target=loop, args=job, daemon=True) for job in jobs]
    for t in threads:
        t.start()
    for t in threads:
        t.join(seconds + 130)
    conn.send((start, time.monotonic(), dict(statuses), refusals))


def run_control_plane(*, seconds: float = 5.0, json_path: Path | None = None) -> int:
    """Measures and prints the table; returns 1 when an output differs or an attacker got an
    answer other than the documented ones (200; 400 for the 5 MB config)."""
    if not 1 <= seconds <= 60:
        raise InvalidArgument("--seconds with --control-plane: each phase's length, 1..60")
    _, sig, want = builtin_frame(MODEL)
    loadavg = [round(v, 2) for v in os.getloadavg()]
    print(f"fenceline bench --control-plane: one renderer ({MODEL}) beside model loads and "
          f"traces, {seconds:g} s a phase; {len(os.sched_getaffinity(0))} CPUs, load "
          f"{loadavg[0]}", flush=True)
    ctx = mp.get_context("forkserver")
    t_start = time.monotonic()
    phases: list[dict[str, Any]] = []
    answers: dict[str, dict[str, int]] = {}
    refusals: dict[str, str] = {}
    with tempfile.TemporaryDirectory(prefix="fenceline-control-") as tmp, \
            contextlib.ExitStack() as stack:
        root = Path(tmp) / "repo"
        build_repository(cache_dir(), [MODEL])
        _repository(root)
        proc, url, sock = start_service([], Path(tmp), extra=(
            "--model-repository", str(root), "--model-control-mode", "explicit",
            "--load-model", MODEL))
        stack.callback(stop_service, proc)
        pid = proc.pid
        token = read_token(token_path(sock))
        r_conn = start_renderer(ctx, stack, sock, sig)
        windows: list[tuple[str, tuple[float, float], float]] = []
        cpu0 = engine.tree_cpu_s([pid])
        t0 = time.monotonic()
        time.sleep(seconds)
        windows.append(("quiet", (t0, time.monotonic()), engine.tree_cpu_s([pid]) - cpu0))
        for kind in PHASES:
            conn, child = ctx.Pipe()
            args = (child, seconds) if kind == "cpu burner" else (child, url, kind, token, seconds)
            p = ctx.Process(target=_burner if kind == "cpu burner" else _attacker, args=args,
                            daemon=True)
            p.start()
            time.sleep(0.3)  # started, not yet at work
            cpu0 = engine.tree_cpu_s([pid])
            conn.send("go")
            got = conn.recv()
            windows.append((kind, (got[0], got[1]), engine.tree_cpu_s([pid]) - cpu0))
            if kind != "cpu burner":
                answers[kind] = got[2]
                refusals.update(got[3])
            p.join(10)
        r_conn.send("stop")
        starts_b, took_b, digest, error = r_conn.recv()
        if error:
            raise engine.LaneError(f"the renderer failed: {error}")
    starts, took = array("d"), array("d")
    starts.frombytes(starts_b)
    took.frombytes(took_b)
    for name, window, cpu in windows:
        phases.append(_phase(name, starts, took, window, cpu))
    quiet = phases[0]["p50_us"] or 1.0
    for ph in phases:
        ph["p50_over_quiet"] = round(ph["p50_us"] / quiet, 2)
    doc = {"bench": "control-plane", "model": MODEL, "seconds": seconds, "loadavg": loadavg,
           "cpus": len(os.sched_getaffinity(0)), "phases": phases, "answers": answers, "refusals": refusals,
           "outputs_equal": digest == want, "duration_s": round(time.monotonic() - t_start, 1)}
    print(table(doc))
    report.write_outputs(doc, json_path, None, lambda path: None)
    unexpected = {k: v for k, v in answers.items()
                  for code in v if code not in ("r 200", "big 200", "huge 400", "trace 200")}
    if unexpected:
        print(f"UNEXPECTED ANSWERS: {unexpected}")
    if digest != want:
        print("OUTPUTS DIFFER from a direct onnxruntime run")
    return 1 if unexpected or digest != want else 0


def table(doc: dict[str, Any]) -> str:
    lines = [f"{'phase':<14} {'runs':>8} {'p50 us':>9} {'p99 us':>9} {'max us':>10} "
             f"{'p50/quiet':>9} {'service CPU s':>13}"]
    for ph in doc["phases"]:
        lines.append(f"{ph['phase']:<14} {ph['runs']:>8} {ph['p50_us']:>9.1f} "
                     f"{ph['p99_us']:>9.1f} {ph['max_us']:>10.1f} {ph['p50_over_quiet']:>9.2f} "
                     f"{ph['service_cpu_s']:>13.2f}")
    for kind, got in doc["answers"].items():
        lines.append(f"{kind} answers: " + ", ".join(f"{k}: {v}" for k, v in sorted(got.items())))
    for label, message in sorted(doc["refusals"].items()):
        lines.append(f"  {label} refused: {message}")
    return "\n".join(lines)
