"""Who may trace (docs/tracing.md, "Who may trace"): a trace shows every user's sessions, so
with the default settings only a client holding the service's control token (a 0600 file of
the service's user beside its socket, which ``fenceline trace`` reads by itself) records or
ends one over HTTP; a second local user, even one allowed on the IPC socket, cannot. The
second user is a real uid (tests/support/as_user.py), so these tests need root."""

from __future__ import annotations

import os
import shutil
import stat
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from fenceline.ipc.control_token import token_path
from tests.integration.test_multi_user import User
from tests.integration.test_trace import TRACE, answer, auth, trace_in_background, trace_on
from tests.support.helpers import shared_dir
from tests.support.service import Service, running


def test_without_the_control_token_http_traces_are_refused(service: Service) -> None:
    for method, body in (("POST", {"seconds": 0.01}), ("DELETE", None)):
        for headers in ({}, {"Authorization": "Bearer not-the-token"}):
            r = httpx.request(method, service.url + TRACE, json=body, headers=headers, timeout=10)
            assert r.status_code == 403 and r.json()["code"] == "permission_denied", r.text
            assert str(token_path(service.socket)) in r.json()["error"]
    assert httpx.get(service.url + TRACE, timeout=10).json() == {"recording": False}
    token = token_path(service.socket)
    assert stat.S_IMODE(token.stat().st_mode) == 0o600 and token.stat().st_uid == os.geteuid()


def test_http_trace_setting_opens_traces_to_every_http_client(
    model_repo: Path, tmp_path: Path
) -> None:
    with running(model_repo, tmp_path, "--http-trace", "--trace-max-frames", "50") as svc:
        r = httpx.post(svc.url + TRACE, json={"seconds": 0.01, "frames": 50}, timeout=30)
        assert r.status_code == 200 and r.json()["otherData"]["frames"] == 0, r.text
        r = httpx.post(svc.url + TRACE, json={"seconds": 0.01, "frames": 51}, timeout=30)
        assert r.status_code == 400 and "--trace-max-frames" in r.json()["error"], r.text
    assert not token_path(svc.socket).exists()  # the service removed its token when it stopped


needs_root = pytest.mark.skipif(
    os.geteuid() != 0 or shutil.which("useradd") is None,
    reason="a second real Unix user needs root and useradd",
)


@pytest.fixture(scope="module")
def other() -> Iterator[User]:
    u = User("fenceline-test-a")
    yield u
    u.close()


@pytest.fixture(scope="module")
def shared_svc(model_repo: Path, other: User) -> Iterator[Service]:
    """A service whose socket directory every user may enter, which lets ``other`` in over
    IPC: only the token file's own mode keeps it from the token."""
    with shared_dir() as d, running(model_repo, d, "--allow-uid", str(other.uid)) as s:
        yield s


@needs_root
def test_a_second_user_cannot_read_or_stop_a_trace_of_the_first(
    shared_svc: Service, other: User
) -> None:
    assert other("ipc", socket=str(shared_svc.socket))["ok"]  # allowed on the socket
    got = other("trace", url=shared_svc.url, socket=str(shared_svc.socket))
    assert got["token"] is False and got["code"] == "invalid_argument", got
    assert "403" in got["message"] and "every user's sessions" in got["message"]
    with trace_in_background(shared_svc, seconds=30) as tracer:
        stop = other("http", method="DELETE", url=shared_svc.url + TRACE)
        assert stop["status"] == 403 and stop["body"]["code"] == "permission_denied", stop
        read = other("http", method="POST", url=shared_svc.url + TRACE, json={"seconds": 0.01})
        assert read["status"] == 403, read
        assert trace_on(shared_svc.url)  # the first user's trace goes on
        assert httpx.delete(shared_svc.url + TRACE, headers=auth(shared_svc),
                            timeout=10).status_code == 204
        assert answer(tracer).status_code == 200
