"""Hostile clients in the soak (``fenceline soak --hostile N``): N slots, each running the
modes of :mod:`fenceline.soak.hostile` and of :mod:`fenceline.soak.control_attack` in turn, one
process after another. For every process that ends (exits, kills itself, or is killed by the
pool while the service waits on its fence) the pool measures how long the service still holds
anything it shared, by its tag in the service's ``/proc/PID/fd`` and ``/proc/PID/maps``."""

from __future__ import annotations

import contextlib
import json
import os
import random
import re
import subprocess
import sys
import threading
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from fenceline.soak import control_attack

MODES = ("shrink-memfd", "bad-headers", "die-waiting", "shrink-fence", "die-before-reply",
         "shrink-shm", "own-end-send-blocked", "own-end-fence-wait", "own-end-queued",
         "own-end-queued-page", "churn", *control_attack.MODES)
# Modes that sleep once set up until the pool kills them (after linger_s).
KILLED = frozenset({"die-waiting", "own-end-send-blocked", "own-end-fence-wait",
                    "own-end-queued", "own-end-queued-page"})
TICK_S = 0.05
GIVE_UP_S = 30.0  # a client still held this long after its death counts as never released


def _held_tags(pid: int) -> str:
    """Everything the service maps or holds open, as one string to search for tags."""
    parts: list[str] = []
    fd_dir = f"/proc/{pid}/fd"
    for fd in os.listdir(fd_dir):
        with contextlib.suppress(OSError):  # closed meanwhile
            parts.append(os.readlink(f"{fd_dir}/{fd}"))
    with open(f"/proc/{pid}/maps") as f:
        parts.append(f.read())
    return "\n".join(parts)


class _Client:
    def __init__(self, sock: Path, url: str, mode: str, rng: random.Random) -> None:
        self.mode = mode
        args = ([sys.executable, "-m", "fenceline.soak.control_attack", mode, url, str(sock)]
                if mode in control_attack.MODES
                else [sys.executable, "-m", "fenceline.soak.hostile", mode, str(sock)])
        self.proc = subprocess.Popen(args, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
                                     text=True)
        self.tag = f"fenceline-hostile-{self.proc.pid}"
        self.lines: list[str] = []
        self.ready_at: float | None = None
        self.ended_at: float | None = None
        self.linger_s = rng.uniform(0.2, 1.5)  # KILLED modes: how long the service waits first
        self.reader = threading.Thread(target=self._read, daemon=True)
        self.reader.start()

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            if self.ready_at is None:
                self.ready_at = time.monotonic()
            self.lines.append(line)

    def step(self, now: float) -> bool:
        """True once the process has ended."""
        if (self.mode in KILLED and self.ready_at is not None
                and now - self.ready_at >= self.linger_s and self.proc.poll() is None):
            self.proc.kill()
        if self.proc.poll() is None:
            return False
        self.ended_at = now
        self.reader.join(5)
        if self.proc.stdout is not None:
            self.proc.stdout.close()
        return True

    def anomaly(self) -> str | None:
        """What this client saw that the service must never answer, if anything."""
        if self.mode.startswith("die-") or self.mode in KILLED:
            return None if self.proc.returncode == -9 else f"{self.mode} exited {self.proc.returncode}"
        try:
            result: dict[str, Any] = json.loads(self.lines[-1])
        except (IndexError, ValueError):
            return f"{self.mode} exited {self.proc.returncode} without a result"
        if self.mode in control_attack.ANSWERS:
            ok = set(result["codes"]) <= control_attack.ANSWERS[self.mode]
        elif self.mode.startswith("shrink-") and self.mode != "shrink-fence":
            ok = set(result["codes"]) <= {"ok", "device_lost"}
        elif self.mode == "shrink-fence":
            ok = result == {"wait": "device_lost", "signal": "device_lost"}
        elif self.mode == "churn":
            ok = result["answers"] == {"ok": result["rounds"]}
        else:
            ok = not result["wrong"] and result["connection_usable"]
        return None if ok else f"{self.mode}: {result}"


