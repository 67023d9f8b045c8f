"""KServe v2 core against a real ``fenceline serve``, driven by the unmodified tritonclient:
metadata, readiness, JSON and binary inference, and Triton-shaped errors."""

from __future__ import annotations

import json
from pathlib import Path

import httpx
import numpy as np
import onnxruntime as ort
import pytest
import tritonclient.http as httpclient
from prometheus_client.parser import text_string_to_metric_families
from tritonclient.utils import InferenceServerException

from fenceline.triton.cuda_shm import cuda_backend_works
from tests.support import metrics
from tests.support.service import Service

SHAPE = [1, 3, 64, 64]


@pytest.fixture(scope="module")
def client(service: Service) -> httpclient.InferenceServerClient:
    c = httpclient.InferenceServerClient(service.url.removeprefix("http://"))
    yield c
    c.close()


def reference(model_repo: Path, model: str, x: np.ndarray) -> np.ndarray:
    """What a direct onnxruntime run of the same model file answers."""
    session = ort.InferenceSession(str(model_repo / model / "1" / "model.onnx"))
    name = session.get_inputs()[0].name
    return session.run(None, {name: x})[0]


def frame(shape: list[int], dtype: type = np.float32, seed: int = 0) -> np.ndarray:
    return np.random.default_rng(seed).random(shape, dtype=np.float32).astype(dtype)


def infer_input(name: str, x: np.ndarray, datatype: str, binary: bool) -> httpclient.InferInput:
    i = httpclient.InferInput(name, list(x.shape), datatype)
    i.set_data_from_numpy(x, binary_data=binary)
    return i


def test_server_metadata_lists_the_extensions_this_machine_has(
    client: httpclient.InferenceServerClient,
) -> None:
    meta = client.get_server_metadata()
    assert meta["name"] == "fenceline"
    assert {"binary_tensor_data", "system_shared_memory"} <= set(meta["extensions"])
    # Listed exactly where the CUDA backend sees a device (tests/gpu/test_triton_cuda_shm.py).
    assert ("cuda_shared_memory" in meta["extensions"]) == cuda_backend_works()
    # Only what is served: no logging or trace extension (docs/triton.md, "What differs").
    assert set(meta["extensions"]) - {"cuda_shared_memory"} == {
        "binary_tensor_data", "model_configuration", "model_repository", "statistics",
        "system_shared_memory", "interop"}


def test_model_metadata_names_inputs_and_outputs(client: httpclient.InferenceServerClient) -> None:
    meta = client.get_model_metadata("add_64x64")
    assert meta["name"] == "add_64x64"
    assert meta["versions"] == ["1"]
    assert meta["inputs"] == [{"name": "x", "datatype": "FP32", "shape": SHAPE}]
    assert meta["outputs"] == [{"name": "y", "datatype": "FP32", "shape": SHAPE}]
    assert client.get_model_metadata("add_64x64", "1") == meta
    config = client.get_model_config("add_64x64")
    assert config["input"] == [{"name": "x", "data_type": "TYPE_FP32", "dims": SHAPE}]


def test_readiness_of_server_and_models(client: httpclient.InferenceServerClient) -> None:
    assert client.is_server_live()
    assert client.is_server_ready()
    assert client.is_model_ready("add_64x64")
    assert client.is_model_ready("add_64x64", "1")
    assert not client.is_model_ready("add_64x64", "7")
    assert not client.is_model_ready("no_such_model")
    index = client.get_model_repository_index()
    assert {"name": "add_64x64", "version": "1", "state": "READY"} in index


def test_metadata_of_unknown_model_is_404_with_error_key(
    client: httpclient.InferenceServerClient,
) -> None:
    with pytest.raises(InferenceServerException) as e:
        client.get_model_metadata("no_such_model")
    assert e.value.status() == "404"
    assert e.value.message() == "Request for unknown model: 'no_such_model' is not found"


