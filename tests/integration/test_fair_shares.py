"""One user holding every import its quotas allow, over as many connections as it may open,
must leave the service to the others: another user's connection, HTTP ready and infer keep
working, and a service whose imports reach its fd bound says so on the readiness probe
(docs/reliability.md, "Fair shares"). The hoarder is a real process (fenceline.soak.hostile
``hoard``), the other user a real second Unix user (tests/support/as_user.py)."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.support.service import Service, running
from tests.support.users import User
from tests.support.waiting import wait_until

pytestmark = pytest.mark.skipif(
    os.geteuid() != 0 or shutil.which("useradd") is None,
    reason="a second Unix user needs root and useradd",
)

INFER = {"inputs": [{"name": "x", "shape": [1, 3, 64, 64], "datatype": "FP32",
                     "data": [1.0] * (3 * 64 * 64)}]}


def hoard(svc: Service, connections: int) -> tuple[subprocess.Popen[str], dict[str, Any]]:
    proc = subprocess.Popen(
        [sys.executable, "-m", "fenceline.soak.hostile", "hoard", str(svc.socket),
         "--runs", str(connections)],
        stdout=subprocess.PIPE, text=True,
    )
    assert proc.stdout is not None
    line = proc.stdout.readline()
    assert line, f"the hoarder exited with {proc.wait(10)}"
    return proc, json.loads(line)


def end(proc: subprocess.Popen[str]) -> None:
    proc.kill()
    proc.wait(10)
    assert proc.stdout is not None
    proc.stdout.close()


def others_are_served(svc: Service, user: User) -> None:
    """The other user connects, imports, runs; HTTP answers it."""
    assert user("ipc", socket=str(svc.socket))["ok"]
    assert user("ipc_import", socket=str(svc.socket), memfd=True)["ok"]
    runs = user("runs", socket=str(svc.socket), seconds=0.5)
    assert runs["runs"] > 0 and runs["wrong"] == 0, runs
    infer = user("http", method="POST", url=f"{svc.url}/v2/models/add_64x64/infer", json=INFER)
    assert infer["status"] == 200, infer
    assert infer["body"]["outputs"][0]["data"][:3] == [2.0, 2.0, 2.0]


def test_one_user_is_held_to_its_share_of_imports_over_all_its_connections(
    model_repo: Path, shared: Path, other_user: User
) -> None:
    with running(model_repo, shared, "--allow-uid", str(other_user.uid), "--max-imports", "100",
                 "--max-imports-per-user", "250") as svc:
        proc, got = hoard(svc, 24)
        try:
            print(f"\nhoarder: {got}")
            # 100 on each of two connections, 50 on the third: the user's bound, not a client's.
            assert got["imports"] == 250 and got["connections"] == 3, got
            assert got["code"] == "resource_exhausted"
            assert f"uid {os.geteuid()} holds 250 imports over its clients" in got["message"]
            assert "--max-imports-per-user 250" in got["message"]
            others_are_served(svc, other_user)
            assert httpx.get(f"{svc.url}/v2/health/ready").status_code == 200
        finally:
            end(proc)


def test_imports_at_the_fd_bound_keep_fds_for_others_and_readiness_says_why(
    model_repo: Path, shared: Path, other_user: User
) -> None:
    # A soft and hard limit of 2,500 fds: the imports of every user together get 1,250 of them
    # (fenceline.ipc.limits.import_bound), the rest is kept for connections and HTTP.
    with running(model_repo, shared, "--allow-uid", str(other_user.uid),
                 "--max-imports-per-user", "100000", fd_limits=(2500, 2500)) as svc:
        probe = httpx.Client(base_url=svc.url, timeout=10)
        try:
            proc, got = hoard(svc, 24)
            try:
                print(f"\nhoarder: {got}")
                assert got["imports"] == 1250 and got["code"] == "resource_exhausted", got
                assert "the service holds 1250 imports, its most (1250" in got["message"]
                ready = probe.get("/v2/health/ready")
                assert ready.status_code == 503
                assert ready.json()["code"] == "unavailable"
                assert "the service holds 1250 imports" in ready.json()["error"]
                assert probe.get("/v2/health/live").status_code == 200
                # Another user's connection, runs and HTTP infer work; its import is refused
                # with the same reason, not a lost connection.
                assert other_user("ipc", socket=str(svc.socket))["ok"]
                refused = other_user("ipc_import", socket=str(svc.socket), memfd=True)
                assert refused["code"] == "resource_exhausted", refused
                infer = other_user("http", method="POST", url=f"{svc.url}/v2/models/add_64x64/infer",
                              json=INFER)
                assert infer["status"] == 200, infer
            finally:
                end(proc)
            wait_until(lambda: probe.get("/v2/health/ready").status_code == 200,
                       what="ready once the hoarder is gone")
            others_are_served(svc, other_user)
        finally:
            probe.close()
