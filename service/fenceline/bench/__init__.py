"""``fenceline bench``: per-frame latency through every transport, beside the in-process floor,
measured in one run on the same models and buffers."""

from __future__ import annotations

import json
import os
import platform
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np

from fenceline.bench import transports
from fenceline.bench.stats import Progress, Row, table
from fenceline.cli.process import start_service, stop_service
from fenceline.models.builtin import cache_dir

SIZES = {"64x64": ("add_64x64", [1, 3, 64, 64]), "1080p": ("add_1080p", [1, 3, 1080, 1920])}

# (iterations, warm-up) per size and transport
PLAN = {
    "64x64": {"in-process": (3000, 300), "ipc": (3000, 300), "http": (300, 30)},
    "1080p": {"in-process": (60, 6), "ipc": (60, 6), "http": (40, 4)},
}
QUICK = {
    "64x64": {"in-process": (100, 10), "ipc": (100, 10), "http": (20, 2)},
    "1080p": {"in-process": (5, 1), "ipc": (5, 1), "http": (3, 1)},
}


def goals(rows: list[Row]) -> list[dict[str, Any]]:
    by = {(r.size, r.transport): r for r in rows}
    out = []

    def ratio(size: str, a: str, b: str) -> float | None:
        ra, rb = by.get((size, a)), by.get((size, b))
        return ra.p50_us / rb.p50_us if ra and rb and rb.p50_us else None

    r = ratio("1080p", "ipc", "in-process")
    if r is not None:
        out.append({"goal": "IPC 1080p within 1.2x of in-process", "value": round(r, 3), "met": r <= 1.2})
    a, b = by.get(("64x64", "ipc")), by.get(("64x64", "in-process"))
    if a and b:
        d = a.p50_us - b.p50_us
        out.append({"goal": "IPC 64x64 within 40 us of in-process", "value": round(d, 1), "met": d <= 40})
    return out


def run_bench(*, quick: bool = False, json_path: Path | None = None) -> int:
    plan = QUICK if quick else PLAN
    total = sum(len(v) for v in plan.values())
    print(f"fenceline bench on {platform.machine()} with {os.cpu_count()} CPUs"
          f"{' (quick)' if quick else ''}", flush=True)
    rows: list[Row] = []
    with tempfile.TemporaryDirectory(prefix="fenceline-bench-") as tmp:
        proc, url, sock = start_service([m for m, _ in SIZES.values()], Path(tmp))
        progress = Progress(total)
        try:
            for size, (model, shape) in SIZES.items():
                model_path = cache_dir() / model / "1" / "model.onnx"
                buffers = transports.Buffers.create(shape)
                try:
                    steps = plan[size]
                    n, w = steps["in-process"]
                    samples = transports.in_process(model_path, buffers, n, w)
                    rows.append(Row("in-process", size, samples, "floor"))
                    progress.step(f"{size} in-process")
                    want = buffers.output.copy()
                    buffers.output[:] = 0
                    n, w = steps["ipc"]
                    rows.append(Row("ipc", size, transports.ipc(sock, model, buffers, n, w)))
                    progress.step(f"{size} ipc")
                    if not np.array_equal(buffers.output, want):
                        raise AssertionError(f"{size}: IPC output differs from the in-process run")
                    n, w = steps["http"]
                    rows.append(Row("http", size, transports.http(url, model, buffers, n, w)))
                    progress.step(f"{size} http")
                finally:
                    buffers.close()
        finally:
            progress.close()
            stop_service(proc)
    floors = {r.size: r for r in rows if r.transport == "in-process"}
    print(table(rows, floors))
    results = goals(rows)
    for g in results:
        print(f"  {'met' if g['met'] else 'MISSED':>6}  {g['goal']}: {g['value']}")
    if json_path is not None:
        doc = {
            "date": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
            "machine": {"arch": platform.machine(), "cpus": os.cpu_count(), "system": platform.platform()},
            "quick": quick,
            "rows": [r.summary() for r in rows],
            "goals": results,
        }
        json_path.write_text(json.dumps(doc, indent=2))
        print(f"results written to {json_path}")
    return 0