@pytest.mark.parametrize("binary", [False, True], ids=["json", "binary"])
@pytest.mark.parametrize(
    ("model", "datatype", "dtype"),
    [("add_64x64", "FP32", np.float32), ("add_64x64_fp16", "FP16", np.float16)],
)
def test_infer_equals_a_direct_onnxruntime_run(
    client: httpclient.InferenceServerClient, model_repo: Path, model: str, datatype: str,
    dtype: type, binary: bool,
) -> None:
    x = frame(SHAPE, dtype)
    result = client.infer(
        model, [infer_input("x", x, datatype, binary)],
        outputs=[httpclient.InferRequestedOutput("y", binary_data=binary)],
    )
    params = result.get_output("y").get("parameters", {})
    assert ("binary_data_size" in params) == binary
    y = result.as_numpy("y")
    assert y.dtype == dtype
    np.testing.assert_array_equal(y.reshape(SHAPE), reference(model_repo, model, x))


def test_binary_infer_of_a_real_image_model_equals_onnxruntime(
    client: httpclient.InferenceServerClient, model_repo: Path,
) -> None:
    x = frame([1, 3, 720, 1280], seed=3)
    result = client.infer("image_filter", [infer_input("image", x, "FP32", True)])
    np.testing.assert_array_equal(
        result.as_numpy("display"), reference(model_repo, "image_filter", x)
    )


def test_outputs_are_binary_when_the_request_lists_none(
    client: httpclient.InferenceServerClient,
) -> None:
    x = frame(SHAPE)
    result = client.infer("add_64x64", [infer_input("x", x, "FP32", False)])
    assert result.get_output("y")["parameters"]["binary_data_size"] == x.nbytes
    np.testing.assert_array_equal(result.as_numpy("y"), x + 1)


def test_request_id_is_echoed(client: httpclient.InferenceServerClient) -> None:
    x = frame(SHAPE)
    result = client.infer("add_64x64", [infer_input("x", x, "FP32", True)], request_id="frame-42")
    assert result.get_response()["id"] == "frame-42"
    assert result.get_response()["model_name"] == "add_64x64"
    assert result.get_response()["model_version"] == "1"


def test_versioned_infer_route(client: httpclient.InferenceServerClient) -> None:
    x = frame(SHAPE)
    result = client.infer("add_64x64", [infer_input("x", x, "FP32", True)], model_version="1")
    np.testing.assert_array_equal(result.as_numpy("y"), x + 1)
    with pytest.raises(InferenceServerException) as e:
        client.infer("add_64x64", [infer_input("x", x, "FP32", True)], model_version="2")
    assert e.value.status() == "404"


@pytest.mark.parametrize("algorithm", ["gzip", "deflate"])
def test_compressed_requests_are_accepted(
    client: httpclient.InferenceServerClient, algorithm: str
) -> None:
    x = frame(SHAPE, seed=5)
    result = client.infer("add_64x64", [infer_input("x", x, "FP32", True)],
                          request_compression_algorithm=algorithm)
    np.testing.assert_array_equal(result.as_numpy("y"), x + 1)


@pytest.mark.parametrize(
    ("inputs", "fragment"),
    [
        (lambda: [infer_input("x", frame([1, 3, 32, 64]), "FP32", True)], "shape"),
        (lambda: [infer_input("x", frame(SHAPE).astype(np.float64), "FP64", True)], "FP64"),
        (lambda: [infer_input("z", frame(SHAPE), "FP32", True)], "unexpected inference input"),
        (lambda: [infer_input("x", frame(SHAPE), "FP32", True),
                  infer_input("x", frame(SHAPE), "FP32", True)], "given twice"),
    ],
    ids=["shape", "datatype", "unknown-input", "twice"],
)
def test_inputs_that_do_not_match_the_model_are_400(
    client: httpclient.InferenceServerClient, inputs: object, fragment: str
) -> None:
    with pytest.raises(InferenceServerException) as e:
        client.infer("add_64x64", inputs())  # type: ignore[operator]
    assert e.value.status() == "400"
    assert fragment in e.value.message()


