"""The transports a row can be measured through: a small registry of functions
``(Context, Scenario) -> Row | None`` (None: not available in this run, with the reason in
``Context.skipped``).

Modules of the bench package may add their own rows: a module listed in ``PLUGINS`` that
defines ``bench_transports() -> list[Transport]`` has them registered when it imports; the
adapters below cover the measure functions of modules that do not.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from fenceline.bench import engine
from fenceline.bench.scenarios import Scenario
from fenceline.bench.stats import Row

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
    skipped: dict[str, str] = field(default_factory=dict)  # transport -> why not measured

    def server_pids(self, transport: str) -> list[int]:
        if transport.startswith("triton"):
            return [self.triton.pid] if self.triton is not None and self.triton.pid else []
        return [] if transport == "in-process" else [self.service_pid]


Measure = Callable[[Context, Scenario], Row | None]


@dataclass(frozen=True)
class Transport:
    name: str
    describe: str
    measure: Measure
    peer: bool = False  # needs --peers


REGISTRY: dict[str, Transport] = {}


def register(t: Transport) -> None:
    REGISTRY[t.name] = t


def row(name: str, sc: Scenario, m: engine.Measured, ctx: Context, note: str = "") -> Row:
    want = ctx.expected.get(expected_key(sc))
    check = "" if want is None else ("equal" if all(d == want for d in m.digests) else "differs")
    return Row(name, sc.size, m.samples_s, note, m.cpu_per_frame_us(), sc.datatype,
               sc.renderers, sc.mode, sc.model, m.throughput_fps, check)


def expected_key(sc: Scenario) -> str:
    return f"{sc.model}/{sc.fill}"


def _lanes(name: str, target: str, kwargs: Callable[[Context, Scenario], dict[str, Any] | None],
           *, processes: bool = True) -> Measure:
    def measure(ctx: Context, sc: Scenario) -> Row | None:
        args = kwargs(ctx, sc)
        if args is None:
            return None
        m = engine.measure(target, args, sc.budget, renderers=sc.renderers, depth=sc.depth,
                           processes=processes, server_pids=ctx.server_pids(name))
        return row(name, sc, m, ctx, "floor" if name == "in-process" else "")

    return measure


def _base(ctx: Context, sc: Scenario) -> dict[str, Any]:
    return {"sig": sc.sig, "fill": sc.fill}


def _floor(ctx: Context, sc: Scenario) -> dict[str, Any]:
    return {"model_path": str(ctx.models[sc.model]), **_base(ctx, sc)}


def _ipc(ctx: Context, sc: Scenario) -> dict[str, Any]:
    return {"socket_path": str(ctx.socket), "model": sc.model, **_base(ctx, sc)}


def _http(ctx: Context, sc: Scenario) -> dict[str, Any]:
    return {"url": ctx.url, "model": sc.model, **_base(ctx, sc)}


def _fenceline_kserve(shm: bool) -> Callable[[Context, Scenario], dict[str, Any] | None]:
    def kwargs(ctx: Context, sc: Scenario) -> dict[str, Any] | None:
        if not (ctx.fenceline_shm if shm else ctx.fenceline_kserve):
            ctx.skipped["system-shm" if shm else "kserve-binary"] = (
                "this fenceline has no KServe inference routes" if not ctx.fenceline_kserve
                else "this fenceline has no Triton system shared-memory routes")
            return None
        return {"url": ctx.url, "model": sc.model, **_base(ctx, sc)}

    return kwargs


def _triton(ctx: Context, sc: Scenario) -> dict[str, Any] | None:
    if ctx.triton is None:
        return None
    return {"url": ctx.triton.url, "model": sc.model, "headers": ctx.triton.headers,
            **_base(ctx, sc)}


_T = "fenceline.bench.transports"
for _t in (
    Transport("in-process", "onnxruntime IOBinding over the frame, in the renderer's process",
              _lanes("in-process", f"{_T}:floor_lane", _floor, processes=False)),
    Transport("ipc", "fenceline IPC socket: signal fence, RUN, reply",
              _lanes("ipc", f"{_T}:ipc_lane", _ipc)),
    Transport("http", "fenceline HTTP interop run on the shared frame",
              _lanes("http", f"{_T}:http_lane", _http)),
    Transport("kserve-binary", "tritonclient binary HTTP against fenceline (tensors copied)",
              _lanes("kserve-binary", f"{_T}:kserve_binary_lane", _fenceline_kserve(False))),
    Transport("system-shm", "tritonclient system shared memory against fenceline",
              _lanes("system-shm", f"{_T}:kserve_shm_lane", _fenceline_kserve(True))),
    Transport("triton-binary", "Triton 2.x binary HTTP (pytriton, onnxruntime python backend)",
              _lanes("triton-binary", f"{_T}:kserve_binary_lane", _triton), peer=True),
    Transport("triton-shm", "Triton 2.x system shared memory (pytriton, onnxruntime)",
              _lanes("triton-shm", f"{_T}:kserve_shm_lane", _triton), peer=True),
):
    register(_t)


# -- adapters for measure functions of other bench modules -------------------------------------


def _streaming(ctx: Context, sc: Scenario) -> Row | None:
    """A streaming session (the fence alone says "frame N is ready"; no message per frame)."""
    try:
        mod = importlib.import_module("fenceline.bench.streaming")
    except ImportError:
        ctx.skipped["streaming"] = "this fenceline has no streaming sessions"
        return None
    fn = getattr(mod, "measure_streaming", None)
    if fn is None or sc.renderers != 1 or sc.mode != "sync" or sc.sig is None:
        return None
    if len(sc.sig.inputs) != 1 or sc.sig.inputs[0].datatype != "FP32":
        return None
    shape = sc.sig.inputs[0].shape
    handoff = fn(ctx.socket, sc.model, shape, frames=sc.budget.iterations,
                 warmup=sc.budget.warmup)
    cpu = handoff.client_cpu_s_per_frame + (handoff.service_cpu_s_per_frame or 0.0)
    wall = sum(handoff.latencies_s)
    return Row("streaming", sc.size, list(handoff.latencies_s), "fence only, no message",
               cpu * 1e6, sc.datatype, sc.renderers, sc.mode, sc.model,
               len(handoff.latencies_s) / wall if wall else None)


register(Transport("streaming", "fenceline streaming session: signal, wait on output fence",
                   _streaming))


def _c_client_missing(ctx: Context, sc: Scenario) -> Row | None:
    ctx.skipped.setdefault("c-client", "the C client row is not in this build")
    return None


register(Transport("c-client", "fenceline's C client over the IPC socket", _c_client_missing))


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
