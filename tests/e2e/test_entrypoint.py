"""The container entrypoint (deploy/docker/entrypoint.sh), run here as the image runs it: with
FENCELINE_* variables, as the process the service replaces, stopped with SIGTERM."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import httpx

from fenceline import __version__
from tests.support.service import free_port

ROOT = Path(__file__).resolve().parents[2]
ENTRYPOINT = ROOT / "deploy" / "docker" / "entrypoint.sh"
BIN = Path(sys.executable).parent


def env(**extra: str) -> dict[str, str]:
    base = {k: v for k, v in os.environ.items() if not k.startswith("FENCELINE_")}
    base["PATH"] = f"{BIN}:/usr/bin:/bin"
    base["FENCELINE_HOST"] = "127.0.0.1"  # loopback only here; the image binds all interfaces
    base.update(extra)
    return base


def run(*args: str, **extra: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["sh", str(ENTRYPOINT), *args], env=env(**extra), capture_output=True,
                          text=True, timeout=60)  # fmt: skip


def test_entrypoint_serves_from_the_environment_and_stops_cleanly_on_sigterm(
    model_repo: Path, tmp_path: Path
) -> None:
    port = free_port()
    socket = tmp_path / "run" / "fenceline.sock"
    log = tmp_path / "entrypoint.log"
    with log.open("wb") as out:
        proc = subprocess.Popen(
            ["sh", str(ENTRYPOINT)], stdout=out, stderr=subprocess.STDOUT,
            env=env(FENCELINE_PORT=str(port), FENCELINE_SOCKET=str(socket),
                    FENCELINE_MODEL_REPOSITORY=str(model_repo), FENCELINE_SHM_WARN_MIB="0"),
        )  # fmt: skip
    try:
        deadline = time.monotonic() + 60
        while not socket.exists() or run("healthcheck", FENCELINE_PORT=str(port)).returncode:
            assert proc.poll() is None, log.read_text()
            assert time.monotonic() < deadline, log.read_text()
            time.sleep(0.2)
        # exec'd: the service itself is the process the container runtime signals.
        cmdline = Path(f"/proc/{proc.pid}/cmdline").read_bytes().split(b"\0")
        assert cmdline[1].endswith(b"/fenceline") and cmdline[2] == b"serve", cmdline
        models = httpx.get(f"http://127.0.0.1:{port}/v2/models/add_64x64", timeout=5)
        assert models.status_code == 200
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(20) == 0, log.read_text()
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    lines = [json.loads(line) for line in log.read_text().splitlines()]  # JSON by default
    messages = [line["message"] for line in lines]
    assert "fenceline stopped" in messages
    assert not socket.exists()  # the service removed its socket on the way out
    assert not any(line["level"] in ("error", "critical") for line in lines), lines


def test_entrypoint_healthcheck_fails_when_the_service_is_not_there() -> None:
    r = run("healthcheck", FENCELINE_PORT=str(free_port()))
    assert r.returncode == 1
    assert "not ready" in r.stderr


def test_entrypoint_runs_a_command_given_instead_of_flags() -> None:
    r = run("fenceline", "--version")
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip() == f"fenceline {__version__}"


def test_entrypoint_appends_extra_flags_to_the_service_command_line(tmp_path: Path) -> None:
    r = run("--port", "70000", FENCELINE_MODEL_REPOSITORY=str(tmp_path), FENCELINE_SHM_WARN_MIB="0")
    assert r.returncode == 2
    assert "--port 70000 is not a TCP port" in r.stderr


def test_entrypoint_rejects_an_unknown_log_format_with_the_choices() -> None:
    r = run(FENCELINE_LOG_FORMAT="xml", FENCELINE_MODEL_REPOSITORY="/nonexistent")
    assert r.returncode == 2
    assert "--log-format" in r.stderr and "'json'" in r.stderr


def test_entrypoint_warns_when_dev_shm_is_small_or_the_repository_is_missing() -> None:
    r = run("--port", "-1", FENCELINE_SHM_WARN_MIB=str(10**9), FENCELINE_LOG_FORMAT="json",
            FENCELINE_MODEL_REPOSITORY="/nonexistent/models")  # fmt: skip
    assert r.returncode == 2  # the bad port stops it before any model loads
    warnings = [json.loads(line) for line in r.stderr.splitlines() if line.startswith("{")]
    assert [w["level"] for w in warnings] == ["warning", "warning"], r.stderr
    assert "--ipc=host" in warnings[0]["message"]
    assert "/nonexistent/models" in warnings[1]["message"]


def test_a_missing_repository_is_named_then_stops_the_service_with_status_2() -> None:
    r = run(FENCELINE_MODEL_REPOSITORY="/nonexistent/models", FENCELINE_SHM_WARN_MIB="0")
    assert r.returncode == 2  # as Triton: no serving without the repository it was given
    assert "no model repository at /nonexistent/models" in r.stderr
    assert "--model-repository /nonexistent/models is not a directory" in r.stderr
    assert "Traceback" not in r.stderr
