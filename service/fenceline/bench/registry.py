"""The transports a row can be measured through: a small registry of functions
``(Context, Scenario) -> Row | list[Row] | None`` (None: nothing to measure for this scenario;
a list: the rows of paths measured together, each under its own transport's name), each with
``available(Context) -> None | why not`` for this run.

Modules of the bench package may add their own rows: a module listed in ``PLUGINS`` that
defines ``bench_transports() -> list[Transport]`` has them registered when it imports; the
adapters below cover the measure functions of modules that do not.
"""

from __future__ import annotations

import importlib
import importlib.util
import os
import resource
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import httpx

from fenceline.bench import engine
from fenceline.bench.scenarios import Scenario
from fenceline.bench.stats import OUTSIDE, Row
from fenceline.ipc.control_token import read_token, token_path

PLUGINS = ("fenceline.bench.streaming", "fenceline.bench.c_client", "fenceline.bench.kserve")


@dataclass
class Context:
    """What a run has: the fenceline service, the Triton peer if any, the models' files, and
    the expected output digest of each scenario."""

    url: str
    socket: Path
    service_pid: int
    models: dict[str, Path]
    triton: Any = None  # a started TritonPeer, or None
    fenceline_kserve: bool = False  # the service answers KServe v2 infer
    fenceline_shm: bool = False  # and Triton's system shared-memory routes
    expected: dict[str, str] = field(default_factory=dict)  # scenario model+fill -> digest
    workdir: Path | None = None  # lives as long as the run
    programs: dict[str, Path] = field(default_factory=dict)  # built helper programs by row

    def server_pids(self, transport: str) -> list[int]:
        if transport.startswith("triton"):
            return [self.triton.pid] if self.triton is not None and self.triton.pid else []
        return [] if transport.startswith("in-process") else [self.service_pid]


Measure = Callable[[Context, Scenario], Row | list[Row] | None]
Available = Callable[[Context], str | None]  # None, or why the transport is not here


def _always(ctx: Context) -> str | None:
    return None


@dataclass(frozen=True)
class Transport:
    name: str
    describe: str
    measure: Measure
    peer: bool = False  # needs --peers
    available: Available = _always
    needs: tuple[str, ...] = ()  # modules the row's lanes import (an optional dependency)
    # The transports whose rows it measures, when not its own name: it runs wherever they all
    # are asked for (``--transports``).
    made_of: tuple[str, ...] = ()


# Where each optional module comes from: the extras of pyproject.toml that install it.
EXTRAS = {"tritonclient": "the [bench] or [test] extra: pip install '.[bench]'"}


def _importable(module: str) -> bool:
    try:
        return importlib.util.find_spec(module) is not None
    except (ImportError, ValueError):  # a parent package missing (or hidden)
        return False


def missing(t: Transport) -> str | None:
    """Why ``t`` cannot run in this install (a module it needs is missing), or None."""
    for module in t.needs:
        if not _importable(module):
            top = module.split(".")[0]
            return f"needs {top}, from {EXTRAS.get(top, 'an optional dependency')}"
    return None


REGISTRY: dict[str, Transport] = {}


def register(t: Transport) -> None:
    REGISTRY[t.name] = t


def row(name: str, sc: Scenario, m: engine.Measured, ctx: Context, note: str = "") -> Row:
    want = ctx.expected.get(expected_key(sc))
    check = "" if want is None else ("equal" if all(d == want for d in m.digests) else "differs")
    n = len(m.samples_s)
    return Row(name, sc.size, m.samples_s, note, m.cpu_per_frame_us(), sc.datatype,
               sc.renderers, sc.mode, sc.model, m.throughput_fps, check,
               renderer_cpu_us=m.client_cpu_s / n * 1e6 if n else None,
               service_cpu_us=m.server_cpu_s / n * 1e6 if n and m.server_cpu_s is not None
               else None, waits=m.waits)


def expected_key(sc: Scenario) -> str:
    return f"{sc.model}/{sc.fill}"


