"""Drives lanes: each lane is one renderer's frame loop on its own buffers (a lane opens its
own client, buffers and session); a row runs ``renderers x depth`` lanes at once.

- Lanes of one renderer are threads of one process (``depth`` frames in flight: double
  buffering when it is 2). Several renderers are separate processes, as real renderers are;
  the in-process floor keeps every lane in this process, as the service does.
- Every lane warms up, then all start together; each stops after ``iterations`` frames or when
  the row's time budget is spent, whichever comes first. Nothing waits without a timeout.
- CPU per frame counts the renderers' processes and the server's process tree over the timed
  window only (a renderer's ends when all its lanes have stopped timing, before they hash
  their outputs).

A lane is named by ``"module:function"``: a context manager ``function(**kwargs)`` that yields
an object with ``frame(i)`` (frame values rise from 1) and ``digest()`` (of its outputs), so a
renderer process can open it. ``frame(i)`` returns None (the engine times the call), or the
seconds of a frame the lane timed itself, or a list of them for a lane that runs several frames
a call: a lane that keeps several frames in flight answers with the frame that completed during
the call, or NOTHING_DONE while its pipeline fills; ``digest()`` then first collects the frames
still in flight. A lane of the Python IPC client also has ``waits()``: its connection's
``IpcClient.waits``, counted over the timed window. A lane that times a second path in turn
with its own also has ``partner_samples()``: that path's times, kept over the timed window as
``Measured.partner_samples_s``.
"""

from __future__ import annotations

import contextlib
import importlib
import multiprocessing as mp
import os
import resource
import threading
import time
import traceback
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Protocol

from fenceline.bench.stats import add_counts

SETUP_TIMEOUT_S = 180.0
NOTHING_DONE = -1.0  # frame(i): no frame completed during this call
CLOCK_TICK_S = 1.0 / os.sysconf("SC_CLK_TCK")


class Lane(Protocol):
    def frame(self, i: int) -> float | list[float] | None: ...

    def digest(self) -> str: ...


# The untimed warm-up of every lane lasts at least this long, besides its frames: the waits'
# spin rule and the Python client's nap try their other way in one 2.1 ms window of every 34 ms
# (native/common/spin_rule.h) and settle after it, so a lane is timed after three such periods,
# as a renderer runs once it has settled, not as it starts.
WARM_S = 0.1


