"""The bench's run: plan the scenarios, start the service (and the Triton peer), measure
every row, then print the table and goals and write the JSON and the plot."""

from __future__ import annotations

import contextlib
import importlib.util
import os
import tempfile
import time
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import httpx

from fenceline.bench import realmodel, registry, report, scenarios
from fenceline.bench.buffers import digest, direct_outputs, signature
from fenceline.bench.engine import LaneError
from fenceline.bench.floors import floors, format_floors
from fenceline.bench.scenarios import RealModel, Scenario
from fenceline.bench.stats import Progress, Row
from fenceline.cli.process import start_service, stop_service
from fenceline.errors import FencelineError, InvalidArgument, Unsupported
from fenceline.models.builtin import BUILTIN, build_repository, cache_dir

QUICK_SIZES = ["64x64", "720p"]


def _probe_kserve(url: str, model: str) -> tuple[bool, bool]:
    """Whether the service answers KServe v2 inference, and Triton's system-shm routes."""
    body = {"inputs": [{"name": "x", "shape": [1, 1], "datatype": "FP32", "data": [0.0]}]}
    try:
        with httpx.Client(base_url=url, timeout=10) as http:
            # A wrong shape answers 400 where inference exists, 404/405 where it does not.
            infer = http.post(f"/v2/models/{model}/infer", json=body).status_code in (200, 400)
            shm = http.get("/v2/systemsharedmemory/status").status_code == 200
    except httpx.HTTPError:
        return False, False
    return infer, infer and shm


def turns(transports: tuple[str, ...], round_: int) -> tuple[str, ...]:
    """The order of a round's rows: each round starts one transport further on, and every
    other round runs the rest backwards, so that no row has a fixed place in the rounds or
    always runs right after the same row: on the 16-core machine the row that always ran right
    after the floor's read slower than the same client's next row, for no reason found (720p
    1.18 / 1.38 of the floor against 1.12 / 1.12, 1080p 1.32 / 1.30 against 1.12 / 1.11, in two
    leases)."""
    k = round_ % len(transports) if transports else 0
    order = transports[k:] + transports[:k]
    return order[:1] + order[:0:-1] if round_ % 2 else order


def _measure_scenario(ctx: registry.Context, s: Scenario, progress: Progress,
                      failures: list[dict[str, str]]) -> list[Row]:
    rounds = s.rounds
    part = replace(s, budget=s.budget.part(rounds))
    got: dict[str, Row] = {}
    failed: set[str] = set()
    for k in range(rounds):
        for t in turns(s.transports, k):
            progress.step(f"{s.label}: {t}" + (f" (round {k + 1}/{rounds})" if rounds > 1 else ""))
            if t in failed:
                continue
            try:
                measured = registry.REGISTRY[t].measure(ctx, part)
            except (LaneError, FencelineError, OSError, RuntimeError, ValueError) as e:
                failed.add(t)
                for name in registry.REGISTRY[t].made_of or (t,):
                    got.pop(name, None)
                failures.append({"scenario": s.label, "transport": t, "error": str(e)})
                progress.note(f"{s.label}: {t} failed: {str(e).splitlines()[0][:200]}")
                continue
            if measured is None:
                failed.add(t)  # nothing to measure in this scenario
                continue
            for row in measured if isinstance(measured, list) else [measured]:
                got[row.transport] = (got[row.transport].merged(row) if row.transport in got
                                      else row)
    return list(got.values())


def _real_models(use_packaged: bool, extra: dict[str, Path]) -> list[RealModel]:
    out = []
    if use_packaged:
        path = realmodel.find_model()
        if path is not None:
            out.append(RealModel(realmodel.NAME, path, realmodel.IMAGE))
    for name, path in extra.items():
        if name in BUILTIN or name == realmodel.NAME:
            raise InvalidArgument(f"--model {name}: the name is taken by a bundled model")
        if not path.is_file():
            raise InvalidArgument(f"--model {name}: no file at {path}")
        out.append(RealModel(name, path, realmodel.IMAGE))
    return out


@dataclass
class _Run:
    rows: list[Row] = field(default_factory=list)
    failures: list[dict[str, str]] = field(default_factory=list)
    skipped: dict[str, str] = field(default_factory=dict)
    real_checks: dict[str, Any] = field(default_factory=dict)
    servers: dict[str, str | None] = field(default_factory=dict)