def test_unknown_output_is_400(client: httpclient.InferenceServerClient) -> None:
    with pytest.raises(InferenceServerException) as e:
        client.infer("add_64x64", [infer_input("x", frame(SHAPE), "FP32", True)],
                     outputs=[httpclient.InferRequestedOutput("nope")])
    assert e.value.status() == "400"
    assert "unexpected inference output 'nope'" in e.value.message()


def test_output_requested_twice_is_400(client: httpclient.InferenceServerClient) -> None:
    with pytest.raises(InferenceServerException) as e:
        client.infer("add_64x64", [infer_input("x", frame(SHAPE), "FP32", True)],
                     outputs=[httpclient.InferRequestedOutput("y")] * 2)
    assert e.value.status() == "400"
    assert "output 'y' is requested twice" in e.value.message()


def test_infer_of_unknown_model_is_404(client: httpclient.InferenceServerClient) -> None:
    with pytest.raises(InferenceServerException) as e:
        client.infer("no_such_model", [infer_input("x", frame(SHAPE), "FP32", True)])
    assert e.value.status() == "404"


def _post(service: Service, body: bytes, headers: dict[str, str] | None = None) -> httpx.Response:
    return httpx.post(service.url + "/v2/models/add_64x64/infer", content=body,
                      headers=headers or {}, timeout=30)


def _binary_body(header: dict[str, object], data: bytes) -> tuple[bytes, dict[str, str]]:
    raw = json.dumps(header).encode()
    return raw + data, {"Inference-Header-Content-Length": str(len(raw))}


def test_success_is_exactly_200_and_json_outputs_are_flat(service: Service) -> None:
    x = frame(SHAPE)
    body = {"id": "j", "inputs": [{"name": "x", "datatype": "FP32", "shape": SHAPE,
                                   "data": x.reshape(-1).tolist()}]}
    r = _post(service, json.dumps(body).encode())
    assert r.status_code == 200
    assert r.headers["content-type"] == "application/json"
    out = r.json()["outputs"][0]
    assert out["shape"] == SHAPE
    np.testing.assert_array_equal(np.array(out["data"], np.float32).reshape(SHAPE), x + 1)


@pytest.mark.parametrize(
    ("make", "fragment"),
    [
        (lambda x: (b"{not json", {}), "parse the request JSON"),
        (lambda x: (b"[]", {}), "JSON object"),
        (lambda x: (json.dumps({"inputs": []}).encode(), {}), "inputs"),
        (lambda x: _binary_body({"inputs": [{"name": "x", "datatype": "FP32", "shape": SHAPE,
                                             "parameters": {"binary_data_size": 12}}]}, x),
         "unexpected total byte size 12"),
        (lambda x: _binary_body({"inputs": [{"name": "x", "datatype": "FP32", "shape": SHAPE,
                                             "parameters": {"binary_data_size": len(x)}}]},
                                x[:100]), "additional bytes"),
        (lambda x: _binary_body({"inputs": [{"name": "x", "datatype": "FP32", "shape": SHAPE,
                                             "parameters": {"binary_data_size": len(x)}}]},
                                x + b"extra"), "unexpected additional input data"),
        (lambda x: (json.dumps({"inputs": [{"name": "x", "datatype": "FP32", "shape": SHAPE,
                                            "data": [1.0, 2.0]}]}).encode(), {}),
         "holds 2 elements"),
        (lambda x: (json.dumps({"inputs": [{"name": "x", "datatype": "BYTES", "shape": SHAPE,
                                            "data": ["a"]}]}).encode(), {}), "BYTES"),
        (lambda x: (b"{}", {"Inference-Header-Content-Length": "99"}), "inference header size"),
        (lambda x: (b"{}", {"Inference-Header-Content-Length": "x"}), "Unable to parse"),
    ],
    ids=["not-json", "not-object", "no-inputs", "binary-size", "short-body", "extra-bytes",
         "json-count", "bytes-type", "header-too-long", "header-not-int"],
)
def test_malformed_requests_are_400_with_an_error_key(
    service: Service, make: object, fragment: str
) -> None:
    body, headers = make(frame(SHAPE).tobytes())  # type: ignore[operator]
    r = _post(service, body, headers)
    assert r.status_code == 400, r.text
    assert fragment in r.json()["error"]


