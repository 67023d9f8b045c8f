"""``fenceline bench --flood 5000``: what a flood of refused connections costs another renderer
(docs/reliability.md, "Connections"; docs/benchmarks.md, "Flood"); ``fenceline bench --churn
5000``: the same for connections below the limit, each greeted and closed (connect, HELLO,
read the answer, close: docs/reliability.md, "Cheap churn").

One renderer (add_64x64, one frame in flight) runs at full rate through three phases measured
in one run, against one service:

- ``quiet``: the renderer alone;
- ``cpu burner``: beside a process that only spins for as long: one CPU taken away and nothing
  else, what a flooder that never waited would cost by itself;
- ``flood``: beside a process making N connection attempts (connect, HELLO, read the answer,
  close) one after another, as fast as the service answers. Its user holds
  ``--max-connections-per-user`` connections already (the renderer's and the bench's), so
  every attempt is refused; with ``--churn`` it holds only the renderer's, so every attempt is
  answered as a HELLO is.

Printed: each phase's runs, p50, p99 and max and its p99 over the quiet one, and the service's
CPU time; the flood's attempts, answers and rate, and the CPU its accept thread spent on them;
the service's threads before and at most in each phase, its fds before and after the flood.
Bounded: at most N attempts and ``FLOOD_LIMIT_S`` seconds, on the service's Unix socket only.
Every renderer output is checked against a direct onnxruntime run.
"""

from __future__ import annotations

import contextlib
import multiprocessing as mp
import os
import socket
import tempfile
import threading
import time
from array import array
from collections import Counter
from pathlib import Path
from typing import Any

from fenceline.bench import engine, report
from fenceline.bench.buffers import builtin_frame
from fenceline.bench.scenarios import MODELS
from fenceline.cli.process import start_service, stop_service
from fenceline.client import IpcClient, ServiceError
from fenceline.errors import InvalidArgument

PER_USER = 16  # the service's --max-connections-per-user in this bench
FLOOD_LIMIT_S = 60.0  # the longest the flood may take, whatever N
WARMUP = 200
CHURN_GOAL = 1.2  # another renderer's p50 under churn over quiet (docs/reliability.md)
MAX_SAMPLES = 4_000_000  # the renderer stops by itself past this (a bound, never reached)
MODEL = MODELS[("64x64", "FP32")]


def parse_attempts(n: int) -> int:
    if not 1 <= n <= 100_000:
        raise InvalidArgument(f"--flood {n}: connection attempts are 1..100000 (e.g. 5000)")
    return n


# -- the processes ---------------------------------------------------------------------------

def _renderer(conn: Any, socket_path: str, sig: Any) -> None:
    """Runs frames until told to stop; sends (start times, latencies, digest, error)."""
    from fenceline.bench.transports import ipc_lane

    try:
        with ipc_lane(socket_path, MODEL, sig, "random") as lane:
            for i in range(1, WARMUP + 1):
                lane.frame(i)
            conn.send("ready")
            starts, took = array("d"), array("d")
            clock, frame, stop = time.monotonic, lane.frame, conn.poll
            i = WARMUP
            while not stop() and len(took) < MAX_SAMPLES:
                i += 1
                t0 = clock()
                frame(i)
                took.append(clock() - t0)
                starts.append(t0)
            conn.recv()
            conn.send((starts.tobytes(), took.tobytes(), lane.digest(), None))
    except Exception as e:  # the parent reports it
        conn.send((b"", b"", "", f"{type(e).__name__}: {e}"))


def start_renderer(ctx: Any, stack: contextlib.ExitStack[Any], sock: Path, sig: Any) -> Any:
    """The renderer process (:func:`_renderer`), once it said it runs; its end of the pipe.
    The stack joins it at the end."""
    r_conn, r_child = ctx.Pipe()
    renderer = ctx.Process(target=_renderer, args=(r_child, str(sock), sig), daemon=True)
    renderer.start()
    stack.callback(renderer.join, 10)
    if not r_conn.poll(engine.SETUP_TIMEOUT_S):
        raise engine.LaneError("the renderer did not start")
    first = r_conn.recv()
    if first != "ready":
        raise engine.LaneError(f"the renderer failed: {first[3]}")
    return r_conn


