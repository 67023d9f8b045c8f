"""The C client's per-frame round trip, for ``fenceline bench``.

:func:`run_c_client` builds the example renderer (``native/client/examples/renderer.c``, installed
as ``fenceline/share/examples``) with the system C compiler against the installed
``libfenceline_client`` and runs it in ``--bench`` mode against a service's socket. One frame is
timed from signalling the input fence through RUN to the output fence reaching the value, the
same loop :func:`run_python_client` times with :class:`fenceline.client.IpcClient`.

``python -m fenceline.bench.c_client`` starts a service and prints both, side by side.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from fenceline.bench.engine import WARM_S
from fenceline.client.c_api import c_compile_flags, c_examples_dir, c_link_flags, find_c_compiler
from fenceline.client.errors import ClientError


def build_renderer(out_dir: Path, cc: str | None = None) -> Path:
    """Compiles the example renderer into ``out_dir``; returns the program's path."""
    compiler = cc or find_c_compiler()
    if compiler is None:
        raise ClientError("no C compiler found (set CC, or install cc, gcc or clang)")
    out = Path(out_dir) / "fenceline-c-renderer"
    cmd = [
        compiler, "-std=c11", "-O2", "-Wall", "-Wextra", *c_compile_flags(),
        str(c_examples_dir() / "renderer.c"), "-o", str(out), *c_link_flags(), "-lm",
    ]
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=120)
    if r.returncode != 0:
        raise ClientError(f"building the C renderer failed:\n{' '.join(cmd)}\n{r.stderr}")
    return out


def run_c_client(
    socket: str | Path,
    *,
    model: str = "add_64x64",
    frames: int = 2000,
    warmup: int = 200,
    binary: Path | None = None,
    timeout_s: float = 300,
) -> dict[str, Any]:
    """Runs the C renderer's bench mode against ``socket``. Returns its JSON line as a dict:
    ``p50_us``, ``p99_us``, ``mean_us`` (client round trip), ``service_mean_us``, ``fps``,
    ``frames``, ``wrong_frames``, plus ``samples_s``: every timed round trip in seconds, in
    frame order (for :class:`fenceline.bench.stats.Row`)."""
    with tempfile.TemporaryDirectory(prefix="fenceline-c-bench-") as tmp:
        program = binary or build_renderer(Path(tmp))
        samples = Path(tmp) / "samples.txt"
        cmd = [
            str(program), "--bench", "--socket", str(socket), "--model", model,
            "--frames", str(frames), "--warmup", str(warmup), "--samples", str(samples),
            "--warmup-ms", str(round(WARM_S * 1000)),
        ]
        r = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout_s)
        samples_s = [float(x) / 1e6 for x in samples.read_text().split()] if samples.exists() else []
    if r.returncode != 0:
        raise ClientError(f"the C renderer failed ({r.returncode}): {r.stderr.strip()}")
    lines = [line for line in r.stdout.splitlines() if line.startswith("{")]
    if not lines:
        raise ClientError(f"the C renderer printed no result: {r.stdout!r}")
    result: dict[str, Any] = json.loads(lines[-1])
    result["samples_s"] = samples_s
    return result


def _percentile(sorted_us: list[float], q: float) -> float:
    i = int(q * (len(sorted_us) - 1) + 0.5)
    return sorted_us[min(i, len(sorted_us) - 1)]


def run_python_client(
    socket: str | Path, *, frames: int = 2000, warmup: int = 200
) -> dict[str, Any]:
    """The same timed loop as the C renderer's bench mode, with the Python IpcClient, on
    add_64x64: a flat frame written once, a few pixels checked after each run."""
    import numpy as np

    from fenceline.client import Fence, IpcClient, SharedFrame, View

    shape = [1, 3, 64, 64]
    nbytes = 3 * 64 * 64 * 4
    with SharedFrame(2 * nbytes) as frame, Fence() as ready, Fence() as done, IpcClient(
        socket, name="python-bench"
    ) as client:
        x = frame.array(np.float32, shape)
        y = frame.array(np.float32, shape, nbytes)
        x.fill(0.25)
        mem = client.import_memory(frame)
        sid = client.create_session(
            "add_64x64",
            {"x": View(mem, "FP32", shape)},
            {"y": View(mem, "FP32", shape, nbytes)},
            client.import_fence(ready),
            client.import_fence(done),
        )["id"]
        times: list[float] = []
        wrong = 0
        start = 0
        for i in range(warmup + frames):
            if i == warmup:
                start = time.perf_counter_ns()
            v = i + 1
            t0 = time.perf_counter_ns()
            ready.signal(v)
            client.run(sid, v)
            done.wait(v, 1.0)
            t1 = time.perf_counter_ns()
            wrong += int(y[0, 0, 0, 0] != 1.25 or y[0, 2, 63, 63] != 1.25)
            if i >= warmup:
                times.append((t1 - t0) / 1e3)
        elapsed_s = (time.perf_counter_ns() - start) / 1e9
    times.sort()
    return {
        "client": "python",
        "model": "add_64x64",
        "frames": frames,
        "p50_us": round(_percentile(times, 0.50), 2),
        "p99_us": round(_percentile(times, 0.99), 2),
        "mean_us": round(sum(times) / len(times), 2),
        "fps": round(frames / elapsed_s, 1),
        "wrong_frames": wrong,
    }


def _start_service(tmp: Path) -> tuple[subprocess.Popen[bytes], Path]:
    from fenceline.client import IpcClient
    from fenceline.models import build_repository

    repo = build_repository(tmp / "models", ["add_64x64"])
    sock = tmp / "fenceline.sock"
    proc = subprocess.Popen(
        [sys.executable, "-m", "fenceline", "serve", "--model-repository", str(repo),
         "--port", "0", "--socket", str(sock), "--log-level", "warning"],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise ClientError(f"the service exited with {proc.returncode}")
        if sock.exists():
            try:
                IpcClient(sock).close()
                return proc, sock
            except ClientError:
                pass
        time.sleep(0.1)
    proc.kill()
    raise ClientError("the service did not start within 60 s")


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(
        prog="python -m fenceline.bench.c_client",
        description="RUN round trip on add_64x64: the C client next to the Python IpcClient.",
    )
    p.add_argument("--socket", type=Path, help="a running service (default: start one)")
    p.add_argument("--frames", type=int, default=2000)
    p.add_argument("--warmup", type=int, default=200)
    args = p.parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="fenceline-c-bench-") as tmp:
        proc = None
        sock = args.socket
        if sock is None:
            proc, sock = _start_service(Path(tmp))
        try:
            c = run_c_client(sock, frames=args.frames, warmup=args.warmup)
            py = run_python_client(sock, frames=args.frames, warmup=args.warmup)
        finally:
            if proc is not None:
                proc.terminate()
                proc.wait(20)
    c.pop("samples_s")
    for r in (c, py):
        print(json.dumps(r))
    print(f"p50: C {c['p50_us']:.1f} us, Python {py['p50_us']:.1f} us "
          f"(C/Python {c['p50_us'] / py['p50_us']:.2f}); "
          f"p99: C {c['p99_us']:.1f} us, Python {py['p99_us']:.1f} us")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