def _lanes(name: str, target: str, kwargs: Callable[[Context, Scenario], dict[str, Any]],
           *, processes: bool = True, pipelined: str | None = None,
           one_at_a_time: bool = False) -> Measure:
    """``pipelined``: the lane that keeps a pipelined scenario's frames in flight itself, on
    one connection (else such a scenario runs ``depth`` synchronous lanes per renderer).
    ``one_at_a_time``: a pipelined scenario runs one synchronous lane per renderer all the
    same, on the budget of a pipelined lane (its ``depth`` lanes' frames, in the same time):
    the baseline its frames in flight are compared with, measured in the same rounds."""

    def measure(ctx: Context, sc: Scenario) -> Row | None:
        lane, args, budget, depth = target, kwargs(ctx, sc), sc.budget, sc.depth
        note = NOTES.get(name, "")
        if sc.depth > 1 and (pipelined is not None or one_at_a_time):
            b = sc.budget
            budget, depth = engine.Budget(b.iterations * sc.depth, b.warmup * sc.depth,
                                          b.seconds), 1
            if pipelined is not None:
                lane, args = pipelined, {**args, "depth": sc.depth}
                note = f"{sc.depth} in flight on one connection"
        m = engine.measure(lane, args, budget, renderers=sc.renderers, depth=depth,
                           processes=processes, server_pids=ctx.server_pids(name))
        return row(name, sc, m, ctx, note)

    return measure


NOTES = {"in-process": "floor", "in-process-cross-core": "floor, input written on another CPU",
         "ipc-written": "inputs written before each frame",
         "ipc-one": "1 in flight: the pipelined ipc row's baseline"}


def _base(ctx: Context, sc: Scenario) -> dict[str, Any]:
    return {"sig": sc.sig, "fill": sc.fill}


def _floor(ctx: Context, sc: Scenario) -> dict[str, Any]:
    return {"model_path": str(ctx.models[sc.model]), **_base(ctx, sc)}


def _ipc(ctx: Context, sc: Scenario) -> dict[str, Any]:
    return {"socket_path": str(ctx.socket), "model": sc.model, **_base(ctx, sc)}


def _ipc_written(ctx: Context, sc: Scenario) -> dict[str, Any]:
    return {**_ipc(ctx, sc), "write": True}


# Every size of the #31 goals: the row's service-side line says where each gap to the floor is.
TRACED_SIZES = ("64x64", "720p", "1080p", "4K")


def _traced(ctx: Context, sc: Scenario) -> Row | None:
    """``ipc`` while the service records a trace of every frame (docs/tracing.md): what
    tracing costs, beside the ``ipc`` row. The trace is asked for over HTTP, as
    ``fenceline trace`` does, and ended when the row ends."""
    if sc.size not in TRACED_SIZES or sc.renderers != 1 or sc.mode != "sync":
        return None
    got: list[Any] = []
    # Room for the row's timed frames and no more: the recorder's buffer is sized from it and
    # cleared when the recording starts, once the lane has warmed up (a warm-up of WARM_S holds
    # far more frames than the budget's count, and would fill it).
    frames = sc.budget.iterations + 16

    # Recording is the service user's right: the bench is that user and shows the control
    # token the service keeps beside its socket, as `fenceline trace` does (docs/tracing.md).
    token = read_token(token_path(ctx.socket))
    auth = {"Authorization": f"Bearer {token}"} if token else {}

    def record() -> None:
        with httpx.Client(base_url=ctx.url, timeout=120, headers=auth) as http:
            got.append(http.post("/v2/interop/trace", json={"seconds": 60, "frames": frames}))

    recorder = threading.Thread(target=record, daemon=True)

    def start() -> None:
        recorder.start()
        deadline = time.monotonic() + 30
        while not httpx.get(ctx.url + "/v2/interop/trace", timeout=10).json()["recording"]:
            if not recorder.is_alive() or time.monotonic() > deadline:
                recorder.join(5)
                raise engine.LaneError(f"the service did not start a trace: {got[:1]}")
            time.sleep(0.01)

    try:
        m = engine.measure("fenceline.bench.transports:ipc_lane", _ipc(ctx, sc), sc.budget,
                           server_pids=ctx.server_pids("ipc-traced"), on_go=start)
    finally:
        if recorder.is_alive():
            httpx.delete(ctx.url + "/v2/interop/trace", timeout=10, headers=auth)
            recorder.join(150)
    if not got or got[0].status_code != 200:
        raise engine.LaneError(f"the trace failed: {got[0].text[:200] if got else 'no answer'}")
    trace = got[0].json()
    if not trace["otherData"]["frames"]:
        raise engine.LaneError("the trace recorded no frame of the row")
    out = row("ipc-traced", sc, m, ctx, "tracing on: every timed frame recorded")
    out.stages_us = trace_stages(trace, m.window_s, m.samples_s)
    return out


