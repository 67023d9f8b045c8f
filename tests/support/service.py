"""A real service in its own process, as users start it, and what a test looks at in it:
its fds, its shared-memory mappings, its log."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx

from fenceline.cli.process import free_port
from tests.support.waiting import wait_until


@dataclass(frozen=True)
class Mapping:
    range: str
    name: str  # the path, [heap], [stack], or "" for an anonymous mapping
    size_kb: int
    rss_kb: int
    anon_kb: int = 0  # its anonymous resident pages (smaps' Anonymous)


def read_smaps(pid: int) -> list[Mapping]:
    """Every mapping of a process with its size and RSS, from /proc/PID/smaps."""
    out: list[Mapping] = []
    head: list[str] = []
    fields: dict[str, int] = {}

    def flush() -> None:
        if head:
            out.append(Mapping(head[0], " ".join(head[5:]), fields.get("Size", 0),
                               fields.get("Rss", 0), fields.get("Anonymous", 0)))

    with open(f"/proc/{pid}/smaps") as f:
        for line in f:
            key, _, rest = line.partition(":")
            if "-" in line.split(" ", 1)[0] and not key.isalpha():
                flush()
                head, fields = line.split(), {}
            elif rest.strip().endswith("kB"):
                fields[key] = int(rest.split()[0])
    flush()
    return out


@dataclass
class Service:
    proc: subprocess.Popen[bytes]
    url: str
    socket: Path
    log: Path

    @property
    def pid(self) -> int:
        return self.proc.pid

    def fds(self) -> list[str]:
        """What the service's open fds point at."""
        out = []
        for fd in os.listdir(f"/proc/{self.pid}/fd"):
            with contextlib.suppress(OSError):  # closed between listdir and readlink
                out.append(os.readlink(f"/proc/{self.pid}/fd/{fd}"))
        return out

    def fd_table(self) -> set[tuple[str, str]]:
        """(fd, target) of every open fd: an fd closed and its number reused for something else
        reads as a different entry."""
        out = set()
        for fd in os.listdir(f"/proc/{self.pid}/fd"):
            with contextlib.suppress(OSError):  # closed between listdir and readlink
                out.add((fd, os.readlink(f"/proc/{self.pid}/fd/{fd}")))
        return out

    def settled(self, quiet_s: float = 0.3, timeout_s: float = 10.0) -> tuple[list[str], list[str]]:
        """(fds, maps) once they have stopped changing (earlier tests' connections closed)."""
        last, since = (sorted(self.fds()), self.maps()), time.monotonic()
        deadline = since + timeout_s
        while time.monotonic() < deadline:
            time.sleep(0.05)
            now = (sorted(self.fds()), self.maps())
            if now != last:
                last, since = now, time.monotonic()
            elif time.monotonic() - since >= quiet_s:
                break
        return last

    def smaps(self) -> list[Mapping]:
        """Every mapping of the service, anonymous ones included, with its size and RSS."""
        return read_smaps(self.pid)

    def maps(self) -> list[str]:
        """The service's shared-memory mappings (memfds and /dev/shm objects)."""
        with open(f"/proc/{self.pid}/maps") as f:
            return [line.strip() for line in f if "/dev/shm/" in line or "memfd:" in line]

    def log_text(self) -> str:
        return self.log.read_text(errors="replace")


def start_service(
    model_repo: Path, tmp: Path, *extra: str, fd_limits: tuple[int, int] | None = None,
    cpus: int | None = None, yield_cpus: int | None = None,
) -> Service:
    """``fd_limits``: the service starts with these (soft, hard) limits on open fds (None: this
    process's). ``cpus``: it may run on the first ``cpus`` of this process's CPUs only (None:
    all of them), as under ``taskset``. ``yield_cpus``: its pools yield while several sessions
    run on the CPU from this many usable CPUs on (runtime/ort_options.py's ``YIELD_CPUS``;
    None: as set there), so that a small machine shows what larger ones do."""
    port = free_port()
    sock = tmp / "fenceline.sock"
    log = tmp / "service.log"
    env = dict(os.environ, PYTHONUNBUFFERED="1")
    launch = ["-m", "fenceline"] if yield_cpus is None else [
        "-c", "from fenceline.runtime import ort_options\n"
              f"ort_options.YIELD_CPUS = {int(yield_cpus)}\n"
              "from fenceline.cli import main\nraise SystemExit(main())"]
    with log.open("wb") as out:
        proc = subprocess.Popen(
            [sys.executable, *launch, "serve", "--model-repository", str(model_repo),
             "--port", str(port), "--socket", str(sock), *extra],
            stdout=out, stderr=subprocess.STDOUT, env=env,
            preexec_fn=(lambda: _limit(fd_limits, cpus)) if fd_limits or cpus else None,
        )
    url = f"http://127.0.0.1:{port}"
    try:
        wait_ready(proc, url, sock, log=log.read_text)
    except AssertionError:
        proc.kill()
        proc.wait()
        raise
    return Service(proc, url, sock, log)


def _limit(fd_limits: tuple[int, int] | None, cpus: int | None) -> None:
    import resource

    if fd_limits:
        resource.setrlimit(resource.RLIMIT_NOFILE, fd_limits)
    if cpus:
        os.sched_setaffinity(0, sorted(os.sched_getaffinity(0))[:cpus])


def wait_ready(proc: subprocess.Popen[Any], url: str, sock: Path, timeout_s: float = 60,
               log: Callable[[], str] = lambda: "") -> None:
    """Until the service ``proc`` answers ready at ``url`` and its socket exists; an
    AssertionError with ``log()`` when it exits first or is not ready in ``timeout_s``."""
    def ready() -> bool:
        assert proc.poll() is None, f"the service exited with {proc.returncode}:\n{log()}"
        try:
            return httpx.get(url + "/v2/health/ready", timeout=1).status_code == 200 and sock.exists()
        except httpx.HTTPError:
            return False

    wait_until(ready, timeout_s, what=lambda: f"the service ready:\n{log()}")


def stop_service(svc: Service) -> None:
    if svc.proc.poll() is None:
        svc.proc.send_signal(signal.SIGTERM)
        try:
            svc.proc.wait(20)
        except subprocess.TimeoutExpired:
            svc.proc.kill()
            svc.proc.wait()


@contextlib.contextmanager
def running(
    model_repo: Path, tmp: Path, *extra: str, fd_limits: tuple[int, int] | None = None,
    cpus: int | None = None, yield_cpus: int | None = None,
) -> Iterator[Service]:
    """:func:`start_service` for a block, or for a fixture that yields inside it: the service
    stops when the block ends, and a block that ended normally finds no traceback in its log."""
    svc = start_service(model_repo, tmp, *extra, fd_limits=fd_limits, cpus=cpus,
                        yield_cpus=yield_cpus)
    try:
        yield svc
    finally:
        stop_service(svc)
    assert "Traceback" not in svc.log_text(), svc.log_text()
