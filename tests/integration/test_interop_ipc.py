"""The IPC fast path against a real service process, with renderers in other processes."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

import httpx
import numpy as np
import pytest

from fenceline.client import ClientError, Fence, IpcClient, ServiceError, SharedFrame, View
from fenceline.protocol import codec
from tests.support.helpers import open_session, reference
from tests.support.service import Service
from tests.support.waiting import wait_until

HERE = Path(__file__).parents[1] / "support"


def diff(now: list[str], before: list[str]) -> str:
    extra, gone = sorted(set(now) - set(before)), sorted(set(before) - set(now))
    return f"extra fds {extra}, missing fds {gone}, {len(now)} now vs {len(before)} before"


def test_hello_reports_the_same_capabilities_as_http(service: Service) -> None:
    with IpcClient(service.socket) as c:
        assert c.server["protocol"] == codec.VERSION
        assert c.server["capabilities"] == httpx.get(service.url + "/v2/interop/capabilities").json()


def test_outputs_are_bitwise_equal_to_a_direct_onnxruntime_run(service: Service, model_repo: Path) -> None:
    shape = [1, 3, 720, 1280]
    with IpcClient(service.socket) as c:
        s = open_session(c, "image_filter", shape, input_name="image", output_name="display")
        rng = np.random.default_rng(7)
        for v in (1, 2):
            s.x[:] = rng.random(shape, dtype=np.float32) * 2
            s.wait.signal(v)
            assert c.run(s.session_id, v).signal_value == v
            (want,) = reference(model_repo, "image_filter", {"image": s.x.copy()})
            assert want.dtype == s.y.dtype and np.array_equal(want, s.y)
        s.close()


def test_fp16_views_run(service: Service, model_repo: Path) -> None:
    with IpcClient(service.socket) as c:
        s = open_session(c, "add_64x64_fp16", [1, 3, 64, 64], dtype=np.float16, datatype="FP16")
        s.x[:] = np.linspace(0, 1, s.x.size, dtype=np.float16).reshape(s.x.shape)
        s.wait.signal(1)
        c.run(s.session_id, 1)
        (want,) = reference(model_repo, "add_64x64_fp16", {"x": s.x.copy()})
        assert np.array_equal(want, s.y)
        s.close()


def test_memory_in_use_cannot_be_released(service: Service) -> None:
    """Run errors over every client: tests/integration/test_runs.py."""
    with IpcClient(service.socket) as c:
        s = open_session(c, "add_64x64", [1, 3, 64, 64])
        with pytest.raises(ServiceError) as e:
            c.release_memory(s.memory_id)
        assert e.value.code == "conflict"
        s.close()


def test_a_timed_out_run_is_not_queued_and_the_same_run_can_be_sent_again(service: Service) -> None:
    with IpcClient(service.socket) as c:
        s = open_session(c, "add_64x64", [1, 3, 64, 64])
        s.y[:] = 7
        with pytest.raises(ServiceError) as e:
            c.run(s.session_id, 4, signal_value=5, timeout_ms=30)
        assert e.value.code == "timed_out" and e.value.queued is False
        assert e.value.details == {"queued": False, "wait_value": 4, "signal_value": 5}
        assert s.signal.value == 0 and np.all(s.y == 7)
        s.x[:] = 1
        s.wait.signal(4)
        assert c.run(s.session_id, 4, signal_value=5).signal_value == 5
        assert s.signal.value == 5 and np.all(s.y == 2)
        s.close()


def test_run_async_is_answered_with_a_run_reply(service: Service) -> None:
    """docs/ipc.md: RUN_ASYNC's reply kind is RUN's (0x8010), not 0x8011."""
    with IpcClient(service.socket) as c:
        s = open_session(c, "add_64x64", [1, 3, 64, 64])
        s.wait.signal(1)
        rid = 77
        frame = codec.encode_run_async(rid, codec.Run(codec.session_id_bytes(s.session_id), 1, None, None))
        reply = c._exchange(frame, rid)
        assert reply.kind == 0x8010 and codec.decode_run_reply(reply.body).signal_value == 1
        s.close()


def test_objects_of_one_connection_are_invisible_to_another(service: Service) -> None:
    with IpcClient(service.socket) as a, IpcClient(service.socket) as b:
        s = open_session(a, "add_64x64", [1, 3, 64, 64])
        for call in (lambda: b.run(s.session_id, 1), lambda: b.describe("memory", s.memory_id),
                     lambda: b.release_fence(s.wait_id)):
            with pytest.raises(ServiceError) as e:
                call()
            assert e.value.code == "not_found"
        r = httpx.get(f"{service.url}/v2/interop/sessions/{s.session_id}")
        assert r.status_code == 404
        s.close()


def test_closing_a_connection_releases_its_objects(service: Service) -> None:
    _, maps_before = service.settled()
    c = IpcClient(service.socket)
    s = open_session(c, "add_64x64", [1, 3, 64, 64])
    assert len(service.maps()) > len(maps_before)
    c.close()
    wait_until(lambda: service.maps() == maps_before, what=service.maps)
    s.close()


def test_a_refused_session_keeps_nothing_of_the_memory_it_named(service: Service) -> None:
    """A session the model refuses (views that do not fit its input) holds nothing once
    refused: the memory and fences it named, released, are unmapped at once, while the
    connection that was refused goes on."""
    _, maps_before = service.settled()
    with IpcClient(service.socket) as c, SharedFrame(4096, named=False) as frame, \
            Fence(named=False) as wait, Fence(named=False) as signal:
        mid = c.import_memory(frame)
        wid, sid = c.import_fence(wait), c.import_fence(signal)
        one = [1, 1, 1, 1]
        with pytest.raises(ServiceError) as e:
            c.create_session("image_filter", {"image": View(mid, "FP32", one)},
                             {"display": View(mid, "FP32", one)}, wid, sid)
        assert e.value.code == "invalid_argument" and "'image'" in str(e.value), str(e.value)
        c.release_memory(mid)
        c.release_fence(wid)
        c.release_fence(sid)
        wait_until(lambda: service.maps() == maps_before, what=service.maps)
        assert c.describe("model", "image_filter")["name"] == "image_filter"  # still served


def test_a_killed_renderer_leaks_nothing_and_the_service_keeps_serving(service: Service) -> None:
    _, maps_before = service.settled()
    table_before = service.fd_table()
    proc = subprocess.Popen(
        [sys.executable, str(HERE / "renderer_proc.py"), str(service.socket), "add_64x64", "-1"],
        stdout=subprocess.PIPE, text=True,
    )
    assert proc.stdout is not None
    info = json.loads(proc.stdout.readline())
    assert "session" in info
    wait_until(lambda: len(service.maps()) > len(maps_before), what="the renderer's mappings")
    # What the renderer made the service open (its connection, its imports). Comparing only
    # these, not every fd, keeps the check deterministic while unrelated fds of the service
    # (HTTP connections of earlier tests closing late under load) come and go.
    added = service.fd_table() - table_before
    assert any("socket:" in target for _, target in added), added
    time.sleep(0.3)  # mid-stream
    proc.send_signal(signal.SIGKILL)
    proc.wait(10)
    proc.stdout.close()
    wait_until(lambda: service.maps() == maps_before and not added & service.fd_table(),
               what=lambda: (service.maps(), added & service.fd_table()))
    with IpcClient(service.socket) as c:
        s = open_session(c, "add_64x64", [1, 3, 64, 64])
        s.x[:] = 1
        s.wait.signal(1)
        assert c.run(s.session_id, 1).signal_value == 1 and np.all(s.y == 2)
        s.close()


def test_a_renderer_process_streams_correct_frames(service: Service) -> None:
    out = subprocess.run(
        [sys.executable, str(HERE / "renderer_proc.py"), str(service.socket), "add_64x64", "200"],
        capture_output=True, text=True, timeout=60,
    )
    assert out.returncode == 0, out.stdout + out.stderr
    assert json.loads(out.stdout.splitlines()[-1]) == {"done": 200}


def raw_socket(service: Service) -> socket.socket:
    s = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET)
    s.connect(str(service.socket))
    s.settimeout(10)
    return s


def test_malformed_frames_get_error_replies_and_the_connection_survives(service: Service) -> None:
    with raw_socket(service) as s:
        for data in (b"", b"xx", b"\x00" * 16, codec.encode(0x0999, 5, b"{}"),
                     codec.encode(codec.Kind.RUN, 6, b"short"), codec.encode(codec.Kind.IMPORT_MEMORY, 7, b"{bad")):
            if not data:
                continue
            s.send(data)
            reply = codec.decode(s.recv(codec.MAX_FRAME))
            assert reply.kind == codec.Kind.ERROR
            assert codec.decode_error(reply.body).code == "invalid_request"
        s.send(codec.encode_json(codec.Kind.HELLO, 8, {"client": "raw"}))
        assert codec.decode(s.recv(codec.MAX_FRAME)).kind == codec.Kind.HELLO | codec.REPLY_BIT


def test_fds_sent_with_a_bad_request_are_closed_by_the_service(service: Service) -> None:
    fds_before, _ = service.settled()
    with raw_socket(service) as s, SharedFrame(4096) as a, SharedFrame(4096) as b:
        body = json.dumps({"handle_type": "host_fd"}).encode()
        socket.send_fds(s, [codec.encode(codec.Kind.IMPORT_MEMORY, 1, body)], [a.fd, b.fd])
        reply = codec.decode(s.recv(codec.MAX_FRAME))
        assert reply.kind == codec.Kind.ERROR and "at most one fd" in codec.decode_error(reply.body).message
        socket.send_fds(s, [codec.encode_json(codec.Kind.HELLO, 2, {})], [a.fd])
        assert codec.decode(s.recv(codec.MAX_FRAME)).kind == codec.Kind.HELLO | codec.REPLY_BIT
        socket.send_fds(s, [codec.encode_run(3, codec.Run(b"\0" * 16, 1, None, 0))], [a.fd])
        assert codec.decode(s.recv(codec.MAX_FRAME)).kind == codec.Kind.ERROR
    wait_until(lambda: sorted(service.fds()) == fds_before, what=lambda: diff(service.fds(), fds_before))


def test_socket_is_private_to_its_user(service: Service) -> None:
    assert (os.stat(service.socket).st_mode & 0o777) == 0o600


def test_client_reports_a_missing_service_clearly(tmp_path: Path) -> None:
    with pytest.raises(ClientError, match="cannot connect"):
        IpcClient(tmp_path / "none.sock")


def test_sessions_run_in_parallel_while_one_waits(service: Service) -> None:
    with IpcClient(service.socket) as a, IpcClient(service.socket) as b:
        sa = open_session(a, "add_64x64", [1, 3, 64, 64])
        sb = open_session(b, "add_64x64", [1, 3, 64, 64])
        waiting = threading.Thread(target=lambda: a.run(sa.session_id, 1, timeout_ms=20000))
        waiting.start()
        time.sleep(0.2)
        for v in range(1, 21):  # b keeps running while a's session waits on its fence
            sb.wait.signal(v)
            assert b.run(sb.session_id, v).signal_value == v
        assert waiting.is_alive() and sa.signal.value == 0
        sa.wait.signal(1)
        waiting.join(20)
        assert sa.signal.value == 1
        sa.close()
        sb.close()



def test_runs_in_flight_on_one_connection_are_answered_in_order(
    service: Service, model_repo: Path
) -> None:
    """A renderer with frames in flight: RUNs of two sessions (double buffering) sent before
    their replies are collected; each reply answers its own request, in order, and each frame's
    outputs are its own inputs' (the bench's pipelined rows rely on this)."""
    shape = [1, 3, 64, 64]
    rng = np.random.default_rng(3)
    with IpcClient(service.socket) as c:
        buffers = [open_session(c, "add_64x64", shape) for _ in range(2)]
        pending: list[tuple[int, int, np.ndarray]] = []
        for v in range(1, 9):
            s = buffers[v % 2]
            if len(pending) == 2:  # frame v reuses the buffers of frame v - 2
                rid, want_v, x = pending.pop(0)
                assert c.recv_run_reply(rid).signal_value == want_v
                (want,) = reference(model_repo, "add_64x64", {"x": x})
                assert np.array_equal(want, buffers[want_v % 2].y)
            s.x[:] = rng.random(shape, dtype=np.float32)
            s.wait.signal(v)
            pending.append((c.send_run(s.session_id, v), v, s.x.copy()))
        for rid, want_v, x in pending:
            assert c.recv_run_reply(rid).signal_value == want_v
            (want,) = reference(model_repo, "add_64x64", {"x": x})
            assert np.array_equal(want, buffers[want_v % 2].y)
        for s in buffers:
            s.close()
