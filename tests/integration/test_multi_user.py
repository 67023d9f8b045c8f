"""Several real Unix users against one service: ``--allow-uid`` lets another user in over IPC,
and no user can make the service open, read, write or signal another user's objects by name,
over IPC, the interop HTTP API or Triton's system shared memory (the confused deputy).

The users are created with useradd (kept afterwards: concurrent runs may share them), so
these tests need root; the client side runs in ``tests/support/as_user.py`` after dropping to them."""

from __future__ import annotations

import os
import shutil
import stat
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from fenceline.client import IpcClient
from tests.support.helpers import shared_dir
from tests.support.service import Service, running, start_service, stop_service
from tests.support.users import User

pytestmark = pytest.mark.skipif(
    os.geteuid() != 0 or shutil.which("useradd") is None,
    reason="creating second Unix users needs root and useradd",
)

ROOT = Path(__file__).resolve().parents[2]
FRAME_BYTES = 2 * 3 * 64 * 64 * 4  # add_64x64's input, then room for its output


@pytest.fixture(scope="module")
def users() -> Iterator[tuple[User, User]]:
    a, b = User("fenceline-test-a"), User("fenceline-test-b")
    for u in (a, b):
        assert u("hold", frame=u.frame, fence=u.fence, size=FRAME_BYTES) == {"ok": True}
    yield a, b
    a.close()
    b.close()


@pytest.fixture(scope="module")
def shared() -> Iterator[Path]:
    with shared_dir() as d:
        yield d


@pytest.fixture(scope="module")
def svc(model_repo: Path, shared: Path, users: tuple[User, User]) -> Iterator[Service]:
    a, _ = users
    with running(model_repo, shared, "--allow-uid", str(a.uid)) as s:
        yield s


def test_an_allowed_user_connects_and_the_service_keeps_its_own_uid(
    svc: Service, users: tuple[User, User]
) -> None:
    a, b = users
    assert a("ipc", socket=str(svc.socket))["ok"]
    refused = b("ipc", socket=str(svc.socket))
    assert refused["code"] == "permission_denied" and str(b.uid) in refused["message"]
    metrics = httpx.get(svc.url + "/metrics", timeout=10).text
    assert 'fenceline_api_errors_total{code="permission_denied",transport="ipc"}' in metrics
    with IpcClient(svc.socket) as own:  # the service's own user is never dropped
        assert own.server["version"]
    assert stat.S_IMODE(svc.socket.stat().st_mode) == 0o666  # the uid check admits, not the mode


def test_the_socket_directory_is_private_without_other_users(
    model_repo: Path, tmp_path: Path
) -> None:
    s = start_service(model_repo, tmp_path)
    try:
        assert stat.S_IMODE(s.socket.stat().st_mode) == 0o600
    finally:
        stop_service(s)