def attempt(path: str) -> tuple[str, str]:
    """One connection and HELLO: ("ok", "") or the answer's (code, message), or ("closed", why)
    when the connection ended without an answer."""
    from fenceline.protocol import codec

    try:
        with socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET) as s:
            s.settimeout(10)
            s.connect(path)
            s.send(codec.encode_json(codec.Kind.HELLO, 1, codec.client_hello("flood")))
            data = s.recv(codec.MAX_FRAME)
    except OSError as e:
        return "closed", type(e).__name__
    if not data:
        return "closed", "no answer"
    reply = codec.decode(data)
    if reply.kind != codec.Kind.ERROR:
        return "ok", ""
    err = codec.decode_error(reply.body)
    return err.code, err.message


def _flooder(conn: Any, socket_path: str, attempts: int) -> None:
    codes: Counter[str] = Counter()
    messages: set[str] = set()
    conn.recv()
    start = time.monotonic()
    deadline = start + FLOOD_LIMIT_S
    done = 0
    while done < attempts and time.monotonic() < deadline:
        code, message = attempt(socket_path)
        codes[code] += 1
        if len(messages) < 8:
            messages.add(message)
        done += 1
    conn.send((start, time.monotonic(), dict(codes), sorted(messages)))


def _burner(conn: Any, seconds: float) -> None:
    conn.recv()
    start = time.monotonic()
    end = start + seconds
    while time.monotonic() < end:
        pass
    conn.send((start, time.monotonic()))


# -- the service, seen from outside ----------------------------------------------------------

def _threads(pid: int) -> int:
    return len(os.listdir(f"/proc/{pid}/task"))


def _fds(pid: int) -> int:
    return len(os.listdir(f"/proc/{pid}/fd"))


ACCEPT_THREAD = "fl-ipc-accept"  # the name the native accept loop gives its thread


def _accept_cpu_s(pid: int) -> float | None:
    """user + sys seconds of the service's accept thread so far; None if it has no such name."""
    for tid in os.listdir(f"/proc/{pid}/task"):
        with contextlib.suppress(OSError):
            with open(f"/proc/{pid}/task/{tid}/comm") as f:
                if f.read().strip() != ACCEPT_THREAD:
                    continue
            with open(f"/proc/{pid}/task/{tid}/stat") as f:
                stat = f.read()
            fields = stat[stat.rindex(")") + 2:].split()
            return (int(fields[11]) + int(fields[12])) * engine.CLOCK_TICK_S
    return None


class _Watch:
    """Samples the service's thread count every 2 ms while it runs: the most seen in each
    phase (onnxruntime may start a short-lived thread of its own in any of them)."""

    def __init__(self, pid: int) -> None:
        self.pid, self.phase = pid, "quiet"
        self.most: dict[str, int] = {}
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, daemon=True)
        self._thread.start()

    def _loop(self) -> None:
        while not self._stop.wait(0.002):
            with contextlib.suppress(OSError):
                n = _threads(self.pid)
                self.most[self.phase] = max(self.most.get(self.phase, 0), n)

    def stop(self) -> dict[str, int]:
        self._stop.set()
        self._thread.join(5)
        return self.most


# -- the run ---------------------------------------------------------------------------------

def _pct(sorted_s: list[float], q: float) -> float:
    return sorted_s[min(len(sorted_s) - 1, int(q * len(sorted_s)))] * 1e6 if sorted_s else 0.0


def _phase(name: str, starts: array[float], took: array[float], window: tuple[float, float],
           service_cpu_s: float) -> dict[str, Any]:
    lo, hi = window
    inside = sorted(t for s, t in zip(starts, took, strict=True) if lo <= s and s + t <= hi)
    return {"phase": name, "seconds": round(hi - lo, 3), "runs": len(inside),
            "p50_us": round(_pct(inside, 0.50), 1), "p99_us": round(_pct(inside, 0.99), 1),
            "max_us": round(inside[-1] * 1e6, 1) if inside else 0.0,
            "service_cpu_s": round(service_cpu_s, 3)}


def _diff(end: float | None, start: float | None) -> float | None:
    return None if end is None or start is None else round(end - start, 3)


def _per(seconds: float | None, attempts: int) -> float | None:
    return None if seconds is None or not attempts else round(seconds / attempts * 1e6, 1)


