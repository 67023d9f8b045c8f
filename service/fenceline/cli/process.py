"""Starting and stopping a ``fenceline serve`` process with builtin models (demo, bench)."""

from __future__ import annotations

import socket
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import httpx

from fenceline.errors import FencelineError
from fenceline.models.builtin import build_repository, cache_dir


def free_port() -> int:
    """A TCP port on the loopback interface that nothing listens on now."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def start_service(
    models: list[str], workdir: Path, *, log_level: str = "warning", extra: tuple[str, ...] = ()
) -> tuple[subprocess.Popen[bytes], str, Path]:
    """Starts ``fenceline serve`` with builtin models in its own process; returns it once ready."""
    repo = cache_dir()
    if any(not (repo / m / "1" / "model.onnx").is_file() for m in models):
        print(f"building models {', '.join(models)} in {repo} (first use)", flush=True)
    build_repository(repo, models)
    port = free_port()
    # Windows: a named pipe of its own (pipe names are machine-wide, the folder's name is unique).
    sock = (Path(f"\\\\.\\pipe\\fenceline-{workdir.name}") if sys.platform == "win32"
            else workdir / "fenceline.sock")
    args = [sys.executable, "-m", "fenceline", "serve", "--port", str(port), "--socket", str(sock),
            "--log-level", log_level, *extra]
    for m in models:
        args += ["--model", f"{m}={repo / m / '1' / 'model.onnx'}"]
    proc = subprocess.Popen(args)
    try:
        return _ready(proc, f"http://127.0.0.1:{port}", sock)
    except BaseException:  # not ready, or interrupted meanwhile (Ctrl-C, SIGTERM): not left behind
        stop_process(proc, 5)
        raise


def _ready(proc: subprocess.Popen[bytes], url: str, sock: Path) -> tuple[
        subprocess.Popen[bytes], str, Path]:
    limit_s = 300 if sys.platform == "win32" else 60  # Wine starts CPython slowly under load
    deadline = time.monotonic() + limit_s
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise FencelineError(f"the service exited with status {proc.returncode}")
        try:
            # Readiness includes the IPC listener; a pipe is no file to look for.
            ready = httpx.get(url + "/v2/health/ready", timeout=1).status_code == 200
            if ready and (sys.platform == "win32" or sock.exists()):
                return proc, url, sock
        except httpx.HTTPError:
            pass
        time.sleep(0.1)
    raise FencelineError(f"the service did not become ready within {limit_s} s")


def stop_process(proc: subprocess.Popen[Any], timeout_s: float) -> None:
    """Asks ``proc`` to end (SIGTERM) and kills it if it has not within ``timeout_s``."""
    if proc.poll() is None:
        proc.terminate()
        try:
            proc.wait(timeout_s)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def stop_service(proc: subprocess.Popen[bytes]) -> None:
    stop_process(proc, 15)