def trace_stages(trace: dict[str, Any], window_s: tuple[float, float] | None = None,
                 samples_s: list[float] | None = None) -> dict[str, list[float]]:
    """The durations (us) in a service trace: each frame's span ("frame") and each stage's.

    ``window_s``: only what started in this timed window (time.perf_counter seconds, the
    trace's clock), so warm-up frames are left out. ``samples_s``: that window's frame times,
    in order, of one renderer running one frame at a time; the k-th traced frame of the window
    is then the k-th sample, and ``OUTSIDE`` holds each such frame's time less its own span in
    the service: the renderer, the socket and the wakeups. (The row's p50 less the spans' p50
    compared different frames, and read negative where the model's run varied more than that.)
    """
    start_ns = trace["otherData"]["started_ns"]
    lo, hi = (-float("inf"), float("inf")) if window_s is None else (
        (window_s[0] * 1e9 - start_ns) / 1e3, (window_s[1] * 1e9 - start_ns) / 1e3)
    out: dict[str, list[float]] = {}
    for e in trace["traceEvents"]:
        if e.get("ph") == "X" and e.get("cat") in ("frame", "stage") and lo <= e["ts"] <= hi:
            out.setdefault("frame" if e["cat"] == "frame" else e["name"], []).append(e["dur"])
    if samples_s is not None:
        spans = out.get("frame", [])  # as many as the timed frames, or those the trace held
        out[OUTSIDE] = [samples_s[k] * 1e6 - spans[k] for k in range(min(len(spans), len(samples_s)))]
    return out


def _two_cpus(ctx: Context) -> str | None:
    return None if len(os.sched_getaffinity(0)) >= 2 else "needs two CPUs"


def _alternating(ctx: Context, sc: Scenario) -> list[Row]:
    """The floor and ``ipc`` in turn, 8 frames each, in one renderer: two rows of one timed
    window. Rows measured one after the other, even in rounds, each see the machine of their own
    seconds: on 2 CPUs a 4K floor read 5.0 ms then ``ipc`` 7.4 ms in the next 40 frames, and
    the ratio of five runs' rows spread 0.97-1.14; in turn it read 1.01-1.05 (docs/benchmarks.md)."""
    m = engine.measure("fenceline.bench.transports:alternating_lane",
                       {**_floor(ctx, sc), **_ipc(ctx, sc)}, sc.budget,
                       server_pids=ctx.server_pids("ipc"))
    ipc = row("ipc", sc, m, ctx, "in turn with the floor, 8 frames each")
    floor = replace(ipc, transport="in-process", samples_s=m.partner_samples_s,
                    note="floor, in turn with ipc", waits={}, service_cpu_us=None)
    # One thread ran both: its CPU is not split between the two rows, nor its wall time; each
    # row's frames/s is over its own frames' time.
    return [replace(r, cpu_per_frame_us=None, renderer_cpu_us=None,
                    throughput_fps=len(r.samples_s) / sum(r.samples_s) if r.samples_s else None)
            for r in (floor, ipc)]


def _http(ctx: Context, sc: Scenario) -> dict[str, Any]:
    return {"url": ctx.url, "model": sc.model, **_base(ctx, sc)}


def _fenceline(ctx: Context, sc: Scenario) -> dict[str, Any]:
    return {"url": ctx.url, "model": sc.model, **_base(ctx, sc)}