def run_flood(attempts: int, *, seconds: float = 2.0, json_path: Path | None = None,
              churn: bool = False) -> int:
    """Measures and prints the table; returns 1 when an attempt was not refused with
    ``resource_exhausted`` (``churn``: not answered as a HELLO), an output differs, or the
    service's fds did not come back after the flood. Threads are a figure: onnxruntime starts
    a few short-lived threads of its own now and then, in quiet phases too."""
    parse_attempts(attempts)
    flag = "--churn" if churn else "--flood"
    if not 0.2 <= seconds <= 60:
        raise InvalidArgument(f"--seconds with {flag}: each quiet phase's length, 0.2..60")
    _, sig, want = builtin_frame(MODEL)
    loadavg = [round(v, 2) for v in os.getloadavg()]
    held_by_user = "only its renderer's connection, below" if churn else f"its {PER_USER}"
    print(f"fenceline bench {flag}: {attempts} connection attempts from one user holding "
          f"{held_by_user} connections (--max-connections-per-user {PER_USER}), beside one "
          f"renderer ({MODEL}); {len(os.sched_getaffinity(0))} CPUs, load {loadavg[0]}",
          flush=True)
    ctx = mp.get_context("forkserver")
    t_start = time.monotonic()
    with tempfile.TemporaryDirectory(prefix="fenceline-flood-") as tmp, \
            contextlib.ExitStack() as stack:
        proc, _url, sock = start_service(
            [MODEL], Path(tmp), extra=("--max-connections-per-user", str(PER_USER)))
        stack.callback(stop_service, proc)
        pid = proc.pid
        r_conn = start_renderer(ctx, stack, sock, sig)
        held: list[IpcClient] = []  # the rest of this user's share
        with contextlib.suppress(ServiceError):
            while len(held) < PER_USER and not churn:
                held.append(IpcClient(sock))
        for c in held:
            stack.callback(c.close)
            # The accept loop answers a HELLO itself and hands the connection on: the service
            # has taken it (its socket and pidfd counted below) once it answered a request.
            c.model_metadata(MODEL)
        threads_before, fds_before = _threads(pid), _fds(pid)
        watch = _Watch(pid)
        cpu = [engine.tree_cpu_s([pid])]
        accept_cpu = [_accept_cpu_s(pid)]

        def mark() -> None:
            cpu.append(engine.tree_cpu_s([pid]))
            accept_cpu.append(_accept_cpu_s(pid))

        # quiet
        quiet = (time.monotonic(), 0.0)
        time.sleep(seconds)
        quiet = (quiet[0], time.monotonic())
        mark()
        # a CPU burner
        b_conn, b_child = ctx.Pipe()
        burner = ctx.Process(target=_burner, args=(b_child, seconds), daemon=True)
        burner.start()
        time.sleep(0.2)  # started, not yet spinning
        mark()
        watch.phase = "cpu burner"
        b_conn.send("go")
        burned: tuple[float, float] = b_conn.recv()
        burner.join(10)
        mark()
        time.sleep(0.2)
        mark()
        # the flood
        f_conn, f_child = ctx.Pipe()
        flooder = ctx.Process(target=_flooder, args=(f_child, str(sock), attempts), daemon=True)
        flooder.start()
        time.sleep(0.2)
        mark()
        watch.phase = "flood"
        f_conn.send("go")
        if not f_conn.poll(FLOOD_LIMIT_S + 30):
            flooder.kill()
            raise engine.LaneError("the flooder did not finish")
        f_start, f_end, codes, messages = f_conn.recv()
        threads_most = watch.stop()
        flooder.join(10)
        mark()
        deadline = time.monotonic() + 5  # the last refusals are drained within their grace
        while _fds(pid) > fds_before and time.monotonic() < deadline:
            time.sleep(0.05)
        fds_after = _fds(pid)
        r_conn.send("stop")
        if not r_conn.poll(60):
            raise engine.LaneError("the renderer did not stop")
        raw_starts, raw_took, got_digest, error = r_conn.recv()
        if error:
            raise engine.LaneError(f"the renderer failed: {error}")
        for c in held:
            c.close()
    starts, took = array("d"), array("d")
    starts.frombytes(raw_starts)
    took.frombytes(raw_took)
    phases = [
        _phase("quiet", starts, took, quiet, cpu[1] - cpu[0]),
        _phase("cpu burner", starts, took, burned, cpu[3] - cpu[2]),
        _phase("flood", starts, took, (f_start, f_end), cpu[6] - cpu[5]),
    ]
    base, base50 = phases[0]["p99_us"] or 1.0, phases[0]["p50_us"] or 1.0
    for p in phases:
        p["p99_over_quiet"] = round(p["p99_us"] / base, 2)
        p["p50_over_quiet"] = round(p["p50_us"] / base50, 2)
    expected = "ok" if churn else "resource_exhausted"
    answered = codes.get(expected, 0)
    flood_s = f_end - f_start
    doc = {
        "schema": 1, "date": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "machine": report.machine(), "model": MODEL, "per_user_limit": PER_USER,
        "kind": "churn" if churn else "flood",
        "loadavg_start": loadavg, "duration_s": round(time.monotonic() - t_start, 1),
        "phases": phases,
        "flood": {"attempts": sum(codes.values()), "asked": attempts, "seconds": round(flood_s, 3),
                  "per_s": round(sum(codes.values()) / flood_s, 1) if flood_s > 0 else None,
                  "answers": codes, "messages": messages,
                  "accept_thread_cpu_s": _diff(accept_cpu[6], accept_cpu[5]),
                  "accept_thread_cpu_us_per_attempt": _per(
                      _diff(accept_cpu[6], accept_cpu[5]), sum(codes.values()))},
        "service": {"threads_before": threads_before, "threads_most": threads_most,

                    "fds_before": fds_before, "fds_after": fds_after},
        "outputs_equal": got_digest == want,
    }
    print(table(doc))
    report.write_outputs(doc, json_path, None, lambda p: p)
    problems = []
    if answered != attempts:
        problems.append(f"{attempts - answered} of {attempts} attempts not answered "
                        f"{expected}: {codes}")
    if fds_after > fds_before:
        problems.append(f"the service's fds did not come back: {fds_before} -> {fds_after}")
    if not doc["outputs_equal"]:
        problems.append("OUTPUTS DIFFER from a direct onnxruntime run")
    for problem in problems:
        print(f"FAILED {problem}")
    return 1 if problems else 0


