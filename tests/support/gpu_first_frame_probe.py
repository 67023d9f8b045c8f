"""Measures the first frame of a CUDA session on a GPU machine (docs/gpu.md, "The first frame"):
for each way of starting the service (CUDA's lazy or eager module loading, with or without the
warm-up run at session creation), a fresh ``fenceline serve`` and a Vulkan renderer in this
process that sends RUN_ASYNC for frame 1 *before* it signals the input, as docs/ipc.md allows.
It prints, per variant: whether the reply came before the signal and how long it took, the
session build time, the service's GPU memory, and the service's mappings of 8 MiB RSS or more
(/proc/PID/smaps) after the first frame and after 60.

    python tests/support/gpu_first_frame_probe.py [--json OUT.json] [--trace-dir DIR]

``--trace-dir`` preloads a small allocation tracer (built with ``cc``) into the services, which
logs every host allocation of 8 MiB or more with its native stack, to find out whose the large
mappings are. Not a test: it needs a GPU, Vulkan and onnxruntime-gpu, and takes about a minute.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from fenceline.cli.process import stop_process
from fenceline.client import IpcClient  # noqa: E402
from fenceline.client.vk_renderer import VkRenderer  # noqa: E402
from fenceline.client.vulkan import VulkanDevice  # noqa: E402
from fenceline.models import build_repository  # noqa: E402
from tests.support.service import free_port, read_smaps  # noqa: E402

SHAPE = [1, 3, 1080, 1920]
DEADLINE_S = 3.0

# Serves with cuda_session.WARM_UP set from argv[1]; the rest of argv is `fenceline serve`'s.
SERVE = (
    "import sys; import fenceline.runtime.cuda_session as cs; cs.WARM_UP = sys.argv[1] == '1'; "
    "from fenceline.cli import main; raise SystemExit(main(['serve', *sys.argv[2:]]))"
)

TRACER = r"""
#define _GNU_SOURCE
#include <dlfcn.h>
#include <execinfo.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/mman.h>
#include <unistd.h>
#define BIG (8u << 20)
extern void *__libc_malloc(size_t);
extern void *__libc_calloc(size_t, size_t);
extern void *__libc_realloc(void *, size_t);
extern void *__libc_memalign(size_t, size_t);
static __thread int busy;
static int logfd = -1;
static void note(const char *what, size_t n, void *p, int fd) {
  if (busy) return;
  busy = 1;
  if (logfd < 0) {
    const char *path = getenv("FL_TRACE_LOG");
    logfd = path ? open(path, O_WRONLY | O_CREAT | O_APPEND, 0644) : 2;
  }
  char line[160];
  int k = snprintf(line, sizeof line, "== %s %zu bytes at %p fd %d\n", what, n, p, fd);
  if (k > 0) (void)!write(logfd, line, (size_t)k);
  void *frames[32];
  int c = backtrace(frames, 32);
  backtrace_symbols_fd(frames, c, logfd);
  busy = 0;
}
void *malloc(size_t n) { void *p = __libc_malloc(n); if (n >= BIG) note("malloc", n, p, -1); return p; }
void *calloc(size_t a, size_t b) { void *p = __libc_calloc(a, b); if (a * b >= BIG) note("calloc", a * b, p, -1); return p; }
void *realloc(void *q, size_t n) { void *p = __libc_realloc(q, n); if (n >= BIG) note("realloc", n, p, -1); return p; }
void *memalign(size_t al, size_t n) { void *p = __libc_memalign(al, n); if (n >= BIG) note("memalign", n, p, -1); return p; }
void *aligned_alloc(size_t al, size_t n) { return memalign(al, n); }
int posix_memalign(void **r, size_t al, size_t n) { void *p = memalign(al, n); if (!p) return 12; *r = p; return 0; }
static void *(*real_mmap)(void *, size_t, int, int, int, off_t);
void *mmap(void *a, size_t n, int prot, int flags, int fd, off_t off) {
  if (!real_mmap) real_mmap = (void *(*)(void *, size_t, int, int, int, off_t))dlsym(RTLD_NEXT, "mmap");
  void *p = real_mmap(a, n, prot, flags, fd, off);
  if (n >= BIG && (prot & PROT_WRITE)) note("mmap", n, p, fd);
  return p;
}
void *mmap64(void *a, size_t n, int prot, int flags, int fd, off_t off) { return mmap(a, n, prot, flags, fd, off); }
"""


def build_tracer(out: Path) -> Path | None:
    src = out / "fl_alloc_trace.c"
    lib = out / "fl_alloc_trace.so"
    src.write_text(TRACER)
    r = subprocess.run(["cc", "-shared", "-fPIC", "-O1", "-o", str(lib), str(src), "-ldl"],
                       capture_output=True, text=True)
    if r.returncode:
        print(f"tracer does not build: {r.stderr}", file=sys.stderr)
        return None
    return lib


def gpu_memory_mib(pid: int) -> int | None:
    try:
        out = subprocess.run(
            ["nvidia-smi", "--query-compute-apps=pid,used_memory", "--format=csv,noheader,nounits"],
            capture_output=True, text=True, timeout=20,
        ).stdout
    except (OSError, subprocess.TimeoutExpired):
        return None
    for line in out.splitlines():
        p, _, mib = line.partition(",")
        if p.strip() == str(pid):
            return int(mib)
    return None


def big_mappings(pid: int, floor_kb: int = 8 * 1024) -> list[dict[str, Any]]:
    return [
        {"range": m.range, "name": m.name or "(anonymous)", "size_kb": m.size_kb, "rss_kb": m.rss_kb}
        for m in read_smaps(pid) if m.rss_kb >= floor_kb
    ]


def first_frame(client: IpcClient, r: VkRenderer) -> dict[str, Any]:
    got: list[float] = []
    t0 = time.perf_counter()
    t = threading.Thread(
        target=lambda: (client.run_async(r.slots[0].session, 1), got.append(time.perf_counter())),
        daemon=True,
    )
    t.start()
    t.join(DEADLINE_S)
    before_signal = not t.is_alive()
    signalled = time.perf_counter()
    r.fill(0, 1)
    t.join(60)
    done = r.wait_output(0, 1, timeout_s=10)
    ok = done and bool(np.array_equal(r.read_output(0, 1), np.full(SHAPE, 1.5, np.float32)))
    return {
        "replied_before_signal": before_signal,
        "reply_ms": round((got[0] - t0) * 1e3, 2) if got else None,
        "reply_after_signal_ms": round((got[0] - signalled) * 1e3, 2)
        if got and not before_signal else None,
        "output_correct": ok,
    }


def variant(repo: Path, tmp: Path, loading: str, warm_up: bool, device: VulkanDevice,
            tracer: Path | None, trace_dir: Path | None) -> dict[str, Any]:
    name = f"{loading.lower()}{'+warmup' if warm_up else ''}"
    sock = tmp / f"{name}.sock"
    port = free_port()
    env = dict(os.environ, CUDA_MODULE_LOADING=loading, PYTHONUNBUFFERED="1")
    if tracer is not None and trace_dir is not None:
        env.update(LD_PRELOAD=str(tracer), FL_TRACE_LOG=str(trace_dir / f"trace-{name}.txt"))
    log = (tmp / f"{name}.log").open("wb")
    t0 = time.perf_counter()
    proc = subprocess.Popen(
        [sys.executable, "-c", SERVE, "1" if warm_up else "0", "--model-repository", str(repo),
         "--port", str(port), "--socket", str(sock)],
        stdout=log, stderr=subprocess.STDOUT, env=env,
    )
    res: dict[str, Any] = {"variant": name}
    try:
        while not sock.exists():
            if proc.poll() is not None or time.perf_counter() - t0 > 120:
                raise RuntimeError(f"service {name} did not start: {(tmp / f'{name}.log').read_text()}")
            time.sleep(0.05)
        time.sleep(0.5)
        res["start_s"] = round(time.perf_counter() - t0, 2)
        res["maps_idle"] = big_mappings(proc.pid)
        with IpcClient(sock) as c:
            for k in (1, 2):
                t1 = time.perf_counter()
                with VkRenderer(c, "add_1080p", SHAPE, device=device) as r:
                    res[f"session{k}_build_ms"] = round((time.perf_counter() - t1) * 1e3, 1)
                    res[f"session{k}_first_frame"] = first_frame(c, r)
                    if k == 1:
                        res["maps_after_first_frame"] = big_mappings(proc.pid)
                        rtts = []
                        for n in range(2, 62):
                            r.fill(0, n)
                            t2 = time.perf_counter()
                            c.run_async(r.slots[0].session, n)
                            assert r.wait_output(0, n, timeout_s=10)
                            rtts.append(time.perf_counter() - t2)
                        res["rtt_p50_us"] = round(statistics.median(rtts) * 1e6)
                        res["maps_after_61_frames"] = big_mappings(proc.pid)
                        res["gpu_mib"] = gpu_memory_mib(proc.pid)
                        res["rss_kb"] = sum(m.rss_kb for m in read_smaps(proc.pid))
    finally:
        stop_process(proc, 30)
        log.close()
    return res


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--json", type=Path)
    p.add_argument("--trace-dir", type=Path)
    args = p.parse_args()
    tmp = Path(tempfile.mkdtemp(prefix="fl-first-frame-"))
    repo = build_repository(tmp / "models", ["add_1080p"])
    (repo / "add_1080p" / "config.json").write_text(json.dumps({"execution_provider": "cuda"}))
    tracer = None
    if args.trace_dir is not None:
        args.trace_dir.mkdir(parents=True, exist_ok=True)
        tracer = build_tracer(tmp)
    results = []
    with VulkanDevice() as device:
        for loading, warm_up in (("LAZY", False), ("LAZY", True), ("EAGER", False), ("EAGER", True)):
            res = variant(repo, tmp, loading, warm_up, device, tracer, args.trace_dir)
            results.append(res)
            print(json.dumps(res), flush=True)
    print(f"\n{'variant':<14} {'start s':>7} {'build ms':>9} {'1st reply ms':>12} "
          f"{'before signal':>13} {'2nd session':>11} {'p50 us':>7} {'GPU MiB':>7}")
    for r in results:
        f1, f2 = r["session1_first_frame"], r["session2_first_frame"]
        print(f"{r['variant']:<14} {r['start_s']:>7} {r['session1_build_ms']:>9} "
              f"{f1['reply_ms']!s:>12} {f1['replied_before_signal']!s:>13} "
              f"{f2['replied_before_signal']!s:>11} {r['rtt_p50_us']:>7} {r['gpu_mib']!s:>7}")
    if args.json:
        args.json.write_text(json.dumps(results, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
