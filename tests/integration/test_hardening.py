"""Isolation, limits and lifecycle: every rule gives a clear error and leaves nothing behind."""

from __future__ import annotations

import os
import signal
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import httpx
import numpy as np
import pytest

from fenceline.client import ClientError, Fence, IpcClient, ServiceError, SharedFrame, View
from tests.support.helpers import open_session
from tests.support.service import Service, start_service, stop_service

SHAPE = [1, 3, 64, 64]
NBYTES = 3 * 64 * 64 * 4

Start = Callable[..., Service]


@pytest.fixture
def start(model_repo: Path, tmp_path: Path) -> Iterator[Start]:
    started: list[Service] = []

    def go(*extra: str) -> Service:
        d = tmp_path / f"svc{len(started)}"
        d.mkdir()
        svc = start_service(model_repo, d, *extra)
        started.append(svc)
        return svc

    yield go
    for svc in started:
        stop_service(svc)
        assert "Traceback" not in svc.log_text(), svc.log_text()


def expect(code: str, fn: Callable[[], object]) -> ServiceError:
    with pytest.raises(ServiceError) as e:
        fn()
    assert e.value.code == code, e.value
    return e.value


def test_http_needs_the_bearer_token_when_one_is_set(start: Start, tmp_path: Path) -> None:
    token = tmp_path / "token"
    token.write_text("s3cret-token\n")
    svc = start("--token-file", str(token))
    assert httpx.get(svc.url + "/v2/health/ready").status_code == 200  # probes stay open
    r = httpx.get(svc.url + "/v2/interop/capabilities")
    assert r.status_code == 401 and r.json()["code"] == "unauthenticated"
    assert r.headers["www-authenticate"] == "Bearer"
    bad = httpx.get(svc.url + "/v2/interop/capabilities", headers={"Authorization": "Bearer nope"})
    assert bad.status_code == 401
    ok = httpx.get(svc.url + "/v2/interop/capabilities", headers={"Authorization": "Bearer s3cret-token"})
    assert ok.status_code == 200


def test_request_bodies_over_the_limit_are_refused(start: Start) -> None:
    svc = start("--max-body-mb", "1")
    r = httpx.post(svc.url + "/v2/interop/memory", content=b"x" * (2 << 20), headers={"content-type": "application/json"})
    assert r.status_code == 413 and r.json()["code"] == "payload_too_large"

    def chunks() -> Iterator[bytes]:
        for _ in range(3):
            yield b" " * (1 << 20)

    r = httpx.post(svc.url + "/v2/interop/memory", content=chunks(), headers={"content-type": "application/json"})
    assert r.status_code == 413


def test_per_client_limits_answer_resource_exhausted(start: Start) -> None:
    svc = start("--max-sessions", "1", "--max-imports", "4", "--max-mapped-mb", "1")
    with IpcClient(svc.socket) as c:
        s = open_session(c, "add_64x64", SHAPE)  # 1 memory + 2 fences, 1 session
        expect("resource_exhausted", lambda: c.create_session(
            "add_64x64", {"x": View(s.memory_id, "FP32", SHAPE)}, {"y": View(s.memory_id, "FP32", SHAPE, NBYTES)},
            s.wait_id, s.signal_id))
        with SharedFrame(2 << 20) as big:
            expect("resource_exhausted", lambda: c.import_memory(big))  # over 1 MiB mapped
        with Fence() as f:
            c.import_fence(f)  # the 4th import
            expect("resource_exhausted", lambda: c.import_fence(f))
        s.close()
    with IpcClient(svc.socket) as other:  # limits are per client
        o = open_session(other, "add_64x64", SHAPE)
        o.close()


def test_a_truncated_buffer_fails_the_run_instead_of_crashing(start: Start) -> None:
    svc = start()
    with IpcClient(svc.socket) as c:
        s = open_session(c, "add_64x64", SHAPE, named=True)  # shm objects cannot be sealed
        s.wait.signal(1)
        c.run(s.session_id, 1)
        os.truncate(f"/dev/shm/{s.frame.name[1:]}", 100)
        s.wait.signal(2)
        err = expect("device_lost", lambda: c.run(s.session_id, 2))
        assert "truncated" in err.message
        s.close()
    assert httpx.get(svc.url + "/v2/health/live").status_code == 200