def test_unknown_content_encoding_is_415(service: Service) -> None:
    r = _post(service, b"{}", {"Content-Encoding": "br"})
    assert r.status_code == 415
    assert "Content-Encoding" in r.json()["error"]


def test_routing_errors_have_an_error_key(service: Service) -> None:
    r = httpx.get(service.url + "/v2/models/add_64x64/infer", timeout=10)
    assert r.status_code == 405
    assert "error" in r.json()
    r = httpx.get(service.url + "/v2/nothing/here", timeout=10)
    assert r.status_code == 404
    assert "error" in r.json()


@pytest.mark.skipif(cuda_backend_works(), reason="this machine has a working CUDA backend")
def test_cuda_shared_memory_answers_501_without_a_cuda_backend(
    client: httpclient.InferenceServerClient,
) -> None:
    for call in (
        lambda: client.get_cuda_shared_memory_status(),
        lambda: client.register_cuda_shared_memory("g", b"\0" * 64, 0, 64),
        lambda: client.unregister_cuda_shared_memory("g"),
        lambda: client.unregister_cuda_shared_memory(),
    ):
        with pytest.raises(InferenceServerException) as e:
            call()
        assert e.value.status() == "501"
        assert "CUDA shared memory" in e.value.message()


def test_kserve_requests_are_counted_in_metrics(
    client: httpclient.InferenceServerClient, service: Service
) -> None:
    client.infer("add_64x64", [infer_input("x", frame(SHAPE), "FP32", True)])
    text = httpx.get(service.url + "/metrics", timeout=10).text
    assert 'fenceline_kserve_requests_total{model="add_64x64",path="binary"}' in text
    assert 'fenceline_session_runs_total{model="add_64x64",transport="kserve"}' in text


def test_triton_metrics_count_kserve_requests_as_triton_names_them(
    client: httpclient.InferenceServerClient, service: Service,
) -> None:
    """Triton's nv_inference_* families, in Triton's exposition (counters without _total,
    labelled model and version), beside fenceline's own."""
    def sample(text: str, name: str, **labels: str) -> float:
        """The sample as exposed, named exactly ``name`` (a parser would add ``_total``)."""
        return metrics.sample(text, name, model="add_64x64", version="1", **labels)

    before = httpx.get(service.url + "/metrics", timeout=5).text
    for _ in range(3):
        client.infer("add_64x64", [infer_input("x", frame(SHAPE), "FP32", True)])
    region = {"shared_memory_region": "never-registered", "shared_memory_byte_size": 4 * 64 * 64 * 3}
    wrong = httpx.post(service.url + "/v2/models/add_64x64/infer", timeout=30, json={
        "inputs": [{"name": "x", "datatype": "FP32", "shape": SHAPE, "parameters": region}]})
    assert wrong.status_code == 404
    after = httpx.get(service.url + "/metrics", timeout=5).text
    assert "# TYPE nv_inference_request_success counter" in after
    assert "\nnv_inference_request_success{model=\"add_64x64\",version=\"1\"} " in after
    for name in ("nv_inference_request_success", "nv_inference_count", "nv_inference_exec_count"):
        assert sample(after, name) - sample(before, name) == 3, name
    assert sample(after, "nv_inference_request_failure", reason="OTHER") - sample(
        before, "nv_inference_request_failure", reason="OTHER") == 1
    request_us = sample(after, "nv_inference_request_duration_us") - sample(
        before, "nv_inference_request_duration_us")
    parts = [sample(after, n) - sample(before, n) for n in (
        "nv_inference_queue_duration_us", "nv_inference_compute_input_duration_us",
        "nv_inference_compute_infer_duration_us", "nv_inference_compute_output_duration_us")]
    assert request_us > 0 and parts[0] == 0 and parts[2] > 0
    assert abs(sum(parts) - request_us) <= 1e-3 * request_us + 1
    assert sample(after, "nv_inference_pending_request_count") == 0
    # fenceline's own families are still there.
    assert "fenceline_kserve_requests_total{" in after
    types = {f.name: f.type for f in text_string_to_metric_families(after)}
    assert types["nv_inference_count"] == "counter"  # a valid exposition, as Prometheus reads it


