"""Hostile renderers against a real service process (docs/reliability.md): shrunk memory and
fence pages, fds on malformed frames, fd exhaustion, renderers killed while the service waits or
before it replies. The hostile side is ``fenceline.soak.hostile``, in its own process."""

from __future__ import annotations

import contextlib
import json
import os
import socket
import struct
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any, cast

import httpx
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from fenceline.client import ClientError, Fence, IpcClient, ServiceError, SharedFrame
from fenceline.errors import InvalidRequest
from fenceline.protocol import codec
from fenceline.soak.hostile import FdOnly
from tests.support.helpers import open_session
from tests.support.metrics import metric
from tests.support.service import Service, start_service, stop_service
from tests.support.waiting import wait_until

SHAPE = [1, 3, 64, 64]


def hostile(service: Service, mode: str, *args: str, timeout: float = 120) -> dict[str, Any]:
    out = subprocess.run(
        [sys.executable, "-m", "fenceline.soak.hostile", mode, str(service.socket), *args],
        capture_output=True, text=True, timeout=timeout,
    )
    assert out.returncode == 0, out.stdout + out.stderr
    result: dict[str, Any] = json.loads(out.stdout.splitlines()[-1])
    return result


@contextlib.contextmanager
def hostile_process(service: Service, mode: str) -> Iterator[subprocess.Popen[str]]:
    """A hostile renderer that is set up (its ready line read) when the block starts."""
    proc = subprocess.Popen(
        [sys.executable, "-m", "fenceline.soak.hostile", mode, str(service.socket)],
        stdout=subprocess.PIPE, text=True,
    )
    try:
        assert proc.stdout is not None
        assert "ready" in json.loads(proc.stdout.readline())
        yield proc
    finally:
        if proc.poll() is None:
            proc.kill()
        proc.wait(10)
        if proc.stdout is not None:
            proc.stdout.close()


def check_good_renderer(client: IpcClient, value: int) -> None:
    s = open_session(client, "add_64x64", SHAPE)
    s.x[:] = value
    s.wait.signal(1)
    assert client.run(s.session_id, 1).signal_value == 1
    assert np.all(s.y == value + 1)
    client.release_session(s.session_id)
    s.close()


# -- shrunk memory (SIGBUS) ----------------------------------------------------------------------


@pytest.mark.parametrize("mode", ["shrink-memfd", "shrink-shm"])
def test_memory_shrunk_during_a_run_fails_that_run_and_nothing_else(
    service: Service, mode: str
) -> None:
    _, maps_before = service.settled()
    faults_before = metric(service, "fenceline_interop_shrunk_memory_faults_total")
    with IpcClient(service.socket) as other:
        bystander = open_session(other, "add_64x64", SHAPE)
        result = hostile(service, mode)
        assert service.proc.poll() is None, service.log_text()
        # The renderer only gets device_lost, and at least one run faulted inside the model.
        assert set(result["codes"]) <= {"ok", "device_lost"}, result
        assert result["guarded"], result
        assert metric(service, "fenceline_interop_shrunk_memory_faults_total") > faults_before
        bystander.x[:] = 3
        bystander.wait.signal(1)
        assert other.run(bystander.session_id, 1).signal_value == 1 and np.all(bystander.y == 4)
        bystander.close()
    wait_until(lambda: service.maps() == maps_before, what=service.maps)


def test_a_shrunk_fence_page_fails_the_wait_and_the_signal_with_device_lost(
    service: Service,
) -> None:
    result = hostile(service, "shrink-fence")
    assert result == {"wait": "device_lost", "signal": "device_lost"}
    assert service.proc.poll() is None, service.log_text()
    with IpcClient(service.socket) as c:
        check_good_renderer(c, 5)


# -- fds on malformed frames ---------------------------------------------------------------------