def test_memfd_frames_are_sealed_against_shrinking() -> None:
    with SharedFrame(8192) as f:
        with pytest.raises(OSError):
            os.ftruncate(f.fd, 100)
        assert f.handle.sealed


def test_an_abandoned_fence_fails_runs_with_device_lost(start: Start) -> None:
    svc = start()
    with IpcClient(svc.socket) as c:
        s = open_session(c, "add_64x64", SHAPE)
        s.wait.handle.set_status(1)
        expect("device_lost", lambda: c.run(s.session_id, 1, timeout_ms=5000))
        assert s.signal.value == 0
        s.close()


def made_by_another_process(name: str, service_pid: int) -> bool:
    """A /dev/shm object named by a process other than this test and the service: fenceline's
    clients put their pid in the name (``fenceline-<kind>-<pid>-<token>``), and so do other
    suites' tests (``fenceline-mu-<user>-<pid>-frame``), which may run beside this one."""
    if not name.startswith("fenceline-"):
        return False
    pids = {int(p) for p in name.split("-")[1:] if p.isdigit()}
    return bool(pids) and not pids & {os.getpid(), service_pid}


def test_sigterm_fails_waiting_runs_and_exits_cleanly(start: Start) -> None:
    svc = start()
    shm_before = set(os.listdir("/dev/shm"))
    c = IpcClient(svc.socket)
    s = open_session(c, "add_64x64", SHAPE)
    results: list[object] = []

    def waiting_run() -> None:
        try:
            results.append(c.run(s.session_id, 1, timeout_ms=60_000))
        except (ServiceError, ClientError) as e:
            results.append(e)

    t = threading.Thread(target=waiting_run)
    t.start()
    time.sleep(0.3)
    svc.proc.send_signal(signal.SIGTERM)
    assert svc.proc.wait(20) == 0
    t.join(10)
    (res,) = results  # ended by the shutdown, not by its own 60-s timeout
    assert isinstance(res, ServiceError) and res.code == "unavailable" or isinstance(res, ClientError)
    assert s.signal.value == 0  # nothing ran
    assert not svc.socket.exists()
    ours = {n.lstrip("/") for n in (s.frame.name, s.wait.name, s.signal.name) if n}
    new = set(os.listdir("/dev/shm")) - shm_before - ours
    assert {n for n in new if not made_by_another_process(n, svc.proc.pid)} == set()
    c.close()
    s.close()


def test_clients_reconnect_after_a_service_restart(model_repo: Path, tmp_path: Path) -> None:
    svc = start_service(model_repo, tmp_path)
    c = IpcClient(svc.socket)
    s = open_session(c, "add_64x64", SHAPE)
    stop_service(svc)
    with pytest.raises(ClientError):
        c.run(s.session_id, 1)
    c.close()
    s.close()
    svc = start_service(model_repo, tmp_path)  # same socket path: the stale file is replaced
    try:
        with IpcClient(svc.socket) as c2:
            s2 = open_session(c2, "add_64x64", SHAPE)
            s2.x[:] = 3
            s2.wait.signal(1)
            c2.run(s2.session_id, 1)
            assert np.all(s2.y == 4)
            s2.close()
    finally:
        stop_service(svc)


def test_http_errors_do_not_leak_other_clients_objects(start: Start) -> None:
    svc = start()
    with IpcClient(svc.socket) as c:
        s = open_session(c, "add_64x64", SHAPE)
        for kind, id_ in (("memory", s.memory_id), ("fences", s.wait_id), ("sessions", s.session_id)):
            r = httpx.get(f"{svc.url}/v2/interop/{kind}/{id_}")
            assert r.status_code == 404 and id_ in r.json()["error"]
            assert "/dev/shm" not in r.text and "memfd" not in r.text
        s.close()