def test_statistics_and_metrics_report_the_same_numbers_for_kserve_requests(
    client: httpclient.InferenceServerClient, service: Service,
) -> None:
    """Triton's statistics extension and its nv_inference_* metrics are one set of numbers:
    counts, the model run, the input binding and the output collection (compute_output in
    both), and the requests that failed once their model was found. A request refused for its
    shape or datatype is counted in neither, as Triton's core refuses it (its Normalize)
    before the request is counted."""
    def nv(text: str, name: str, **labels: str) -> float:
        return metrics.sample(text, name, model="add_64x64", version="1", **labels)

    def stats() -> dict[str, dict[str, int]]:
        row = client.get_inference_statistics("add_64x64")["model_stats"][0]
        return row["inference_stats"]  # type: ignore[no-any-return]

    text0, stats0 = httpx.get(service.url + "/metrics", timeout=10).text, stats()
    for _ in range(4):
        client.infer("add_64x64", [infer_input("x", frame(SHAPE), "FP32", True)])
    for wrong in ([infer_input("x", frame([1, 3, 32, 64]), "FP32", True)],
                  [infer_input("x", frame(SHAPE).astype(np.float64), "FP64", True)]):
        with pytest.raises(InferenceServerException) as e:
            client.infer("add_64x64", wrong)
        assert e.value.status() == "400"
    region = {"shared_memory_region": "never-registered", "shared_memory_byte_size": 4 * 64 * 64 * 3}
    assert httpx.post(service.url + "/v2/models/add_64x64/infer", timeout=30, json={
        "inputs": [{"name": "x", "datatype": "FP32", "shape": SHAPE, "parameters": region}],
    }).status_code == 404  # the model was found: a failure of that request
    text1, stats1 = httpx.get(service.url + "/metrics", timeout=10).text, stats()

    def grew(part: str, field: str = "ns") -> int:
        return stats1[part][field] - stats0[part][field]

    assert grew("success", "count") == nv(text1, "nv_inference_request_success") - nv(
        text0, "nv_inference_request_success") == 4
    assert grew("fail", "count") == 1
    failures = sum(nv(text1, "nv_inference_request_failure", reason=r) - nv(
        text0, "nv_inference_request_failure", reason=r) for r in ("REJECTED", "CANCELED",
                                                                   "BACKEND", "OTHER"))
    assert failures == 1
    for part, family in (("success", "request"), ("compute_input", "compute_input"),
                         ("compute_infer", "compute_infer"),
                         ("compute_output", "compute_output"), ("queue", "queue")):
        name = f"nv_inference_{family}_duration_us"
        us = nv(text1, name) - nv(text0, name)
        assert abs(grew(part) - us * 1000) <= 4_000, (part, grew(part), us)
    assert grew("compute_output") > 0 and grew("compute_infer") > 0


def test_root_redirects_to_the_status_page(service: Service) -> None:
    r = httpx.get(service.url + "/", timeout=5)
    assert r.status_code == 307 and r.headers["location"] == "/ui"
    page = httpx.get(service.url + "/", timeout=5, follow_redirects=True)
    assert page.status_code == 200 and '<a href="docs">API docs</a>' in page.text