def test_fds_attached_to_frames_with_bad_headers_are_closed(service: Service) -> None:
    fds_before, maps_before = service.settled()
    # 100 rounds of 6 malformed frames, each with 2 fds of a 1 MiB memfd: 1,200 fds.
    result = hostile(service, "bad-headers", "--runs", "100")
    assert result == {"frames": 600, "wrong": [], "connection_usable": True}
    wait_until(lambda: sorted(service.fds()) == fds_before,
               what=lambda: sorted(set(service.fds()) - set(fds_before)))
    assert service.maps() == maps_before


def test_header_errors_echo_the_request_id_and_say_invalid_request(service: Service) -> None:
    with socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET) as s:
        s.connect(str(service.socket))
        s.settimeout(10)
        bad_magic = b"XXXX" + codec.encode_json(codec.Kind.HELLO, 77, {})[4:]
        s.send(bad_magic)
        reply = codec.decode(s.recv(codec.MAX_FRAME))
        assert (reply.kind, reply.request_id) == (codec.Kind.ERROR, 77)
        assert codec.decode_error(reply.body).code == "invalid_request"
        s.send(b"")  # an empty frame is answered, and the connection stays open
        reply = codec.decode(s.recv(codec.MAX_FRAME))
        assert (reply.kind, reply.request_id) == (codec.Kind.ERROR, 0)
        assert "empty frame" in codec.decode_error(reply.body).message
        s.send(codec.encode_json(codec.Kind.HELLO, 78, {"client": "x"}))
        assert codec.decode(s.recv(codec.MAX_FRAME)).request_id == 78


def test_hello_rejects_unknown_fields(service: Service) -> None:
    with socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET) as s:
        s.connect(str(service.socket))
        s.settimeout(10)
        s.send(codec.encode_json(codec.Kind.HELLO, 5, {"client": "x", "colour": "blue"}))
        reply = codec.decode(s.recv(codec.MAX_FRAME))
        err = codec.decode_error(reply.body)
        assert reply.kind == codec.Kind.ERROR and err.code == "invalid_request"
        assert "colour" in err.message


@pytest.mark.parametrize("features", ["reply_flags", [1], ["x"] * 33, {"reply_flags": True}])
def test_hello_refuses_features_that_are_not_a_short_list_of_names(
        service: Service, features: object) -> None:
    with socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET) as s:
        s.connect(str(service.socket))
        s.settimeout(10)
        s.send(codec.encode_json(codec.Kind.HELLO, 6, {"client": "x", "features": features}))
        reply = codec.decode(s.recv(codec.MAX_FRAME))
        err = codec.decode_error(reply.body)
        assert reply.kind == codec.Kind.ERROR and err.code == "invalid_request"
        assert "features is a list of at most 32 names" in err.message
        s.send(codec.encode_json(codec.Kind.HELLO, 7, {"features": []}))  # still served
        assert codec.decode_json(codec.decode(s.recv(codec.MAX_FRAME)).body)["features"] == []


# -- renderers that die --------------------------------------------------------------------------


def test_a_renderer_killed_during_a_long_wait_is_released_before_the_wait_ends(
    service: Service,
) -> None:
    fds_before, maps_before = service.settled()
    with hostile_process(service, "die-waiting") as proc:
        wait_until(lambda: metric(service, "fenceline_session_active", 0, model="add_64x64") >= 1,
                   what="the renderer's session")
        time.sleep(0.3)  # the service is in the fence wait (600 s timeout)
        proc.kill()
        proc.wait(10)
        # Long before the wait's 600-s timeout: the service saw the renderer die.
        wait_until(lambda: service.maps() == maps_before, 60, what=service.maps)
    wait_until(lambda: sorted(service.fds()) == fds_before,
               what=lambda: sorted(set(service.fds()) - set(fds_before)))
    assert metric(service, "fenceline_ipc_open_connections") == 0


def test_a_renderer_killed_before_its_reply_is_released_without_garbage_collection(
    service: Service,
) -> None:
    _, maps_before = service.settled()
    mapped_before = metric(service, "fenceline_interop_host_mappings")
    for _ in range(3):
        proc = subprocess.Popen(
            [sys.executable, "-m", "fenceline.soak.hostile", "die-before-reply",
             str(service.socket)],
            stdout=subprocess.DEVNULL,
        )
        proc.wait(60)
        assert proc.returncode == -9
    # The objects are released, and /metrics counts what is really still mapped.
    wait_until(lambda: service.maps() == maps_before, 2.0, what=service.maps)
    assert metric(service, "fenceline_interop_host_mappings") == mapped_before
    assert metric(service, "fenceline_interop_imported_handles", 0, kind="host_fd") == 0