@dataclass
class HostileReport:
    clients: dict[str, int] = field(default_factory=dict)  # ended, by mode
    released_max_s: float = 0.0
    released_over_2s: int = 0
    never_released: int = 0
    anomalies: list[str] = field(default_factory=list)


class HostilePool:
    def __init__(self, sock: Path, url: str, service_pid: int, slots: int, seed: int = 0) -> None:
        self.sock = sock
        self.url = url
        self.service_pid = service_pid
        self.slots = slots
        self.rng = random.Random(seed)
        self._modes = iter(MODES[i % len(MODES)] for i in range(10**9))
        self._live: list[_Client] = []
        self._releasing: list[_Client] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, name="soak-hostile", daemon=True)
        self.report = HostileReport()
        self._ended: Counter[str] = Counter()
        self.pids: set[int] = set()  # every hostile process started, for the /dev/shm check

    def warm_up(self) -> None:
        """One client of every mode, ``slots`` at a time, each run to its end and its release:
        what a first use costs the service (threads of a pool it fills, code pages, a first
        trace's and reload's memory) is then in the soak's baseline, and the soak measures what
        repeats (docs/reliability.md, "Soak"). Counted in the report like the others."""
        modes = list(MODES)
        while modes:
            self._live = [self._new(m) for m in modes[:self.slots]]  # stop() kills them
            del modes[:self.slots]
            while self._live:
                now = time.monotonic()
                for c in [c for c in self._live if c.step(now)]:
                    self._live.remove(c)
                    self._ended_client(c)
                self._check_releases(now)
                time.sleep(TICK_S)
        self._wait_releases()

    def start(self) -> None:
        self._live = [self._new() for _ in range(self.slots)]
        self._thread.start()

    def _new(self, mode: str | None = None) -> _Client:
        c = _Client(self.sock, self.url, mode or next(self._modes), self.rng)
        self.pids.add(c.proc.pid)
        return c

    def _ended_client(self, c: _Client) -> None:
        self._ended[c.mode] += 1
        problem = c.anomaly()
        if problem is not None:
            self.report.anomalies.append(problem)
        self._releasing.append(c)

    def _wait_releases(self) -> None:
        deadline = time.monotonic() + GIVE_UP_S
        while self._releasing and time.monotonic() < deadline:
            self._check_releases(time.monotonic())
            time.sleep(TICK_S)
        self.report.never_released += len(self._releasing)
        self._releasing = []

    def stop(self) -> HostileReport:
        """Stops starting clients, kills the live ones and waits for every release."""
        self._stop.set()
        if self._thread.ident is not None:  # started
            self._thread.join()
        for c in self._live:
            c.proc.kill()
            c.proc.wait()
            c.step(time.monotonic())
            c.mode = "die-killed-at-end"
            self._releasing.append(c)
            # A shrinker killed here never unlinked its /dev/shm frame: its creator is gone, so
            # the soak that started it does.
            for name in os.listdir("/dev/shm"):
                if re.match(re.escape(c.tag) + r"-", name):
                    with contextlib.suppress(FileNotFoundError):
                        os.unlink(f"/dev/shm/{name}")
        self._live = []
        self._wait_releases()
        self.report.clients = dict(self._ended)
        return self.report

    def _loop(self) -> None:
        while not self._stop.is_set():
            now = time.monotonic()
            for c in list(self._live):
                if c.step(now):
                    self._live.remove(c)
                    self._ended_client(c)
                    self._live.append(self._new())
            self._check_releases(now)
            time.sleep(TICK_S)

    def _check_releases(self, now: float) -> None:
        if not self._releasing:
            return
        held = _held_tags(self.service_pid)
        for c in list(self._releasing):
            assert c.ended_at is not None
            if re.search(re.escape(c.tag) + r"(?!\d)", held):
                if now - c.ended_at > GIVE_UP_S:
                    self.report.never_released += 1
                    self._releasing.remove(c)
                continue
            took = now - c.ended_at
            self.report.released_max_s = max(self.report.released_max_s, took)
            self.report.released_over_2s += took > 2.0
            self._releasing.remove(c)
