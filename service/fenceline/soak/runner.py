"""The soak harness: starts the service and N renderer processes, kills and restarts renderers
at random, samples the service's RSS, fds, mappings and /dev/shm."""

from __future__ import annotations

import json
import os
import random
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path

import httpx

from fenceline.cli.process import start_service, stop_service
from fenceline.models.builtin import build_repository, cache_dir
from fenceline.soak import control_attack
from fenceline.soak.hostile_pool import HostilePool, HostileReport

# What hostile clients are answered by design (docs/reliability.md); any other error code in
# the service's counters fails the soak. The renderers (soak/hostile.py) device_lost,
# invalid_request and unavailable; the control plane's (soak/control_attack.py)
# invalid_argument (bad configs and names), permission_denied (traces without the control
# token) and conflict (a trace while another records).
HOSTILE_ERRORS = frozenset({"device_lost", "invalid_request", "unavailable", "invalid_argument",
                            "permission_denied", "conflict"})


@dataclass
class Resources:
    rss_kib: int
    fds: int
    mappings: int
    shm_entries: int

    @classmethod
    def of(cls, pid: int) -> Resources:
        rss = 0
        with open(f"/proc/{pid}/status") as f:
            for line in f:
                if line.startswith("VmRSS:"):
                    rss = int(line.split()[1])
        with open(f"/proc/{pid}/maps") as f:
            maps = sum(1 for line in f if "memfd:" in line or "/dev/shm/" in line)
        return cls(rss, len(os.listdir(f"/proc/{pid}/fd")), maps, len(os.listdir("/dev/shm")))


@dataclass
class SoakReport:
    seconds: float
    renderers: int
    kills: int
    runs: int
    wrong_outputs: int
    service_errors: dict[str, float]
    start: Resources
    end: Resources
    samples: list[dict[str, float]] = field(default_factory=list)
    stray_shm: list[str] = field(default_factory=list)  # new /dev/shm names of soak processes
    service_alive: bool = True
    hostile_slots: int = 0
    hostile: HostileReport | None = None
    # The RSS after the renderers' warm-up, before the hostile round of it (--hostile only).
    quiet_rss_kib: int = 0

    @property
    def rss_growth(self) -> float:
        return self.end.rss_kib / self.start.rss_kib - 1 if self.start.rss_kib else 0.0

    def unexpected_errors(self) -> dict[str, float]:
        allowed = HOSTILE_ERRORS if self.hostile_slots else frozenset()
        return {
            labels: n for labels, n in self.service_errors.items()
            if n and not any(f'code="{code}"' in labels for code in allowed)
        }

    def checks(self) -> dict[str, bool]:
        checks = {
            "the service never crashed": self.service_alive,
            "rss within 10% of warm-up": abs(self.rss_growth) <= 0.10,
            "same fd count": self.end.fds == self.start.fds,
            "same mapping count": self.end.mappings == self.start.mappings,
            "no stray /dev/shm entries": not self.stray_shm,
            "no wrong outputs": self.wrong_outputs == 0,
            "no unexpected service errors": not self.unexpected_errors(),
        }
        if self.hostile is not None:
            h = self.hostile
            checks["every hostile client released within 2 s"] = (
                h.released_over_2s == 0 and h.never_released == 0
            )
            checks["hostile clients got only documented answers"] = not h.anomalies
        return checks

    def to_json(self) -> str:
        d = asdict(self)
        d["rss_growth"] = self.rss_growth
        d["checks"] = self.checks()
        return json.dumps(d, indent=2)


class Renderer:
    def __init__(self, sock: Path) -> None:
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "fenceline.soak.renderer", str(sock)],
            stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True,
        )
        self.runs = 0
        self.bad = 0
        self.reader = threading.Thread(target=self._read, daemon=True)
        self.reader.start()

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            parts = line.split()
            if len(parts) == 2:
                self.runs, self.bad = int(parts[0]), int(parts[1])

    def wait_running(self, timeout_s: float) -> None:
        deadline = time.monotonic() + timeout_s
        while self.runs == 0 and self.proc.poll() is None and time.monotonic() < deadline:
            time.sleep(0.05)

    def kill(self) -> None:
        self.proc.send_signal(signal.SIGKILL)
        self.proc.wait()
        self.reader.join(5)
        if self.proc.stdout is not None:
            self.proc.stdout.close()


def _service_errors(url: str) -> dict[str, float]:
    errors: dict[str, float] = {}
    for line in httpx.get(url + "/metrics", timeout=10).text.splitlines():
        if line.startswith("fenceline_api_errors_total{"):
            labels, value = line.rsplit(" ", 1)
            errors[labels[len("fenceline_api_errors_total") :]] = float(value)
    return errors


def _settle(pid: int, quiet_s: float = 1.0, timeout_s: float = 20.0) -> Resources:
    last, since = Resources.of(pid), time.monotonic()
    deadline = since + timeout_s
    while time.monotonic() < deadline:
        time.sleep(0.2)
        now = Resources.of(pid)
        if (now.fds, now.mappings) != (last.fds, last.mappings):
            since = time.monotonic()
        last = now
        if time.monotonic() - since >= quiet_s:
            break
    return last


