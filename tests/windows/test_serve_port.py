"""`fenceline serve`'s HTTP port on Windows: bound with SO_EXCLUSIVEADDRUSE, so no other process
can bind it beside the service, and a bind that fails says why: a port in use apart from one
that Windows refuses (Windows has no privileged ports; a reserved range or a policy refuses,
and under the lane's Wine the wineserver lacks the right to bind ports below 1024)."""

from __future__ import annotations

import secrets
import socket
import subprocess
import sys

import pytest

from tests.windows.test_service import WinService


def serve(port: int) -> subprocess.CompletedProcess[str]:
    """The builtin models: the port is bound before any model loads."""
    pipe = f"\\\\.\\pipe\\fenceline-port-{secrets.token_hex(4)}"
    return subprocess.run(
        [sys.executable, "-m", "fenceline", "serve", "--port", str(port), "--socket", pipe],
        stdin=subprocess.DEVNULL, capture_output=True, text=True, timeout=300,
    )


def one_clear_line(r: subprocess.CompletedProcess[str], *phrases: str) -> str:
    assert r.returncode == 2, (r.returncode, r.stdout, r.stderr)
    assert "Traceback" not in r.stderr, r.stderr
    lines = [line for line in r.stderr.splitlines() if line.startswith("fenceline:")]
    assert len(lines) == 1, r.stderr
    for p in phrases:
        assert p in lines[0], lines[0]
    return lines[0]


@pytest.mark.parametrize("exclusive", [False, True], ids=["plain", "exclusive"])
def test_port_held_by_another_process_is_said_to_be_in_use(exclusive: bool) -> None:
    holder = socket.socket()
    if exclusive:  # Windows answers WSAEACCES then, not WSAEADDRINUSE
        holder.setsockopt(socket.SOL_SOCKET, socket.SO_EXCLUSIVEADDRUSE, 1)
    holder.bind(("127.0.0.1", 0))
    holder.listen()
    with holder:
        line = one_clear_line(serve(holder.getsockname()[1]), "already in use", "--port")
    assert "privileges" not in line and "reserved" not in line


def test_a_port_windows_refuses_is_not_said_to_be_in_use() -> None:
    refused = None
    for port in (81, 82, 83, 84, 85):
        with socket.socket() as probe:
            try:
                probe.bind(("127.0.0.1", port))
            except PermissionError:
                refused = port
                break
            except OSError:
                continue
    if refused is None:
        pytest.skip("no low port is refused here (the lane's wineserver runs without the right "
                    "to bind them; real Windows refuses only reserved ranges)")
    line = one_clear_line(serve(refused), "denies listening", "reserved", "--port")
    assert "already in use" not in line


def test_no_other_process_can_bind_the_service_port_beside_it(service: WinService) -> None:
    port = int(service.url.rsplit(":", 1)[1])
    for option in (socket.SO_REUSEADDR, None):
        with socket.socket() as thief:
            if option is not None:
                thief.setsockopt(socket.SOL_SOCKET, option, 1)
            with pytest.raises(OSError):
                thief.bind(("127.0.0.1", port))