# -- fd exhaustion -------------------------------------------------------------------------------


@pytest.fixture
def fd_starved(model_repo: Path, tmp_path: Path) -> Iterator[Service]:
    """A service whose fd limit is 64, hard as well as soft (the service raises its soft limit
    up to its hard one): a few dozen connections exhaust it."""
    svc = start_service(model_repo, tmp_path, fd_limits=(64, 64))
    yield svc
    stop_service(svc)


def _hello(path: Path, request_id: int) -> tuple[socket.socket, str]:
    """A raw connection and how its HELLO was answered: "ok", an error code, or "no answer"."""
    s = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET)
    s.settimeout(3)
    try:
        s.connect(str(path))
        s.send(codec.encode_json(codec.Kind.HELLO, request_id, {"client": "filler"}))
        data = s.recv(codec.MAX_FRAME)
    except OSError:
        return s, "no answer"
    if not data:
        return s, "closed"
    reply = codec.decode(data)
    return s, "ok" if reply.kind != codec.Kind.ERROR else codec.decode_error(reply.body).code


def test_ipc_accepts_again_after_fd_exhaustion_and_readiness_says_so(
    fd_starved: Service, request: pytest.FixtureRequest
) -> None:
    svc = fd_starved
    probe = httpx.Client(base_url=svc.url, timeout=10)  # keep-alive: needs no new fd later
    request.addfinalizer(probe.close)  # also when an assertion below fails
    assert probe.get("/v2/health/ready").status_code == 200
    held: list[socket.socket] = []
    try:
        answer = "ok"
        for i in range(200):
            s, answer = _hello(svc.socket, i + 1)
            held.append(s)
            if answer != "ok":
                break
        assert answer in ("resource_exhausted", "no answer", "closed"), answer
        assert probe.get("/v2/health/ready").status_code == 503
    finally:
        for s in held:
            s.close()
    wait_until(lambda: probe.get("/v2/health/ready").status_code == 200, what="ready again")
    with IpcClient(svc.socket) as c:  # the accept loop is alive again
        check_good_renderer(c, 7)
    assert "Traceback" not in svc.log_text()


# -- fuzz: malformed frames carrying fds ---------------------------------------------------------

_good = codec.encode_json(codec.Kind.IMPORT_MEMORY, 1, {"handle_type": "host_fd"})
malformed = st.one_of(
    st.binary(max_size=15),  # short of a header, or empty
    st.tuples(st.integers(0, 15), st.integers(1, 255)).map(  # one header byte changed
        lambda p: _good[: p[0]] + bytes([_good[p[0]] ^ p[1]]) + _good[p[0] + 1 :]
    ),
    st.binary(min_size=1, max_size=64).map(lambda extra: _good + extra),  # body_length wrong
    st.binary(min_size=16, max_size=300),  # anything
).filter(lambda data: _not_a_frame(data))


def _not_a_frame(data: bytes) -> bool:
    try:
        codec.decode(data)
    except InvalidRequest:
        return True
    return False


def _fd_kinds(stack: contextlib.ExitStack) -> list[int]:
    """One fd of each kind a renderer could attach: memfd, /dev/shm-like file, pipe, socket."""
    frame = stack.enter_context(SharedFrame(4096))
    r, w = os.pipe()
    a, b = socket.socketpair()
    stack.callback(os.close, r)
    stack.callback(os.close, w)
    stack.enter_context(a)
    stack.enter_context(b)
    return [frame.fd, r, w, a.fileno(), os.open(os.devnull, os.O_RDONLY)]


