"""Requests that once answered ``internal`` or held a connection forever: deep JSON, huge shape
dimensions, heads that never finish, and the log lines a repeating client causes."""

from __future__ import annotations

import json
import logging
import socket
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import numpy as np
import pytest

from fenceline import logs
from fenceline.client import IpcClient, ServiceError
from fenceline.protocol import codec
from fenceline.protocol.codec import Kind
from tests.support.service import Service, running, start_service, stop_service

DEEP = b"[" * 5000 + b"]" * 5000


@pytest.fixture(scope="module")
def svc(model_repo: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Service]:
    s = start_service(model_repo, tmp_path_factory.mktemp("limits"), "--http-header-timeout-s", "1",
                      "--http-body-idle-s", "1")
    yield s
    stop_service(s)
    text = s.log_text()
    assert "Traceback" not in text and "unexpected error" not in text, text


def test_deeply_nested_kserve_json_is_an_invalid_argument(svc: Service) -> None:
    for path in ("/v2/models/add_64x64/infer", "/v2/systemsharedmemory/region/r/register"):
        for body in (DEEP, b'{"inputs":' + DEEP + b"}"):
            r = httpx.post(svc.url + path, content=body, timeout=30)
            assert r.status_code == 400, (path, r.text)
            assert r.json()["code"] == "invalid_argument"
            assert "nested too deeply" in r.json()["error"]


def test_shm_registration_bodies_that_are_not_json_objects_are_invalid_arguments(
    svc: Service,
) -> None:
    for body, text in ((b"{not json", "failed to parse the request JSON buffer"),
                       (b"[1, 2]", "the request body must be a JSON object")):
        r = httpx.post(svc.url + "/v2/systemsharedmemory/region/r/register", content=body,
                       timeout=30)
        assert r.status_code == 400, r.text
        assert r.json()["code"] == "invalid_argument" and text in r.json()["error"], r.text


def test_control_route_bodies_are_held_to_one_mib(svc: Service) -> None:
    for path in ("/v2/interop/sessions", "/v2/systemsharedmemory/region/r/register"):
        body = json.dumps({"model": "m" * (1 << 20)})
        r = httpx.post(svc.url + path, content=body, timeout=30,
                       headers={"content-type": "application/json"})  # fmt: skip
        assert r.status_code == 413 and r.json()["code"] == "payload_too_large", r.text


def test_deeply_nested_interop_json_is_refused_as_a_client_error(svc: Service) -> None:
    r = httpx.post(svc.url + "/v2/interop/memory", content=DEEP,
                   headers={"content-type": "application/json"}, timeout=30)  # fmt: skip
    assert r.status_code == 400 and r.json()["code"] == "invalid_argument", r.text


def test_deeply_nested_ipc_control_body_is_an_invalid_request(svc: Service) -> None:
    with IpcClient(svc.socket) as client:
        with pytest.raises(ServiceError) as e:
            client._exchange(codec.encode(Kind.DESCRIBE, 7, DEEP[:8000]), 7)
        assert e.value.code == "invalid_request"
        assert "nested too deeply" in e.value.message
        with pytest.raises(ServiceError) as e:  # the connection still serves
            client.describe("memory", "00" * 16)
        assert e.value.code == "not_found"


@pytest.mark.parametrize("dim", [2**63, 2**64, 2**64 + 1])
def test_shape_dimensions_of_2_63_or_more_are_invalid_requests(svc: Service, dim: int) -> None:
    view = {"memory": "m", "datatype": "FP32", "shape": [1, dim]}
    body = {"model": "add_64x64", "inputs": {"x": view}, "outputs": {"y": view},
            "wait_fence": "a", "signal_fence": "b"}  # fmt: skip
    r = httpx.post(svc.url + "/v2/interop/sessions", json=body, timeout=30)
    assert r.status_code == 422 and r.json()["code"] == "invalid_request", r.text
    with IpcClient(svc.socket) as client:
        with pytest.raises(ServiceError) as e:
            client._call(Kind.CREATE_SESSION, body)
        assert e.value.code == "invalid_request"