def _has_kserve(ctx: Context) -> str | None:
    return None if ctx.fenceline_kserve else "this fenceline has no KServe inference routes"


def _has_shm(ctx: Context) -> str | None:
    return None if ctx.fenceline_shm else "this fenceline has no Triton system shared memory"


def _has_triton(ctx: Context) -> str | None:
    return None if ctx.triton is not None else "needs --peers"


def _triton(ctx: Context, sc: Scenario) -> dict[str, Any]:
    return {"url": ctx.triton.url, "model": sc.model, "headers": ctx.triton.headers,
            **_base(ctx, sc)}


_T = "fenceline.bench.transports"
for _t in (
    Transport("in-process", "onnxruntime IOBinding over the frame, in the renderer's process",
              _lanes("in-process", f"{_T}:floor_lane", _floor, processes=False)),
    Transport("ipc", "fenceline IPC socket: signal fence, RUN, reply",
              _lanes("ipc", f"{_T}:ipc_lane", _ipc, pipelined=f"{_T}:ipc_pipelined_lane")),
    Transport("ipc-one", "fenceline IPC, one frame in flight at a time: the pipelined rows' "
              "baseline, measured in the same rounds",
              _lanes("ipc-one", f"{_T}:ipc_lane", _ipc, one_at_a_time=True)),
    Transport("ipc-traced", "fenceline IPC while the service records a per-frame trace",
              _traced),
    Transport("alternating", "the floor and fenceline IPC in turn, 8 frames each, in one "
              "renderer (the in-process and ipc rows of the alternating scenario)", _alternating,
              made_of=("in-process", "ipc")),
    Transport("in-process-cross-core",
              "the floor on a frame just written by a thread pinned to another CPU",
              _lanes("in-process-cross-core", f"{_T}:cross_core_floor_lane", _floor,
                     processes=False), available=_two_cpus),
    Transport("ipc-written", "fenceline IPC, the renderer writing its inputs before each frame",
              _lanes("ipc-written", f"{_T}:ipc_lane", _ipc_written)),
    Transport("http", "fenceline HTTP interop run on the shared frame",
              _lanes("http", f"{_T}:http_lane", _http)),
    Transport("kserve-binary", "tritonclient binary HTTP against fenceline (tensors copied)",
              _lanes("kserve-binary", f"{_T}:kserve_binary_lane", _fenceline),
              available=_has_kserve, needs=("tritonclient.http",)),
    Transport("system-shm", "tritonclient system shared memory against fenceline",
              _lanes("system-shm", f"{_T}:kserve_shm_lane", _fenceline), available=_has_shm,
              needs=("tritonclient.http",)),
    Transport("triton-binary", "Triton 2.x binary HTTP (pytriton, onnxruntime python backend)",
              _lanes("triton-binary", f"{_T}:kserve_binary_lane", _triton), peer=True,
              available=_has_triton, needs=("tritonclient.http",)),
    Transport("triton-shm", "Triton 2.x system shared memory (pytriton, onnxruntime)",
              _lanes("triton-shm", f"{_T}:kserve_shm_lane", _triton), peer=True,
              available=_has_triton, needs=("tritonclient.http",)),
):
    register(_t)


# -- adapters for measure functions of other bench modules -------------------------------------


def _streaming_module() -> Any:
    try:
        return importlib.import_module("fenceline.bench.streaming")
    except ImportError:
        return None


def _has_streaming(ctx: Context) -> str | None:
    mod = _streaming_module()
    if mod is None or not hasattr(mod, "measure_streaming"):
        return "this fenceline has no streaming sessions"
    return None


