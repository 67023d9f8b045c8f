"""The HTTP control and run API against a real service process."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from typing import Any

import httpx
import numpy as np
import pytest

from fenceline.client import Fence, SharedFrame
from tests.support.service import Service

SHAPE = [1, 3, 64, 64]
NBYTES = 3 * 64 * 64 * 4


@pytest.fixture
def http(service: Service) -> Iterator[httpx.Client]:
    with httpx.Client(base_url=service.url, timeout=30) as c:
        yield c


class Named:
    """Named frame + fences registered over HTTP, released at the end."""

    def __init__(self, http: httpx.Client, size: int = 2 * NBYTES) -> None:
        self.http = http
        self.frame = SharedFrame(size, named=True)
        self.wait, self.signal = Fence(named=True), Fence(named=True)
        self.memory = self.post("/v2/interop/memory", handle_type="host_shm", name=self.frame.name)["id"]
        self.wait_id = self.post("/v2/interop/fences", fence_type="host_timeline", name=self.wait.name)["id"]
        self.signal_id = self.post("/v2/interop/fences", fence_type="host_timeline", name=self.signal.name)["id"]

    def post(self, path: str, **body: Any) -> dict[str, Any]:
        r = self.http.post(path, json=body)
        assert r.status_code == 201, r.text
        return dict(r.json())

    def session_body(self, **over: Any) -> dict[str, Any]:
        body = {
            "model": "add_64x64",
            "inputs": {"x": {"memory": self.memory, "offset_bytes": 0, "datatype": "FP32", "shape": SHAPE}},
            "outputs": {"y": {"memory": self.memory, "offset_bytes": NBYTES, "datatype": "FP32", "shape": SHAPE}},
            "wait_fence": self.wait_id,
            "signal_fence": self.signal_id,
        }
        body.update(over)
        return body

    def close(self) -> None:
        self.frame.close()
        self.wait.close()
        self.signal.close()


@pytest.fixture
def named(http: httpx.Client) -> Iterator[Named]:
    n = Named(http)
    yield n
    n.close()


def assert_error(r: httpx.Response, status: int, code: str) -> dict[str, Any]:
    assert r.status_code == status, r.text
    body = r.json()
    # A timed-out run also says whether its frame is still queued (docs/ipc.md).
    extra = {"queued", "wait_value", "signal_value"} if code == "timed_out" else set()
    assert set(body) == {"error", "code"} | extra and body["code"] == code and body["error"]
    assert "Traceback" not in body["error"]
    return dict(body)


def test_health_and_model_metadata(http: httpx.Client) -> None:
    assert http.get("/v2/health/live").status_code == 200
    assert http.get("/v2/health/ready").status_code == 200
    meta = http.get("/v2/models/add_64x64").json()
    assert meta["name"] == "add_64x64"
    assert meta["inputs"] == [{"name": "x", "datatype": "FP32", "shape": SHAPE}]
    assert meta["outputs"] == [{"name": "y", "datatype": "FP32", "shape": SHAPE}]
    assert_error(http.get("/v2/models/nope"), 404, "not_found")


def test_capabilities_report_every_handle_kind(http: httpx.Client) -> None:
    caps = http.get("/v2/interop/capabilities").json()
    assert set(caps["memory"]) == {"host_shm", "host_fd", "opaque_fd", "cuda_ipc", "d3d12_resource", "d3d12_heap"}
    assert set(caps["fences"]) == {"host_timeline", "vk_timeline_opaque_fd", "d3d12_fence"}
    assert caps["memory"]["host_shm"] is caps["memory"]["host_fd"] is caps["fences"]["host_timeline"] is True
    assert caps["memory"]["d3d12_resource"] is False and caps["fences"]["d3d12_fence"] is False
    assert any(d["kind"] == "cpu" for d in caps["devices"])


def test_run_computes_in_place_and_sees_later_renderer_writes(http: httpx.Client, named: Named) -> None:
    s = named.post("/v2/interop/sessions", **named.session_body())
    assert s["output_devices"] == {"y": "cpu"}
    x = named.frame.array(np.float32, SHAPE)
    y = named.frame.array(np.float32, SHAPE, NBYTES)
    for v, fill in ((1, 2.5), (2, -1.0)):
        x[:] = fill  # the renderer changes its buffer; nothing is re-registered
        named.wait.signal(v)
        r = http.post(f"/v2/interop/sessions/{s['id']}/run", json={"wait_value": v})
        assert r.status_code == 200, r.text
        assert r.json()["signal_value"] == v
        assert set(r.json()["timings_us"]) == {"wait", "infer", "total"}
        assert np.all(y == fill + 1)
        assert named.signal.value == v
    assert http.delete(f"/v2/interop/sessions/{s['id']}").status_code == 204


def test_run_waits_for_input_fence_signalled_later(http: httpx.Client, named: Named) -> None:
    s = named.post("/v2/interop/sessions", **named.session_body())
    x = named.frame.array(np.float32, SHAPE)
    y = named.frame.array(np.float32, SHAPE, NBYTES)
    result: list[httpx.Response] = []
    t = threading.Thread(
        target=lambda: result.append(
            http.post(f"/v2/interop/sessions/{s['id']}/run", json={"wait_value": 3, "timeout_ms": 20000})
        )
    )
    t.start()
    time.sleep(0.3)
    assert t.is_alive() and named.signal.value == 0  # still waiting: nothing ran
    x[:] = 41
    named.wait.signal(3)
    t.join(20)
    assert result[0].status_code == 200 and result[0].json()["signal_value"] == 3
    assert np.all(y == 42)


def test_wait_timeout_runs_and_signals_nothing(http: httpx.Client, named: Named) -> None:
    s = named.post("/v2/interop/sessions", **named.session_body())
    x = named.frame.array(np.float32, SHAPE)
    y = named.frame.array(np.float32, SHAPE, NBYTES)
    y[:] = 7
    run = f"/v2/interop/sessions/{s['id']}/run"
    r = http.post(run, json={"wait_value": 1, "signal_value": 2, "timeout_ms": 50})
    assert_error(r, 504, "timed_out")
    assert r.json()["queued"] is False
    assert (r.json()["wait_value"], r.json()["signal_value"]) == (1, 2)
    assert named.signal.value == 0 and np.all(y == 7)
    # Nothing is left of it: the same run, sent again once the input is ready, runs.
    x[:] = 3
    named.wait.signal(1)
    r = http.post(run, json={"wait_value": 1, "signal_value": 2, "timeout_ms": 5000})
    assert r.status_code == 200 and r.json()["signal_value"] == 2
    assert named.signal.value == 2 and np.all(y == 4)


def test_signal_value_not_above_current_is_a_conflict(http: httpx.Client, named: Named) -> None:
    s = named.post("/v2/interop/sessions", **named.session_body())
    named.wait.signal(5)
    assert http.post(f"/v2/interop/sessions/{s['id']}/run", json={"wait_value": 5}).status_code == 200
    for body in ({"wait_value": 5}, {"wait_value": 5, "signal_value": 4}):
        assert_error(http.post(f"/v2/interop/sessions/{s['id']}/run", json=body), 409, "conflict")
    r = http.post(f"/v2/interop/sessions/{s['id']}/run", json={"wait_value": 5, "signal_value": 9})
    assert r.status_code == 200 and r.json()["signal_value"] == 9 and named.signal.value == 9


@pytest.mark.parametrize(
    ("view", "match"),
    [
        ({"offset_bytes": NBYTES + 4}, "outside"),  # past the end
        ({"offset_bytes": 2**64 - 4}, "outside"),  # offset + size overflows
        ({"offset_bytes": 2}, "align"),  # misaligned for FP32
        ({"datatype": "FP16"}, "FP32 in the model"),
        ({"datatype": "FLOAT"}, "unknown datatype"),
        ({"shape": [1, 3, 64, 32]}, "shape"),
        ({"shape": [1, 3, 64, 2**62]}, "overflows"),
        ({"shape": [1, 3, 64, 2**40]}, "outside"),
        ({"shape": [1, 3, 64, -1]}, "negative"),
    ],
)
def test_bad_views_are_rejected(http: httpx.Client, named: Named, view: dict[str, Any], match: str) -> None:
    body = named.session_body()
    body["outputs"]["y"].update(view)
    err = assert_error(http.post("/v2/interop/sessions", json=body), 400, "invalid_argument")
    assert match in err["error"]


def test_every_model_tensor_must_be_bound(http: httpx.Client, named: Named) -> None:
    err = assert_error(http.post("/v2/interop/sessions", json=named.session_body(outputs={})), 400, "invalid_argument")
    assert "missing 'y'" in err["error"]
    body = named.session_body()
    body["inputs"]["z"] = body["inputs"]["x"]
    assert "no input named 'z'" in assert_error(http.post("/v2/interop/sessions", json=body), 400, "invalid_argument")["error"]


def test_memory_import_checks_the_object(http: httpx.Client, named: Named) -> None:
    name = named.frame.name
    cases = [
        ({"handle_type": "host_shm", "name": "/fenceline-missing"}, 404, "not_found"),
        ({"handle_type": "host_shm", "name": "/../etc/passwd"}, 400, "invalid_argument"),
        ({"handle_type": "host_shm", "name": name, "size_bytes": 2 * NBYTES + 1}, 400, "invalid_argument"),
        ({"handle_type": "host_shm", "name": name, "offset_bytes": 2 * NBYTES}, 400, "invalid_argument"),
        ({"handle_type": "host_shm", "name": name, "offset_bytes": 2**64 - 1, "size_bytes": 2}, 400, "invalid_argument"),
        ({"handle_type": "host_fd"}, 400, "invalid_argument"),
        ({"handle_type": "d3d12_resource", "name": name}, 501, "unsupported"),
        ({"handle_type": "bogus", "name": name}, 400, "invalid_argument"),
        ({"handle_type": "host_shm", "name": name, "access": "write_only"}, 422, "invalid_request"),
        ({"handle_type": "host_shm", "name": name, "offset_bytes": -1}, 422, "invalid_request"),
    ]
    for body, status, code in cases:
        assert_error(http.post("/v2/interop/memory", json=body), status, code)


def test_read_only_memory_cannot_hold_outputs(http: httpx.Client, named: Named) -> None:
    ro = named.post("/v2/interop/memory", handle_type="host_shm", name=named.frame.name, access="read_only")["id"]
    body = named.session_body()
    body["outputs"]["y"]["memory"] = ro
    assert "read_write" in assert_error(http.post("/v2/interop/sessions", json=body), 400, "invalid_argument")["error"]
    assert http.delete(f"/v2/interop/memory/{ro}").status_code == 204


def test_fence_import_checks_the_page(http: httpx.Client, named: Named) -> None:
    assert_error(http.post("/v2/interop/fences", json={"fence_type": "host_timeline", "name": named.frame.name}), 400, "invalid_argument")
    assert_error(http.post("/v2/interop/fences", json={"fence_type": "host_timeline"}), 400, "invalid_argument")
    assert_error(http.post("/v2/interop/fences", json={"fence_type": "d3d12_fence", "name": "/x"}), 501, "unsupported")
    f = http.get(f"/v2/interop/fences/{named.wait_id}").json()
    assert f["value"] == 0 and f["fence_type"] == "host_timeline"
    named.wait.signal(12)
    assert http.get(f"/v2/interop/fences/{named.wait_id}").json()["value"] == 12


def test_unknown_ids_are_not_found(http: httpx.Client) -> None:
    for path in ("/v2/interop/memory/abc", "/v2/interop/fences/abc", "/v2/interop/sessions/abc"):
        assert_error(http.get(path), 404, "not_found")
        assert_error(http.delete(path), 404, "not_found")
    assert_error(http.post("/v2/interop/sessions/abc/run", json={"wait_value": 1}), 404, "not_found")
    assert_error(http.get("/v2/nothing/here"), 404, "not_found")


def test_objects_in_use_cannot_be_deleted(http: httpx.Client, named: Named) -> None:
    s = named.post("/v2/interop/sessions", **named.session_body())
    assert_error(http.delete(f"/v2/interop/memory/{named.memory}"), 409, "conflict")
    assert_error(http.delete(f"/v2/interop/fences/{named.wait_id}"), 409, "conflict")
    assert http.get(f"/v2/interop/memory/{named.memory}").json()["sessions"] == 1
    assert http.delete(f"/v2/interop/sessions/{s['id']}").status_code == 204
    for path in (f"/v2/interop/memory/{named.memory}", f"/v2/interop/fences/{named.wait_id}", f"/v2/interop/fences/{named.signal_id}"):
        assert http.delete(path).status_code == 204


def test_malformed_requests_get_json_errors(http: httpx.Client, named: Named) -> None:
    assert_error(http.post("/v2/interop/sessions", content=b"{nope", headers={"content-type": "application/json"}), 422, "invalid_request")
    assert_error(http.post("/v2/interop/sessions", json={"model": "add_64x64"}), 422, "invalid_request")
    assert_error(http.post("/v2/interop/sessions", json=named.session_body(model="nope")), 404, "not_found")
    s = named.post("/v2/interop/sessions", **named.session_body())
    for body in ({"wait_value": -1}, {"wait_value": 2**64}, {"wait_value": 1, "timeout_ms": -5}, {"wait_value": 1, "extra": 1}):
        assert_error(http.post(f"/v2/interop/sessions/{s['id']}/run", json=body), 422, "invalid_request")
    assert_error(http.post(f"/v2/interop/sessions/{s['id']}/run", json={"wait_value": 1, "timeout_ms": 10**9}), 400, "invalid_argument")


def test_metrics_count_runs_and_errors(http: httpx.Client, named: Named) -> None:
    s = named.post("/v2/interop/sessions", **named.session_body())
    named.wait.signal(1)
    http.post(f"/v2/interop/sessions/{s['id']}/run", json={"wait_value": 1})
    http.get("/v2/interop/memory/none")
    text = http.get("/metrics").text
    assert 'fenceline_session_runs_total{model="add_64x64",transport="http"}' in text
    assert "fenceline_session_run_duration_seconds_bucket" in text
    assert 'fenceline_api_errors_total{code="not_found",transport="http"}' in text
    assert 'fenceline_interop_imported_bytes{kind="host_shm"}' in text


def test_runs_on_one_session_are_serialized(http: httpx.Client, named: Named, service: Service) -> None:
    s = named.post("/v2/interop/sessions", **named.session_body())
    run = f"/v2/interop/sessions/{s['id']}/run"
    named.wait.signal(1)
    results: dict[str, httpx.Response] = {}

    def go(key: str, body: dict[str, Any]) -> None:
        with httpx.Client(base_url=service.url, timeout=30) as c:
            results[key] = c.post(run, json=body)

    a = threading.Thread(target=go, args=("a", {"wait_value": 3, "timeout_ms": 20000}))
    a.start()
    time.sleep(0.3)  # a holds the session, waiting for 3
    b = threading.Thread(target=go, args=("b", {"wait_value": 1, "timeout_ms": 20000}))
    b.start()
    time.sleep(0.3)
    assert "b" not in results and named.signal.value == 0  # b's input is ready, yet it waits for a
    named.wait.signal(3)
    a.join(20)
    b.join(20)
    assert results["a"].status_code == 200 and results["a"].json()["signal_value"] == 3
    assert results["b"].status_code == 409  # ran after a: 1 is no longer above the output fence