def test_allow_uid_fails_at_start_when_that_user_cannot_reach_the_socket(
    model_repo: Path, tmp_path: Path, users: tuple[User, User]
) -> None:
    a, _ = users
    private = tmp_path / "private"
    private.mkdir(mode=0o700)
    r = subprocess.run(
        [sys.executable, "-m", "fenceline", "serve", "--model-repository", str(model_repo),
         "--port", "0", "--socket", str(private / "fl.sock"), "--allow-uid", str(a.uid)],
        capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert r.returncode != 0
    assert f"--allow-uid {a.uid}" in r.stderr and "may not enter" in r.stderr, r.stderr
    assert "Traceback" not in r.stderr


def test_ipc_imports_by_name_only_objects_the_peer_owns(
    svc: Service, users: tuple[User, User]
) -> None:
    a, b = users
    sock = str(svc.socket)
    assert a("ipc_import", socket=sock, name=a.frame)["ok"]
    assert a("ipc_import", socket=sock, fence=a.fence)["ok"]
    assert a("ipc_import", socket=sock, memfd=True)["ok"]  # an fd needs no check
    for what in ({"name": b.frame}, {"fence": b.fence}):
        denied = a("ipc_import", socket=sock, **what)
        assert denied["code"] == "permission_denied", denied
        assert f"belongs to uid {b.uid}" in denied["message"]


def _import(user: User, svc: Service, kind: str, name: str) -> dict[str, Any]:
    body = _import_body(kind, name)
    return user("http", method="POST", url=f"{svc.url}/v2/interop/{kind}", json=body)


@pytest.mark.parametrize("kind", ["memory", "fences"])
def test_http_imports_of_another_users_objects_are_refused(
    svc: Service, users: tuple[User, User], kind: str
) -> None:
    a, b = users
    victim, other = (a.frame, b.frame) if kind == "memory" else (a.fence, b.fence)
    denied = _import(b, svc, kind, victim)  # b is not on the allow-list
    assert denied["status"] == 403 and denied["body"]["code"] == "permission_denied", denied
    assert "--allow-uid" in denied["body"]["error"]
    denied = _import(a, svc, kind, other)
    assert denied["status"] == 403, denied
    assert f"belongs to uid {b.uid}" in denied["body"]["error"]
    own = _import(a, svc, kind, victim)
    assert own["status"] == 201, own
    httpx.delete(f"{svc.url}/v2/interop/{kind}/{own['body']['id']}", timeout=10)
    # The service's own user (root here) may import what it could open itself.
    r = httpx.post(f"{svc.url}/v2/interop/{kind}", timeout=10,
                   json=_import_body(kind, victim))  # fmt: skip
    assert r.status_code == 201, r.text
    httpx.delete(f"{svc.url}/v2/interop/{kind}/{r.json()['id']}", timeout=10)


def _import_body(kind: str, name: str) -> dict[str, Any]:
    if kind == "memory":
        return {"handle_type": "host_shm", "name": name}
    return {"fence_type": "host_timeline", "name": name}


def _infer_from(region: str) -> dict[str, Any]:
    nbytes = 3 * 64 * 64 * 4
    return {"inputs": [{"name": "x", "datatype": "FP32", "shape": [1, 3, 64, 64], "parameters": {
        "shared_memory_region": region, "shared_memory_byte_size": nbytes}}]}


def test_triton_regions_take_only_the_callers_objects_and_serve_only_it(
    svc: Service, users: tuple[User, User]
) -> None:
    a, b = users
    base = f"{svc.url}/v2/systemsharedmemory"
    stolen = b("http", method="POST", url=f"{base}/region/stolen/register",
               json={"key": a.frame, "byte_size": 4096})  # fmt: skip
    assert stolen["status"] == 403 and stolen["body"]["code"] == "permission_denied", stolen
    ok = a("http", method="POST", url=f"{base}/region/a-in/register",
           json={"key": a.frame, "byte_size": FRAME_BYTES})  # fmt: skip
    assert ok["status"] == 200, ok
    try:
        infer = f"{svc.url}/v2/models/add_64x64/infer"
        theirs = b("http", method="POST", url=infer, json=_infer_from("a-in"))
        assert theirs["status"] == 403 and theirs["body"]["code"] == "permission_denied", theirs
        gone = b("http", method="POST", url=f"{base}/region/a-in/unregister")
        assert gone["status"] == 403, gone
        mine = a("http", method="POST", url=infer, json=_infer_from("a-in"))
        assert mine["status"] == 200, mine
    finally:
        assert a("http", method="POST", url=f"{base}/region/a-in/unregister")["status"] == 200
    assert httpx.get(f"{base}/status", timeout=10).json() == []


def test_a_bearer_token_lets_its_holder_import_as_the_service(
    model_repo: Path, shared: Path, users: tuple[User, User], tmp_path: Path
) -> None:
    a, b = users
    token = tmp_path / "token"
    token.write_text("relb-token\n")
    d = shared / "token-svc"
    d.mkdir()
    s = start_service(model_repo, d, "--token-file", str(token))
    try:
        r = b("http", method="POST", url=f"{s.url}/v2/interop/memory",
              json=_import_body("memory", a.frame),
              headers={"Authorization": "Bearer relb-token"})  # fmt: skip
        assert r["status"] == 201, r
    finally:
        stop_service(s)