@dataclass(frozen=True)
class Budget:
    iterations: int  # per lane, at most
    warmup: int  # per lane, untimed
    seconds: float  # the timed part of a row, at most (a frame in flight is finished)

    def part(self, rounds: int) -> Budget:
        """The budget of one of ``rounds`` rounds (each warms up again)."""
        return Budget(max(1, -(-self.iterations // rounds)), self.warmup, self.seconds / rounds)


@dataclass
class Measured:
    samples_s: list[float] = field(repr=False)
    wall_s: float  # first start to last stop over all lanes
    digests: list[str]
    client_cpu_s: float
    server_cpu_s: float | None
    waits: dict[str, int] = field(default_factory=dict)  # the lanes' IpcClient.waits, summed
    # The timed window, first start to last stop over all lanes, on time.perf_counter's clock
    # (CLOCK_MONOTONIC on Linux, the clock of a service trace's moments).
    window_s: tuple[float, float] = (0.0, 0.0)
    partner_samples_s: list[float] = field(default_factory=list, repr=False)

    @property
    def throughput_fps(self) -> float:
        return len(self.samples_s) / self.wall_s if self.wall_s > 0 else 0.0

    def cpu_per_frame_us(self) -> float | None:
        if not self.samples_s:
            return None
        total = self.client_cpu_s + (self.server_cpu_s or 0.0)
        return total / len(self.samples_s) * 1e6


class LaneError(RuntimeError):
    """A lane failed; the message says where and why."""


def _resolve(target: str) -> Callable[..., Any]:
    module, _, name = target.partition(":")
    fn: Callable[..., Any] = getattr(importlib.import_module(module), name)
    return fn


def _own_cpu_s() -> float:
    r = resource.getrusage(resource.RUSAGE_SELF)
    return r.ru_utime + r.ru_stime


def tree_cpu_s(pids: list[int]) -> float:
    """user + sys seconds so far of these processes and all their descendants."""
    total, seen, todo = 0.0, set(), list(pids)
    while todo:
        pid = todo.pop()
        if pid in seen:
            continue
        seen.add(pid)
        try:
            with open(f"/proc/{pid}/stat") as f:
                stat = f.read()
            fields = stat[stat.rindex(")") + 2:].split()
            total += (int(fields[11]) + int(fields[12])) * CLOCK_TICK_S
            for task in os.listdir(f"/proc/{pid}/task"):
                with open(f"/proc/{pid}/task/{task}/children") as f:
                    todo += [int(c) for c in f.read().split()]
        except (OSError, ValueError):
            continue  # gone meanwhile
    return total


@dataclass
class _LaneResult:
    samples_s: list[float]
    start: float
    stop: float
    digest: str
    waits: dict[str, int]
    partner_s: list[float]


class _Sync(Protocol):
    """How a host meets the coordinator: ``ready()`` returns once every lane of every host has
    warmed up (the timed window starts); ``done()`` once every lane has stopped timing (lanes
    tear down after it)."""

    def ready(self) -> None: ...

    def done(self, results: list[_LaneResult], cpu_s: float) -> None: ...


def _host(target: str, kwargs: dict[str, Any], budget: Budget, lanes: int, sync: _Sync
          ) -> tuple[list[_LaneResult], float]:
    """Runs ``lanes`` lanes as threads of this process; returns their results and this
    process's CPU seconds over the timed window."""
    open_lane = _resolve(target)
    limit = SETUP_TIMEOUT_S + budget.seconds + 120
    ready, go = threading.Barrier(lanes + 1, timeout=limit), threading.Barrier(lanes + 1)
    # stopped: every lane has stopped timing, before it reads its outputs for the digest (a
    # 4K frame's hash is milliseconds of CPU: not the renderer's per-frame cost). The CPU is
    # read by the barrier's action, before any lane goes on to its digest.
    cpu_marks: list[float] = []
    stopped = threading.Barrier(lanes + 1, action=lambda: cpu_marks.append(_own_cpu_s()),
                                timeout=limit)
    done, release = threading.Barrier(lanes + 1, timeout=limit), threading.Barrier(lanes + 1)
    barriers = (ready, go, stopped, done, release)
    results: list[_LaneResult | None] = [None] * lanes
    errors: list[str] = []

    def run(index: int) -> None:
        try:
            with open_lane(**kwargs) as lane:
                # budget.warmup frames and at least WARM_S; never past the row's own length
                # (at least a second): a lane that cannot warm up in that time is timed as is.
                now = time.monotonic()
                warm_until, settled = now + max(budget.seconds, 1.0), now + WARM_S
                i = 1
                while (i <= budget.warmup or now < settled) and now <= warm_until:
                    lane.frame(i)
                    i += 1
                    now = time.monotonic()
                ready.wait()
                go.wait(limit)
                samples: list[float] = []
                waits0 = _waits(lane)
                partner0 = len(_partner(lane))
                clock = time.perf_counter
                first = clock()
                deadline = first + budget.seconds
                while len(samples) < budget.iterations:
                    t0 = clock()
                    own = lane.frame(i)
                    t1 = clock()
                    if own is None:
                        samples.append(t1 - t0)
                    elif isinstance(own, list):
                        samples += own
                    elif own >= 0:
                        samples.append(own)
                    i += 1
                    if t1 > deadline:
                        break
                stop = clock()
                stopped.wait()
                waits = {k: v - waits0.get(k, 0) for k, v in _waits(lane).items()}
                partner = _partner(lane)[partner0:]
                results[index] = _LaneResult(samples, first, stop, lane.digest(), waits, partner)
                done.wait()
                release.wait(limit)
        except threading.BrokenBarrierError:
            pass  # another lane or host failed; its error is the one reported
        except Exception as e:
            errors.append(f"lane {index}: {type(e).__name__}: {e}")
            for b in barriers:
                b.abort()

    threads = [threading.Thread(target=run, args=(k,), daemon=True) for k in range(lanes)]
    for t in threads:
        t.start()
    cpu = 0.0
    try:
        ready.wait()
        sync.ready()
        cpu0 = _own_cpu_s()
        go.wait(limit)
        stopped.wait()
        cpu = cpu_marks[0] - cpu0
        done.wait()
        sync.done([r for r in results if r is not None], cpu)
        release.wait(limit)
    except BaseException:
        for b in barriers:
            b.abort()
        if not errors:
            raise
    finally:
        for t in threads:
            t.join(SETUP_TIMEOUT_S)
    if errors:
        raise LaneError("; ".join(errors))
    return [r for r in results if r is not None], cpu


class _LocalSync:
    def __init__(self, pids: list[int], on_go: Callable[[], None] | None = None) -> None:
        self.pids = pids
        self.on_go = on_go
        self.marks: list[float] = []

    def ready(self) -> None:
        if self.pids:
            self.marks.append(tree_cpu_s(self.pids))
        if self.on_go is not None:
            self.on_go()

    def done(self, results: list[_LaneResult], cpu_s: float) -> None:
        if self.pids:
            self.marks.append(tree_cpu_s(self.pids))


class _PipeSync:
    """A renderer process's side: tells the coordinator, waits for its word."""

    def __init__(self, conn: Any, timeout_s: float) -> None:
        self.conn = conn
        self.timeout_s = timeout_s

    def _await(self, word: str) -> None:
        if not self.conn.poll(self.timeout_s) or self.conn.recv() != word:
            raise LaneError(f"the coordinator did not say {word!r}")

    def ready(self) -> None:
        self.conn.send(("ready", None))
        self._await("go")

    def done(self, results: list[_LaneResult], cpu_s: float) -> None:
        self.conn.send(("done", (results, cpu_s)))
        self._await("release")


def _host_main(conn: Any, target: str, kwargs: dict[str, Any], budget: Budget, lanes: int
               ) -> None:
    try:
        _host(target, kwargs, budget, lanes,
              _PipeSync(conn, SETUP_TIMEOUT_S + budget.seconds + 120))
    except BaseException as e:  # reported to the coordinator, which raises it
        with contextlib.suppress(OSError):
            conn.send(("error", f"{type(e).__name__}: {e}\n{traceback.format_exc(limit=3)}"))
    finally:
        conn.close()


def _expect(hosts: list[tuple[Any, Any]], word: str, timeout_s: float) -> list[Any]:
    """Each host's message ``word``; a host that fails, dies or stays silent raises."""
    out = []
    for proc, conn in hosts:
        deadline = time.monotonic() + timeout_s
        while not conn.poll(0.2):
            if not proc.is_alive() and not conn.poll(0):
                raise LaneError(f"a renderer process exited with status {proc.exitcode}")
            if time.monotonic() > deadline:
                raise LaneError(f"a renderer process was not {word} within {timeout_s:.0f} s")
        try:
            got, value = conn.recv()
        except EOFError:
            raise LaneError(f"a renderer process exited with status {proc.exitcode}") from None
        if got == "error":
            raise LaneError(value)
        out.append(value)
    return out


def measure(target: str, kwargs: dict[str, Any], budget: Budget, *, renderers: int = 1,
            depth: int = 1, processes: bool = True, server_pids: list[int] | None = None,
            on_go: Callable[[], None] | None = None) -> Measured:
    """Runs the row; ``processes=False`` keeps every lane in this process. ``on_go``: called
    once every lane is ready, just before they start timing (e.g. to start a trace)."""
    pids = server_pids or []
    if renderers == 1 or not processes:
        sync = _LocalSync(pids, on_go)
        results, cpu = _host(target, kwargs, budget, renderers * depth, sync)
        server = sync.marks[1] - sync.marks[0] if len(sync.marks) == 2 else None
        return _summarize(results, cpu, server)

    ctx = _renderer_context()
    hosts = []
    limit = SETUP_TIMEOUT_S + budget.seconds + 120
    try:
        for _ in range(renderers):
            parent, child = ctx.Pipe()
            p = ctx.Process(target=_host_main, args=(child, target, kwargs, budget, depth),
                            daemon=True)
            p.start()
            child.close()
            hosts.append((p, parent))
        _expect(hosts, "ready", SETUP_TIMEOUT_S)
        server0 = tree_cpu_s(pids) if pids else None
        if on_go is not None:
            on_go()
        for _, conn in hosts:
            conn.send("go")
        done = _expect(hosts, "done", limit)
        server1 = tree_cpu_s(pids) if pids else None
        for _, conn in hosts:
            conn.send("release")
    finally:
        for _, conn in hosts:
            conn.close()  # a host still waiting for a word sees the end of the pipe and stops
        for p, _ in hosts:
            p.join(30)
            if p.is_alive():
                p.kill()
                p.join()
    results = [r for lane_results, _ in done for r in lane_results]
    cpu = sum(c for _, c in done)
    server = server1 - server0 if server0 is not None and server1 is not None else None
    return _summarize(results, cpu, server)


_context: Any = None


def _renderer_context() -> Any:
    """Renderer processes fork from a clean server process that has the lanes imported: no
    state of this process (onnxruntime's threads, the event loop) leaks into them, and each
    starts in milliseconds rather than re-importing numpy."""
    global _context
    if _context is None:
        _context = mp.get_context("forkserver")
        # fenceline.ipc.server: IpcClient imports it (and onnxruntime with it) on first use.
        _context.set_forkserver_preload(["fenceline.bench.transports", "fenceline.ipc.server"])
    return _context


def _summarize(results: list[_LaneResult], client_cpu: float, server_cpu: float | None
               ) -> Measured:
    samples = [s for r in results for s in r.samples_s]
    window = (min(r.start for r in results), max(r.stop for r in results)) if results else (0.0, 0.0)
    return Measured(samples, window[1] - window[0], [r.digest for r in results], client_cpu,
                    server_cpu, add_counts(r.waits for r in results), window,
                    [s for r in results for s in r.partner_s])


def _waits(lane: Any) -> dict[str, int]:
    waits = getattr(lane, "waits", None)
    return dict(waits()) if waits is not None else {}


def _partner(lane: Any) -> list[float]:
    partner = getattr(lane, "partner_samples", None)
    return list(partner()) if partner is not None else []