def test_kserve_shape_whose_product_passes_2_63_says_the_real_count(svc: Service) -> None:
    body = {"inputs": [{"name": "x", "datatype": "FP32", "shape": [2**62, 4], "data": [1.0]}]}
    r = httpx.post(svc.url + "/v2/models/add_64x64/infer", json=body, timeout=30)
    assert r.status_code == 400 and r.json()["code"] == "invalid_argument"
    assert str(2**64) in r.json()["error"]  # not a wrapped int64 product


def _closed_by_peer(s: socket.socket, within_s: float) -> bool:
    s.settimeout(within_s)
    try:
        return s.recv(1) == b""
    except TimeoutError:
        return False
    except ConnectionResetError:
        return True


def test_connections_that_never_finish_a_request_head_are_dropped(svc: Service) -> None:
    port = int(svc.url.rsplit(":", 1)[1])
    slow = []
    for _ in range(20):
        s = socket.create_connection(("127.0.0.1", port))
        s.sendall(b"GET /v2/health/ready HTTP/1.1\r\nHost: x\r\nX-Slow: a")  # no end of head
        slow.append(s)
    silent = socket.create_connection(("127.0.0.1", port))  # sends nothing at all
    try:
        # The deadline is 1 s; 30 s only bounds a failing run.
        assert all(_closed_by_peer(s, 30) for s in [*slow, silent])
    finally:
        for s in [*slow, silent]:
            s.close()


def test_a_request_head_in_time_is_served_and_keep_alive_gets_a_new_deadline(svc: Service) -> None:
    port = int(svc.url.rsplit(":", 1)[1])
    with socket.create_connection(("127.0.0.1", port)) as s:
        s.sendall(b"GET /v2/health/ready HTTP/1.1\r\nHost: x\r\n")
        s.sendall(b"\r\n")
        s.settimeout(30)
        assert s.recv(4096).startswith(b"HTTP/1.1 200")
        s.sendall(b"GET /v2/health/ready HTTP/1.1\r\nHost: x\r\n")  # a second, unfinished head
        assert _closed_by_peer(s, 30)
    assert httpx.get(svc.url + "/v2/health/live", timeout=10).status_code == 200


def test_a_request_body_that_stops_halfway_is_dropped(svc: Service) -> None:
    port = int(svc.url.rsplit(":", 1)[1])
    with socket.create_connection(("127.0.0.1", port)) as s:
        s.sendall(b"POST /v2/models/add_64x64/infer HTTP/1.1\r\nHost: x\r\n"
                  b"Content-Length: 1000\r\n\r\n{\"inputs\": [")  # fmt: skip
        assert _closed_by_peer(s, 30)  # the pause limit is 1 s; 30 s bounds a failing run
    with socket.create_connection(("127.0.0.1", port)) as s:  # a slow but steady body is fine
        body = b'{"inputs": []}'
        s.sendall(b"POST /v2/models/add_64x64/infer HTTP/1.1\r\nHost: x\r\n"
                  b"Content-Length: %d\r\n\r\n" % len(body))  # fmt: skip
        for byte in body:
            s.sendall(bytes([byte]))
            time.sleep(0.05)
        s.settimeout(30)
        assert s.recv(4096).startswith(b"HTTP/1.1 400")


def test_repeated_log_lines_of_one_client_are_rate_limited(svc: Service) -> None:
    before = svc.log_text().count("hello from flood")
    # Each connection goes on past its HELLO, so Python serves it and logs its line: one that
    # closes after the HELLO is never logged (docs/reliability.md, "Cheap churn").
    for _ in range(60):
        with IpcClient(svc.socket, name="flood") as c:
            c.model_metadata("add_64x64")
    time.sleep(0.5)
    hellos = svc.log_text().count("hello from flood") - before
    assert 1 <= hellos <= logs.RateLimit().burst, hellos