def test_fuzzed_malformed_frames_with_fds_leave_no_fd_behind(service: Service) -> None:
    fds_before, _ = service.settled()
    with contextlib.ExitStack() as stack:
        kinds = _fd_kinds(stack)
        stack.callback(os.close, kinds[-1])
        conn = stack.enter_context(socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET))
        conn.connect(str(service.socket))
        conn.settimeout(10)

        @settings(max_examples=300, deadline=None)
        @given(data=malformed, attach=st.lists(st.sampled_from(kinds), max_size=6))
        def one(data: bytes, attach: list[int]) -> None:
            socket.send_fds(conn, [data], attach) if attach else conn.send(data)
            reply = codec.decode(conn.recv(codec.MAX_FRAME))
            assert reply.kind == codec.Kind.ERROR
            assert codec.decode_error(reply.body).code == "invalid_request"
            assert reply.request_id == (codec.peek_request_id(data))

        one()
    wait_until(lambda: sorted(service.fds()) == fds_before,
               what=lambda: sorted(set(service.fds()) - set(fds_before)))


# -- rules of docs/ipc.md and docs/fences.md -----------------------------------------------------


def _fence_page(flags: int = 0, status: int = 0) -> int:
    fd = os.memfd_create("rule-fence", os.MFD_CLOEXEC | os.MFD_ALLOW_SEALING)
    os.ftruncate(fd, 4096)
    os.pwrite(fd, struct.pack("<IHHQII", 0x46544C46, 1, flags, 0, 0, status), 0)
    return fd


@pytest.mark.parametrize(("flags", "status"), [(2, 0), (3, 0), (0x8000, 0), (0, 3), (0, 0xFFFFFFFF)])
def test_fence_pages_with_undefined_flags_or_an_undefined_status_are_refused(
    service: Service, flags: int, status: int
) -> None:
    fd = _fence_page(flags, status)
    try:
        with IpcClient(service.socket) as c, pytest.raises(ServiceError) as e:
            c.import_fence(cast(Fence, FdOnly(fd)))
        assert e.value.code == "invalid_argument" and "flags 0 or 1" in e.value.message
    finally:
        os.close(fd)


def test_an_undefined_status_written_during_a_wait_ends_it_with_device_lost(
    service: Service,
) -> None:
    with IpcClient(service.socket) as c:
        s = open_session(c, "add_64x64", SHAPE)
        rid = c.send_run(s.session_id, 1, timeout_ms=20_000)
        time.sleep(0.2)
        os.pwrite(s.wait.fd, struct.pack("<I", 9), 20)  # status := 9, no wake: waits re-check
        with pytest.raises(ServiceError) as e:
            c.recv_run_reply(rid)
        assert e.value.code == "device_lost" and s.signal.value == 0
        s.close()


def test_run_rules_timeout_zero_first_value_and_flags(service: Service) -> None:
    with IpcClient(service.socket) as c:
        s = open_session(c, "add_64x64", SHAPE)
        for value, timeout_ms, code in [(1, 0, "timed_out"), (1, 600_001, "invalid_argument"),
                                        (0, 1000, "conflict")]:
            with pytest.raises(ServiceError) as e:
                c.run(s.session_id, value, timeout_ms=timeout_ms)
            assert e.value.code == code, (value, timeout_ms, e.value)
        s.wait.signal(1)
        assert c.run(s.session_id, 1, timeout_ms=0).signal_value == 1  # 0: no wait, reached
        assert s.signal.value == 1
        run = codec.Run(codec.session_id_bytes(s.session_id), 2, None, None, flags=1)
        c._send(codec.encode_run(9, run))
        with pytest.raises(ServiceError) as e:
            c.recv_run_reply(9)
        assert e.value.code == "invalid_request"
        s.close()


def test_a_short_soak_with_hostile_renderers_leaks_nothing() -> None:
    from fenceline.soak import run_soak
    from fenceline.soak.hostile_pool import MODES

    report = run_soak(renderers=1, seconds=8, kill_every=3.0, warmup=1.0, hostile=2)
    # The warm-up ran one client of every mode, each to its end and its release.
    assert report.hostile is not None and set(report.hostile.clients) == set(MODES)
    assert report.quiet_rss_kib > 0
    assert report.checks() == {name: True for name in report.checks()}, report.to_json()