def _streaming_row(name: str, spin_us: int | None, note: str) -> Any:
    def measure(ctx: Context, sc: Scenario) -> Row | None:
        """A streaming session (the fence alone says "frame N is ready"; no message per
        frame): single FP32 renderers only, through that module's own measurement."""
        if sc.renderers != 1 or sc.mode != "sync" or sc.sig is None:
            return None
        if len(sc.sig.inputs) != 1 or sc.sig.inputs[0].datatype != "FP32":
            return None
        handoff = _streaming_module().measure_streaming(
            ctx.socket, sc.model, sc.sig.inputs[0].shape, frames=sc.budget.iterations,
            warmup=sc.budget.warmup, spin_us=spin_us)
        cpu = handoff.client_cpu_s_per_frame + (handoff.service_cpu_s_per_frame or 0.0)
        wall = sum(handoff.latencies_s)
        service = handoff.service_cpu_s_per_frame
        return Row(name, sc.size, list(handoff.latencies_s), note,
                   cpu * 1e6, sc.datatype, sc.renderers, sc.mode, sc.model,
                   len(handoff.latencies_s) / wall if wall else None,
                   renderer_cpu_us=handoff.client_cpu_s_per_frame * 1e6,
                   service_cpu_us=None if service is None else service * 1e6)

    return measure


register(Transport("streaming", "fenceline streaming session, adaptive spin-then-block waits",
                   _streaming_row("streaming", None, "fence only, adaptive waits"),
                   available=_has_streaming))
register(Transport("streaming-blocking", "fenceline streaming session, blocking waits (spin 0)",
                   _streaming_row("streaming-blocking", 0, "fence only, blocking waits"),
                   available=_has_streaming))


C_CLIENT_MODELS = ("add_64x64", "add_720p", "add_1080p")  # the example renderer's add models


def _has_c_client(ctx: Context) -> str | None:
    """Builds the C example renderer once per run (into the run's work folder)."""
    if "c-client" in ctx.programs:
        return None
    try:
        mod = importlib.import_module("fenceline.bench.c_client")
    except ImportError:
        return "the C client row is not in this build"
    if ctx.workdir is None:
        return "no work folder to build the C renderer in"
    try:
        ctx.programs["c-client"] = mod.build_renderer(ctx.workdir)
    except Exception as e:  # the C client's own error types: no compiler, no library
        return f"the C renderer does not build here: {str(e).splitlines()[0]}"
    return None


def _c_client(ctx: Context, sc: Scenario) -> Row | None:
    """The C client's example renderer in its bench mode (its own timed loop, its own check of
    the outputs), on the add models it knows."""
    if sc.model not in C_CLIENT_MODELS or sc.renderers != 1 or sc.mode != "sync":
        return None
    mod = importlib.import_module("fenceline.bench.c_client")
    # CPU over the program's whole life (start, warm-up, frames), per frame run: a slight
    # overestimate beside the other rows' timed windows.
    children0 = resource.getrusage(resource.RUSAGE_CHILDREN)
    service0 = engine.tree_cpu_s([ctx.service_pid])
    result = mod.run_c_client(ctx.socket, model=sc.model, frames=sc.budget.iterations,
                              warmup=sc.budget.warmup, binary=ctx.programs["c-client"])
    children1 = resource.getrusage(resource.RUSAGE_CHILDREN)
    service_s = engine.tree_cpu_s([ctx.service_pid]) - service0
    renderer_s = (children1.ru_utime + children1.ru_stime
                  - children0.ru_utime - children0.ru_stime)
    n = sc.budget.iterations + result.get("warmup_frames", sc.budget.warmup)  # every frame run
    check = "equal" if result.get("wrong_frames") == 0 else "differs"
    return Row("c-client", sc.size, list(result["samples_s"]), "",
               (renderer_s + service_s) / n * 1e6, sc.datatype, sc.renderers, sc.mode, sc.model,
               result.get("fps"), check, renderer_cpu_us=renderer_s / n * 1e6,
               service_cpu_us=service_s / n * 1e6)


register(Transport("c-client", "fenceline's C client (libfenceline_client) over the IPC socket",
                   _c_client, available=_has_c_client))


def load_plugins() -> None:
    for name in PLUGINS:
        try:
            mod = importlib.import_module(name)
        except ImportError:
            continue
        hook = getattr(mod, "bench_transports", None)
        if hook is not None:
            for t in hook():
                register(t)