def _check(sizes: list[str] | None, transports: list[str] | None, peers: bool,
           plot_path: Path | None) -> None:
    """Every user error before anything starts, with what to do about it."""
    for name in transports or []:
        if name not in registry.REGISTRY:
            raise InvalidArgument(f"unknown transport {name!r}; use some of "
                                  f"{', '.join(registry.REGISTRY)}")
    for size in sizes or []:
        if size not in scenarios.SIZES:
            raise InvalidArgument(f"unknown size {size!r}; use some of {', '.join(scenarios.SIZES)}")
    if peers:
        from fenceline.bench import triton

        why = triton.available()
        if why is not None:
            raise Unsupported(f"--peers needs a Triton peer: {why}")
    if plot_path is not None and importlib.util.find_spec("matplotlib") is None:
        raise Unsupported("--plot needs matplotlib, from the [bench] extra: pip install '.[bench]'")


def _plan(quick: bool, sizes: list[str] | None, transports: list[str] | None, peers: bool,
          reals: list[RealModel], seconds: float | None) -> list[Scenario]:
    chosen = sizes if sizes is not None else (QUICK_SIZES if quick else None)
    plan = scenarios.plan(quick=quick, sizes=chosen, real=reals[0] if reals else None,
                          seconds=seconds)
    for more in reals[1:]:
        plan += scenarios.plan(quick=quick, sizes=[], real=more, seconds=seconds)

    def wanted(t: str) -> bool:
        if t not in registry.REGISTRY or (registry.REGISTRY[t].peer and not peers):
            return False
        made_of = registry.REGISTRY[t].made_of
        return (transports is None or t in transports
                or (bool(made_of) and all(m in transports for m in made_of)))

    return [s for s in (replace(s, transports=tuple(t for t in s.transports if wanted(t)))
                        for s in plan) if s.transports]


def _measure(plan: list[Scenario], reals: list[RealModel], peers: bool) -> _Run:
    run = _Run()
    repo = cache_dir()
    builtin = sorted({s.model for s in plan if s.model in BUILTIN})
    build_repository(repo, builtin)
    paths = {m: repo / m / "1" / "model.onnx" for m in builtin}
    paths.update({r.name: r.path for r in reals})
    images = {r.name: r.image for r in reals}
    sigs = {m: signature(p, images.get(m)) for m, p in paths.items()}
    plan = [replace(s, sig=sigs[s.model]) for s in plan]
    with tempfile.TemporaryDirectory(prefix="fenceline-bench-") as tmp, \
            contextlib.ExitStack() as stack:
        extra: list[str] = []
        for r in reals:
            extra += ["--model", f"{r.name}={r.path}"]
        proc, url, sock = start_service(builtin, Path(tmp), extra=tuple(extra))
        stack.callback(stop_service, proc)
        kserve, shm = _probe_kserve(url, builtin[0] if builtin else reals[0].name)
        ctx = registry.Context(url, sock, proc.pid, paths, fenceline_kserve=kserve,
                               fenceline_shm=shm, workdir=Path(tmp))
        for s in plan:
            key = registry.expected_key(s)
            if key not in ctx.expected:
                assert s.sig is not None
                outs = direct_outputs(paths[s.model], s.sig, s.fill)
                ctx.expected[key] = digest(outs)
                if s.model in images:
                    run.real_checks[s.model] = {
                        "image": list(images[s.model]), "path": str(paths[s.model]),
                        "text_fraction": round(realmodel.text_fraction(outs[0]), 4)}
        if not peers:
            run.skipped["triton-binary, triton-shm"] = "run with --peers to start a Triton peer"
        else:
            ctx.triton = _start_triton(stack, plan, paths, Path(tmp), run)
        for name in sorted({t for s in plan for t in s.transports}):
            why = registry.missing(registry.REGISTRY[name]) or registry.REGISTRY[name].available(ctx)
            if why is not None:
                run.skipped[name] = why
        plan = [replace(s, transports=tuple(t for t in s.transports if t not in run.skipped))
                for s in plan]
        progress = Progress(sum(len(s.transports) * s.rounds for s in plan))
        stack.callback(progress.close)
        for s in plan:
            run.rows += _measure_scenario(ctx, s, progress, run.failures)
        run.servers["tritonserver"] = ctx.triton.version if ctx.triton is not None else None
    for name, check in run.real_checks.items():
        check["rows"] = {r.transport: r.check for r in run.rows if r.model == name}
    return run