def test_conflict_on_a_shared_output_fence_can_come_after_the_outputs_were_written(
    service: Service,
) -> None:
    # docs/ipc.md: the output fence is checked before the wait and signalled after the model.
    with IpcClient(service.socket) as c:
        s = open_session(c, "add_64x64", SHAPE)
        s.x[:] = 4
        rid = c.send_run(s.session_id, 1, signal_value=5, timeout_ms=20_000)
        time.sleep(0.3)  # checked (0 < 5), now waiting
        s.signal.signal(10)  # another signaller of the same output fence gets there first
        s.wait.signal(1)
        with pytest.raises(ServiceError) as e:
            c.recv_run_reply(rid)
        assert e.value.code == "conflict"
        assert np.all(s.y == 5) and s.signal.value == 10  # written, not signalled
        s.close()


def test_the_documented_host_fd_import_body_works_as_given(service: Service) -> None:
    body = {"handle_type": "host_fd", "size_bytes": 0, "offset_bytes": 0, "access": "read_write"}
    with socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET) as s, SharedFrame(8192) as frame:
        s.connect(str(service.socket))
        s.settimeout(10)
        socket.send_fds(s, [codec.encode_json(codec.Kind.IMPORT_MEMORY, 3, body)], [frame.fd])
        reply = codec.decode(s.recv(codec.MAX_FRAME))
        assert reply.kind == codec.Kind.IMPORT_MEMORY | codec.REPLY_BIT, reply
        info = codec.decode_json(reply.body)
        assert info["size_bytes"] == 8192 and info["handle_type"] == "host_fd"


def test_when_the_service_dies_a_waiting_renderer_sees_end_of_file_and_an_untouched_fence(
    model_repo: Path, tmp_path: Path,
) -> None:
    svc = start_service(model_repo, tmp_path)
    try:
        with IpcClient(svc.socket) as c:
            s = open_session(c, "add_64x64", SHAPE)
            rid = c.send_run(s.session_id, 1, timeout_ms=20_000)
            time.sleep(0.3)
            svc.proc.kill()
            svc.proc.wait(10)
            with pytest.raises(ClientError, match="closed the connection"):
                c.recv_run_reply(rid)
            # Nothing signals the output fence and nothing marks it: the page is the renderer's.
            assert (s.signal.value, s.signal.status) == (0, 0)
            assert not s.signal.wait(1, timeout_s=0.2)
            s.close()
    finally:
        stop_service(svc)


def test_a_triton_region_shrunk_after_registration_answers_device_lost(service: Service) -> None:
    n = 3 * 64 * 64 * 4
    key = f"/fenceline-test-region-{os.getpid()}"
    fd = os.open(f"/dev/shm{key}", os.O_RDWR | os.O_CREAT | os.O_EXCL, 0o600)
    base = service.url + "/v2/systemsharedmemory/region/shrunk"
    try:
        os.ftruncate(fd, 2 * n)
        r = httpx.post(base + "/register", json={"key": key, "offset": 0, "byte_size": 2 * n})
        assert r.status_code == 200, r.text
        shm_param = {"shared_memory_region": "shrunk", "shared_memory_byte_size": n}
        body = {
            "inputs": [{"name": "x", "datatype": "FP32", "shape": SHAPE, "parameters": shm_param}],
            "outputs": [{"name": "y", "parameters": {**shm_param, "shared_memory_offset": n}}],
        }
        infer = service.url + "/v2/models/add_64x64/infer"
        assert httpx.post(infer, json=body, timeout=30).status_code == 200
        os.ftruncate(fd, 0)
        r = httpx.post(infer, json=body, timeout=30)
        assert r.status_code == 503 and r.json()["code"] == "device_lost", r.text
        assert service.proc.poll() is None
    finally:
        httpx.post(base + "/unregister")
        os.close(fd)
        os.unlink(f"/dev/shm{key}")
