"""The machine's handoff floors: what a per-frame handoff between two processes costs at best on
this machine, measured in the same run as fenceline's rows, so a goal can be a ratio against the
machine itself.

- ``uds_round_trip``: a SOCK_SEQPACKET 64-byte round trip between two processes pinned to two
  different CPUs (the parent on one, the child on the other): a wakeup across CPUs, the cost the
  request-per-frame goal is measured against. Always our own program (:data:`FLOOR_C`), since
  it takes the two CPUs as arguments and reports where each side ran.
- ``uds_round_trip_free_placement``: the same round trip with both processes free, placed by
  the scheduler. It often puts both on one CPU, and then this reads as the one-CPU figure.
- ``uds_round_trip_one_cpu``: both processes pinned to one CPU (a switch, no cross-CPU wakeup).
- ``spin_round_trip``: a shared-memory spin ping-pong, both sides spinning.

The free, one-CPU and spin rows run the machine's own programs (``shared/floors``) when they are
found, as they are, else our equivalents; ``origin`` says which.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import tempfile
from pathlib import Path
from typing import Any

ALL_CPUS = frozenset(os.sched_getaffinity(0))

# One program, two modes: a SOCK_SEQPACKET echo and a shared-memory spin ping-pong between two
# processes. "uds N PARENT_CPU CHILD_CPU" pins each side after the fork; every reply carries the
# CPU the child answered on, and the program prints the CPUs each side was seen on.
FLOOR_C = r"""
#define _GNU_SOURCE
#include <sched.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

static uint64_t ns(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return (uint64_t)t.tv_sec * 1000000000u + (uint64_t)t.tv_nsec;
}
static int by_value(const void *a, const void *b) {
  uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
  return (x > y) - (x < y);
}
static void report(const char *what, uint64_t *t, long n) {
  qsort(t, (size_t)n, sizeof *t, by_value);
  printf("%s p50=%.2f us p99=%.2f us (n=%ld)\n", what, t[n / 2] / 1e3, t[n * 99 / 100] / 1e3, n);
}
static int pin(int cpu) {
  cpu_set_t one;
  if (cpu < 0) return 0;
  CPU_ZERO(&one);
  CPU_SET(cpu, &one);
  if (sched_setaffinity(0, sizeof one, &one) == 0) return 0;
  perror("sched_setaffinity");
  return -1;
}
static void print_cpus(const char *side, const cpu_set_t *seen) {
  const char *sep = "";
  printf(" %s=", side);
  for (int c = 0; c < CPU_SETSIZE; ++c) {
    if (CPU_ISSET(c, seen)) {
      printf("%s%d", sep, c);
      sep = ",";
    }
  }
}

static int uds(long n, int parent_cpu, int child_cpu) {
  int pair[2];
  char msg[64];
  if (socketpair(AF_UNIX, SOCK_SEQPACKET, 0, pair) != 0) return 1;
  memset(msg, 7, sizeof msg);
  pid_t child = fork();
  if (child == 0) {
    close(pair[0]);
    if (pin(child_cpu) != 0) _exit(3);
    for (;;) {
      ssize_t got = recv(pair[1], msg, sizeof msg, 0);
      if (got < (ssize_t)sizeof(int)) _exit(0);
      int cpu = sched_getcpu();
      memcpy(msg, &cpu, sizeof cpu);
      if (send(pair[1], msg, (size_t)got, 0) != got) _exit(0);
    }
  }
  close(pair[1]);
  if (pin(parent_cpu) != 0) return 1;
  cpu_set_t parent_seen, child_seen;
  CPU_ZERO(&parent_seen);
  CPU_ZERO(&child_seen);
  uint64_t *t = calloc((size_t)n, sizeof *t);
  for (long i = 0; i < n; ++i) {
    uint64_t start = ns();
    if (send(pair[0], msg, sizeof msg, 0) != (ssize_t)sizeof msg) return 1;
    if (recv(pair[0], msg, sizeof msg, 0) != (ssize_t)sizeof msg) return 1;
    t[i] = ns() - start;
    int cpu;
    memcpy(&cpu, msg, sizeof cpu);
    if (cpu >= 0 && cpu < CPU_SETSIZE) CPU_SET(cpu, &child_seen);
    cpu = sched_getcpu();
    if (cpu >= 0 && cpu < CPU_SETSIZE) CPU_SET(cpu, &parent_seen);
  }
  close(pair[0]);
  waitpid(child, NULL, 0);
  printf("ran on:");
  print_cpus("parent", &parent_seen);
  print_cpus("child", &child_seen);
  printf("\n");
  report("seqpacket 64B round trip", t, n);
  return 0;
}