def test_rate_limit_counts_what_it_dropped_and_keys_by_peer() -> None:
    now = [0.0]
    limit = logs.RateLimit(burst=3, window_s=10, clock=lambda: now[0])

    def record() -> logging.LogRecord:
        return logging.LogRecord("fenceline.t", logging.WARNING, "", 0, "bad %s", ("x",), None)

    def passed(n: int) -> list[logging.LogRecord]:
        rs = [record() for _ in range(n)]
        return [r for r in rs if limit.filter(r)]

    token = logs.peer.set("uid 1")
    try:
        assert len(passed(10)) == 3
        other = logs.peer.set("uid 2")
        assert len(passed(10)) == 3  # another client has its own budget
        logs.peer.reset(other)
        now[0] = 10.0
        first = passed(1)
        assert len(first) == 1 and vars(first[0])["suppressed"] == 7
    finally:
        logs.peer.reset(token)


def _peak_rss_mb(pid: int) -> int:
    with open(f"/proc/{pid}/status") as f:
        return next(int(line.split()[1]) // 1024 for line in f if line.startswith("VmHWM:"))


@pytest.fixture(scope="module")
def small_json(model_repo: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Service]:
    with running(model_repo, tmp_path_factory.mktemp("json"), "--max-json-mb", "1") as s:
        yield s


def test_json_over_its_limit_is_refused_before_it_is_parsed(small_json: Service) -> None:
    peak = _peak_rss_mb(small_json.pid)
    data = "[" + ",".join(["0.25"] * (3 * 720 * 1280)) + "]"  # 14 MB of JSON numbers
    body = '{"inputs":[{"name":"x","datatype":"FP32","shape":[1,3,720,1280],"data":' + data + "}]}"
    for _ in range(3):
        r = httpx.post(small_json.url + "/v2/models/add_720p/infer", content=body, timeout=60)
        assert r.status_code == 413 and r.json()["code"] == "payload_too_large", r.text
        assert "--max-json-mb" in r.json()["error"]
    # Parsing 14 MB of numbers would take hundreds of MB (main: +275 MB); refusing takes none.
    assert _peak_rss_mb(small_json.pid) - peak < 64


def test_binary_tensor_data_is_not_held_to_the_json_limit(small_json: Service) -> None:
    x = np.full([1, 3, 720, 1280], 0.25, np.float32)
    header = json.dumps({"inputs": [{"name": "x", "datatype": "FP32", "shape": list(x.shape),
                                     "parameters": {"binary_data_size": x.nbytes}}],
                         "outputs": [{"name": "y", "parameters": {"binary_data": True}}]}).encode()  # fmt: skip
    r = httpx.post(small_json.url + "/v2/models/add_720p/infer", content=header + x.tobytes(),
                   headers={"Inference-Header-Content-Length": str(len(header))}, timeout=60)  # fmt: skip
    assert r.status_code == 200, r.text[:300]
    # A JSON header over the limit is refused from its declared length, before the body is read.
    r = httpx.post(small_json.url + "/v2/models/add_720p/infer", content=b"{}" + x.tobytes(),
                   headers={"Inference-Header-Content-Length": str(2 << 20)}, timeout=60)  # fmt: skip
    assert r.status_code == 413 and "--max-json-mb" in r.json()["error"], r.text


def test_bodies_of_json_only_routes_are_held_to_the_json_limit(small_json: Service) -> None:
    body = json.dumps({"handle_type": "host_shm", "name": "x" * (2 << 20)})
    r = httpx.post(small_json.url + "/v2/interop/memory", content=body, timeout=60,
                   headers={"content-type": "application/json"})  # fmt: skip
    assert r.status_code == 413 and r.json()["code"] == "payload_too_large", r.text


def test_large_json_outputs_are_written_in_full(small_json: Service) -> None:
    x = np.arange(3 * 64 * 64, dtype=np.float32).reshape(1, 3, 64, 64) / 7
    body = {"inputs": [{"name": "x", "datatype": "FP32", "shape": [1, 3, 64, 64],
                        "data": x.reshape(-1).tolist()}]}  # fmt: skip
    r = httpx.post(small_json.url + "/v2/models/add_64x64/infer", json=body, timeout=60)
    assert r.status_code == 200, r.text[:300]
    y = np.asarray(r.json()["outputs"][0]["data"], np.float32)
    assert y.size == x.size and np.isfinite(y).all()