def _hostile_service(tmp: Path) -> tuple[subprocess.Popen[bytes], str, Path]:
    """A service in explicit model-control mode over a repository of the renderers' models and
    the control-plane attackers' (soak/control_attack.py): hostile configs, a model to reload."""
    models = ["add_64x64", "add_720p", "slow_add_64x64"]
    build_repository(cache_dir(), models)
    root = tmp / "repo"
    for m in models:
        (root / m / "1").mkdir(parents=True)
        shutil.copyfile(cache_dir() / m / "1" / "model.onnx", root / m / "1" / "model.onnx")
    load = models + control_attack.write_repository(
        root, cache_dir() / "add_64x64" / "1" / "model.onnx")
    return start_service([], tmp, extra=(
        "--model-repository", str(root), "--model-control-mode", "explicit",
        *(a for m in load for a in ("--load-model", m))))


def run_soak(
    renderers: int = 4, seconds: float = 60.0, kill_every: float = 5.0, warmup: float = 10.0,
    seed: int = 0, hostile: int = 0, min_kills: int = 0,
) -> SoakReport:
    """``hostile``: slots of hostile renderers (soak/hostile_pool.py) beside the normal ones.
    ``min_kills``: run past ``seconds`` until that many renderers were killed, so a loaded
    machine (slow restarts) still gets the kills a check relies on."""
    rng = random.Random(seed)
    with tempfile.TemporaryDirectory(prefix="fenceline-soak-") as tmp:
        shm_before = set(os.listdir("/dev/shm"))
        if hostile:
            proc, url, sock = _hostile_service(Path(tmp))
        else:
            proc, url, sock = start_service(["add_64x64"], Path(tmp))
        hostiles = HostilePool(sock, url, proc.pid, hostile, seed) if hostile else None
        hostile_report: HostileReport | None = None
        pool: list[Renderer] = []
        finished: list[Renderer] = []
        pids = {proc.pid}
        try:
            start = _settle(proc.pid)
            pool = [Renderer(sock) for _ in range(renderers)]
            # Warm-up counts from when every renderer is running, however slow their start.
            for x in pool:
                x.wait_running(60)
            time.sleep(warmup)
            quiet_rss = Resources.of(proc.pid).rss_kib
            if hostiles is not None:
                # One round of every attacker belongs to the warm-up: the first trace, reload
                # or slow run costs the service memory that every later one reuses (docs/
                # reliability.md, "Soak"); a leak grows with the rounds after it.
                hostiles.warm_up()
                _settle(proc.pid)
            warm = Resources.of(proc.pid)
            start = Resources(warm.rss_kib, start.fds, start.mappings, start.shm_entries)
            if hostiles is not None:
                hostiles.start()
            kills, samples = 0, []
            t0 = time.monotonic()
            tty = sys.stderr.isatty()
            next_kill = t0 + kill_every
            while (now := time.monotonic()) - t0 < seconds or kills < min_kills:
                time.sleep(min(1.0, max(0.0, next_kill - now)))
                if time.monotonic() >= next_kill:
                    victim = pool.pop(rng.randrange(len(pool)))
                    victim.kill()
                    pids.add(victim.proc.pid)
                    finished.append(victim)
                    kills += 1
                    pool.append(Renderer(sock))
                    pool[-1].wait_running(30)  # only running renderers count as victims
                    next_kill += kill_every * rng.uniform(0.5, 1.5)
                r = Resources.of(proc.pid)
                runs = sum(x.runs for x in pool + finished)
                samples.append({"t": round(time.monotonic() - t0, 1), "runs": runs, **asdict(r)})
                line = (f"soak {time.monotonic() - t0:6.0f}/{seconds:.0f} s  runs {runs:9d}  "
                        f"kills {kills:4d}  rss {r.rss_kib / 1024:6.1f} MiB  fds {r.fds:3d}  "
                        f"maps {r.mappings:3d}")
                # A terminal gets one line redrawn in place; a log gets plain lines.
                if tty:
                    print("\r" + line, end="", file=sys.stderr, flush=True)
                else:
                    print(line, file=sys.stderr, flush=True)
            if tty:
                print(file=sys.stderr)
            if hostiles is not None:
                hostile_report = hostiles.stop()
            for x in pool:
                x.kill()
            finished += pool
            pool = []
            end = _settle(proc.pid)
            alive = proc.poll() is None
            errors = _service_errors(url)
            pids |= {x.proc.pid for x in finished}
            if hostiles is not None:
                pids |= hostiles.pids
            # Other programs on the machine may come and go in /dev/shm; ours embed their pid.
            stray = sorted(
                n for n in set(os.listdir("/dev/shm")) - shm_before
                if any(f"-{pid}-" in n for pid in pids)
            )
        finally:
            if hostiles is not None and hostile_report is None:
                hostiles.stop()
            for x in pool:
                x.kill()
            stop_service(proc)
    return SoakReport(
        seconds, renderers, kills, sum(x.runs for x in finished), sum(x.bad for x in finished),
        errors, start, end, samples, stray, alive, hostile, hostile_report, quiet_rss,
    )