static int spin(long n) {
  /* ping and pong on separate cache lines */
  volatile uint64_t *page = mmap(NULL, 4096, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS,
                                 -1, 0);
  if (page == MAP_FAILED) return 1;
  volatile uint64_t *ping = page, *pong = page + 16;
  pid_t child = fork();
  if (child == 0) {
    for (uint64_t i = 1; i <= (uint64_t)n; ++i) {
      while (__atomic_load_n(ping, __ATOMIC_ACQUIRE) < i) __builtin_ia32_pause();
      __atomic_store_n(pong, i, __ATOMIC_RELEASE);
    }
    _exit(0);
  }
  uint64_t *t = calloc((size_t)n, sizeof *t);
  for (uint64_t i = 1; i <= (uint64_t)n; ++i) {
    uint64_t start = ns();
    __atomic_store_n(ping, i, __ATOMIC_RELEASE);
    while (__atomic_load_n(pong, __ATOMIC_ACQUIRE) < i) __builtin_ia32_pause();
    t[i - 1] = ns() - start;
  }
  waitpid(child, NULL, 0);
  report("shared-memory spin round trip", t, n);
  return 0;
}

int main(int argc, char **argv) {
  long n = argc > 2 ? atol(argv[2]) : 20000;
  if (n < 1) return 2;
  if (argc > 1 && strcmp(argv[1], "spin") == 0) return spin(n);
  int parent_cpu = argc > 4 ? atoi(argv[3]) : -1, child_cpu = argc > 4 ? atoi(argv[4]) : -1;
  return uds(n, parent_cpu, child_cpu);
}
"""

_P50_P99 = re.compile(r"p50\s*=\s*([0-9.]+)\s*us.*?p99\s*=\s*([0-9.]+)\s*us")
_RAN_ON = re.compile(r"ran on: parent=([0-9,]*) child=([0-9,]*)")

# What each floor is, for the printed line (the JSON keeps the keys).
LABELS = {
    "uds_round_trip": "socket round trip, two CPUs",
    "uds_round_trip_free_placement": "socket round trip, free placement",
    "uds_round_trip_one_cpu": "socket round trip, one CPU",
    "spin_round_trip": "shared-memory spin round trip",
}


def find_floor_sources(start: Path | None = None) -> Path | None:
    """The machine's floor programs: $FENCELINE_FLOORS, else shared/floors beside the repo
    root or any folder above it (../shared/floors in CI)."""
    env = os.environ.get("FENCELINE_FLOORS")
    if env:
        return Path(env) if (Path(env) / "uds_pingpong.c").is_file() else None
    here = (start or Path(__file__)).resolve()
    for base in (*here.parents, *Path.cwd().resolve().parents, Path.cwd().resolve()):
        cand = base / "shared" / "floors"
        if (cand / "uds_pingpong.c").is_file() and (cand / "spin_pingpong.c").is_file():
            return cand
    return None


def build_floors(out_dir: Path, sources: Path | None = None) -> dict[str, list[str]]:
    """Compiles the floor programs into ``out_dir``; returns the command line of each floor:
    ``uds`` and ``spin`` from the machine's programs when found, else our own; ``uds_pinned``
    always our own, to be given the two CPUs (:func:`run_pinned_floor`)."""
    cc = os.environ.get("CC") or shutil.which("cc") or shutil.which("gcc")
    if cc is None:
        raise RuntimeError("the floors need a C compiler (cc or gcc)")
    src = sources if sources is not None else find_floor_sources()

    def build(source: Path, name: str) -> str:
        exe = out_dir / name
        subprocess.run([cc, "-O2", "-o", str(exe), str(source)], check=True,
                       capture_output=True, timeout=120)
        return str(exe)

    own = out_dir / "floor.c"
    own.write_text(FLOOR_C)
    exe = build(own, "floor")
    pinned = [exe, "uds", "20000"]
    if src is not None:
        uds = build(src / "uds_pingpong.c", "uds_pingpong")
        spin = build(src / "spin_pingpong.c", "spin_pingpong")
        return {"uds": [uds, "20000"], "spin": [spin], "uds_pinned": pinned,
                "origin": [str(src)]}
    return {"uds": [exe, "uds", "20000"], "spin": [exe, "spin", "200000"], "uds_pinned": pinned,
            "origin": ["builtin"]}


def parse_floor(output: str) -> tuple[float, float]:
    """(p50_us, p99_us) from a floor program's output line."""
    m = _P50_P99.search(output)
    if m is None:
        raise ValueError(f"no p50/p99 in floor output: {output.strip()!r}")
    return float(m.group(1)), float(m.group(2))


def parse_ran_on(output: str) -> tuple[set[int], set[int]]:
    """The CPUs the parent and the child of our socket floor program were seen on."""
    m = _RAN_ON.search(output)
    if m is None:
        raise ValueError(f"no 'ran on' line in floor output: {output.strip()!r}")
    parent, child = ({int(c) for c in g.split(",") if c} for g in m.groups())
    return parent, child