def table(doc: dict[str, Any]) -> str:
    f, s = doc["flood"], doc["service"]
    lines = ["", f"one renderer ({doc['model']}, one frame in flight) through three phases "
             f"({doc['machine']['cpus']} CPUs, load {doc['loadavg_start'][0]} at the start)",
             f"  {'phase':<11} {'seconds':>7} {'runs':>7} {'p50':>9} {'p99':>9} {'max':>9} "
             f"{'p50/quiet':>9} {'p99/quiet':>9} {'service CPU':>11}"]
    for p in doc["phases"]:
        lines.append(
            f"  {p['phase']:<11} {p['seconds']:7.2f} {p['runs']:7d} {p['p50_us']:6.0f} us "
            f"{p['p99_us']:6.0f} us {p['max_us']:6.0f} us {p['p50_over_quiet']:9.2f} "
            f"{p['p99_over_quiet']:9.2f} {p['service_cpu_s']:9.2f} s")
    answers = ", ".join(f"{k} {v}" for k, v in sorted(f["answers"].items()))
    if doc["kind"] == "churn":  # docs/reliability.md, "Cheap churn": the goal
        q, c = doc["phases"][0], doc["phases"][2]
        lines += ["", f"churn: the renderer's p50 {q['p50_us']:.0f} us quiet, {c['p50_us']:.0f} us "
                  f"under churn: {c['p50_over_quiet']:.2f}x (goal: at most {CHURN_GOAL}x)"]
    lines += [
        "", f"flood: {f['attempts']} attempts in {f['seconds']:.2f} s ({f['per_s']:.0f}/s): "
        f"{answers}; the service's accept thread used {f['accept_thread_cpu_s']} s of CPU, "
        f"{f['accept_thread_cpu_us_per_attempt']} us per attempt (10 ms ticks)",
        f"service: threads {s['threads_before']} before, at most "
        + ", ".join(f"{v} {k}" for k, v in s["threads_most"].items())
        + " (onnxruntime's own come and go, flood or not);"
        f" fds {s['fds_before']} before the flood, {s['fds_after']} after it",
        "cpu burner: a process that only spins, as long as the quiet phase: what one CPU taken "
        "away costs the renderer with no connection at all",
        "outputs: " + ("equal to a direct onnxruntime run" if doc["outputs_equal"]
                       else "DIFFER from a direct onnxruntime run"),
    ]
    if f["messages"]:
        lines.append(f"refusal: {f['messages'][0]}")
    return "\n".join(lines)