def _start_triton(stack: contextlib.ExitStack, plan: list[Scenario], paths: dict[str, Path],
                  workdir: Path, run: _Run) -> Any:
    """The Triton peer, or None (the failure recorded) when it cannot start: the rest of the
    run still measures."""
    from fenceline.bench.triton import TritonPeer

    served = {s.model: paths[s.model] for s in plan
              if any(t.startswith("triton") for t in s.transports)}
    if not served:
        return None
    print(f"starting Triton (pytriton) with {len(served)} models ...", flush=True)
    try:
        peer = stack.enter_context(TritonPeer(served, workdir))
    except FencelineError as e:
        run.failures.append({"scenario": "all", "transport": "triton", "error": e.message})
        print(f"the Triton peer did not start: {e.message}", flush=True)
        return None
    print(f"Triton {peer.version} ready on {peer.url}", flush=True)
    return peer


def _floors() -> dict[str, Any]:
    """The machine's handoff floors (fenceline.bench.floors), measured in this run."""
    try:
        return floors()
    except Exception as e:  # no C compiler, or a floor program failed: say so, keep the rest
        return {"error": str(e)[:300]}


def _output(run: _Run, doc: dict[str, Any], json_path: Path | None, plot_path: Path | None,
            markdown_path: Path | None) -> None:
    print(report.table(run.rows))
    print()
    print(format_floors(doc.get("floors", {})))
    print()
    print(report.format_goals(doc["goals"]))
    if run.skipped:
        why: dict[str, list[str]] = {}  # one entry per reason: "a, b (needs tritonclient ...)"
        for name, reason in run.skipped.items():
            why.setdefault(reason, []).append(name)
        print("not measured: " + "; ".join(f"{', '.join(k)} ({v})" for v, k in why.items()))
    for f in run.failures:
        print(f"FAILED {f['scenario']}: {f['transport']}: {f['error'].splitlines()[0][:300]}")
    print(f"bench took {doc['duration_s']:.0f} s")

    def draw(path: Path) -> None:
        from fenceline.bench.plot import plot

        m = doc["machine"]
        title = (f"fenceline bench, {doc['date'][:16].replace('T', ' ')} UTC, {m['cpu']} "
                 f"({m['cpus']} CPUs, load {doc['loadavg_start'][0]} at the start)")
        plot(run.rows, path, title)

    report.write_outputs(doc, json_path, plot_path, draw, markdown_path)


def run_bench(*, quick: bool = False, json_path: Path | None = None,
              plot_path: Path | None = None, peers: bool = False,
              sizes: list[str] | None = None, transports: list[str] | None = None,
              models: dict[str, Path] | None = None, real_model: bool = True,
              seconds: float | None = None, markdown_path: Path | None = None) -> int:
    """Runs the suite; returns 0, or 1 when a row failed or gave outputs that differ from a
    direct onnxruntime run. Speed goals are reported, never turned into the exit status."""
    t_start = time.monotonic()
    registry.load_plugins()
    _check(sizes, transports, peers, plot_path)
    reals = _real_models(real_model, models or {})
    plan = _plan(quick, sizes, transports, peers, reals, seconds)
    loadavg = [round(v, 2) for v in os.getloadavg()]
    print(f"fenceline bench: {len(plan)} scenarios on {report.machine()['cpu'] or 'this CPU'}, "
          f"{len(os.sched_getaffinity(0))} CPUs, load {loadavg[0]}{' (quick)' if quick else ''}"
          f"{' with a Triton peer' if peers else ''}", flush=True)
    run = _measure(plan, reals, peers)
    if real_model and realmodel.find_model() is None:
        package = realmodel.PACKAGE.replace("_", "-")
        run.skipped[realmodel.NAME] = f"needs {package}, from the [bench] extra: pip install '.[bench]'"
    machine_floors = _floors()
    real_size = next((s.size for s in plan if s.model in run.real_checks), None)
    goals = (report.machine_goals(run.rows) + report.goals(run.rows, real_size)
             + report.floor_goals(run.rows, machine_floors))
    doc = report.document(
        run.rows, goals, quick=quick, peers=peers,
        duration_s=round(time.monotonic() - t_start, 1), loadavg_start=loadavg,
        scenarios=[s.label for s in plan], servers=run.servers, real_models=run.real_checks,
        skipped=run.skipped, failures=run.failures,
    )
    doc["floors"] = machine_floors
    _output(run, doc, json_path, plot_path, markdown_path)
    differs = [f"{r.scenario_label}: {r.transport}" for r in run.rows if r.check == "differs"]
    if differs:
        print("OUTPUTS DIFFER from a direct onnxruntime run: " + ", ".join(differs))
    return 1 if run.failures or differs else 0