def _run(cmd: list[str], cpus: frozenset[int] | set[int], timeout_s: float) -> str:
    # The program's processes start on ``cpus`` whatever the caller is pinned to now.
    def pin() -> None:
        os.sched_setaffinity(0, cpus)

    out = subprocess.run(cmd, check=True, capture_output=True, text=True, timeout=timeout_s,
                         preexec_fn=pin)
    return out.stdout


def run_floor(
    cmd: list[str], cpu: int | None = None, timeout_s: float = 120
) -> tuple[float, float]:
    """Runs one floor program, both its processes pinned to ``cpu`` when given, else free on
    every CPU this module started with (whatever the caller is pinned to now)."""
    return parse_floor(_run(cmd, {cpu} if cpu is not None else ALL_CPUS, timeout_s))


def run_pinned_floor(
    cmd: list[str], parent_cpu: int, child_cpu: int, timeout_s: float = 120
) -> tuple[float, float]:
    """Runs our socket floor program (``build_floors(...)["uds_pinned"]``) with its parent on
    ``parent_cpu`` and its child on ``child_cpu``; raises unless each side was only seen on its
    own CPU, so the figure is always the two-CPU round trip it names."""
    out = _run([*cmd, str(parent_cpu), str(child_cpu)], ALL_CPUS, timeout_s)
    parent, child = parse_ran_on(out)
    if parent != {parent_cpu} or child != {child_cpu}:
        raise RuntimeError(f"the pinned socket floor ran on CPUs {sorted(parent)} (parent) and "
                           f"{sorted(child)} (child), not {parent_cpu} and {child_cpu}")
    return parse_floor(out)


def two_cpus() -> tuple[int, int] | None:
    """The two CPUs of the two-CPU floor: the first two this process may run on."""
    cpus = sorted(ALL_CPUS)
    return (cpus[0], cpus[1]) if len(cpus) >= 2 else None


def floors() -> dict[str, Any]:
    """The machine's handoff floors, measured now, in microseconds (the module's docstring says
    what each is). ``skipped`` names the floors that cannot be measured here, and why."""
    with tempfile.TemporaryDirectory() as tmp:
        cmds = build_floors(Path(tmp))
        cpus = sorted(ALL_CPUS)
        rows: dict[str, Any] = {"origin": cmds["origin"][0]}
        skipped: dict[str, str] = {}
        pair = two_cpus()
        if pair is None:
            skipped["uds_round_trip"] = f"needs two CPUs; this process may run only on CPU {cpus[0]}"
        else:
            p50, p99 = run_pinned_floor(cmds["uds_pinned"], *pair)
            rows["uds_round_trip"] = {"p50_us": p50, "p99_us": p99, "cpus": list(pair)}
        for name, cmd, cpu in (
            ("uds_round_trip_free_placement", cmds["uds"], None),
            ("uds_round_trip_one_cpu", cmds["uds"], cpus[0]),
        ):
            p50, p99 = run_floor(cmd, cpu)
            rows[name] = {"p50_us": p50, "p99_us": p99}
            if cpu is not None:
                rows[name]["cpus"] = [cpu]
        if len(cpus) < 2:
            # two spinners on one CPU measure the scheduler, not a handoff
            skipped["spin_round_trip"] = "needs two CPUs"
        else:
            p50, p99 = run_floor(cmds["spin"])
            rows["spin_round_trip"] = {"p50_us": p50, "p99_us": p99}
        if skipped:
            rows["skipped"] = skipped
        return rows


def floor_rows(result: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """The measured floors of a :func:`floors` result, by name."""
    return {k: v for k, v in result.items() if k in LABELS and isinstance(v, dict)}


def label(name: str, row: dict[str, Any]) -> str:
    """What a floor is, with the CPUs it was pinned to."""
    cpus = row.get("cpus") or []
    base = LABELS.get(name, name.replace("_", " "))
    if len(cpus) == 2:
        return f"{base} ({cpus[0]} and {cpus[1]})"
    return f"{base} ({cpus[0]})" if len(cpus) == 1 else base


def format_floors(result: dict[str, Any]) -> str:
    """The floors as one line: p50 / p99 of each, and what was skipped."""
    if "error" in result:
        return f"machine floors not measured: {result['error']}"
    parts = [f"{label(k, v)} {v['p50_us']:.2f} / {v['p99_us']:.2f} us"
             for k, v in floor_rows(result).items()]
    parts += [f"{LABELS.get(k, k)}: skipped ({why})" for k, why in result.get("skipped", {}).items()]
    return "machine floors (p50 / p99): " + "; ".join(parts)


__all__ = [
    "ALL_CPUS", "FLOOR_C", "build_floors", "find_floor_sources", "floor_rows", "floors",
    "format_floors", "label", "parse_floor", "parse_ran_on", "run_floor", "run_pinned_floor", "two_cpus",
]
