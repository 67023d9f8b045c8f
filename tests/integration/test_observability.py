"""/metrics and Triton's statistics extension as the usual tools read them: the process
collector is there, no `_created` series, a browser's favicon is not an API error, and
tritonclient's get_inference_statistics reads real counts."""

from __future__ import annotations

import httpx
import numpy as np
import pytest

from tests.support.metrics import metric
from tests.support.service import Service

tritonclient_http = pytest.importorskip("tritonclient.http")


def test_metrics_have_the_process_collector_and_no_created_series(service: Service) -> None:
    text = httpx.get(service.url + "/metrics").text
    assert "process_resident_memory_bytes " in text and "process_open_fds " in text
    assert "_created" not in text


def test_unknown_routes_are_not_counted_as_api_errors(service: Service) -> None:
    def not_found_count() -> float:
        return metric(service, "fenceline_api_errors_total", 0.0, code="not_found", transport="kserve")

    before = not_found_count()
    assert httpx.get(service.url + "/favicon.ico").status_code == 404
    assert httpx.get(service.url + "/v2/no/such/route").status_code == 404
    assert not_found_count() == before
    assert httpx.get(service.url + "/v2/models/no_such_model").status_code in (400, 404)
    assert not_found_count() == before + 1  # a missing model still is one


def test_tritonclient_reads_inference_statistics(service: Service) -> None:
    host = service.url.removeprefix("http://")
    client = tritonclient_http.InferenceServerClient(host)
    try:
        assert "statistics" in client.get_server_metadata()["extensions"]
        before = client.get_inference_statistics("add_64x64")["model_stats"][0]
        x = np.ones((1, 3, 64, 64), np.float32)
        inp = tritonclient_http.InferInput("x", list(x.shape), "FP32")
        inp.set_data_from_numpy(x)
        for _ in range(3):
            client.infer("add_64x64", [inp])
        after = client.get_inference_statistics("add_64x64")["model_stats"][0]
        assert after["name"] == "add_64x64"
        assert after["inference_count"] == before["inference_count"] + 3
        success = after["inference_stats"]["success"]
        assert success["count"] == after["inference_count"]
        assert success["ns"] > before["inference_stats"]["success"]["ns"]
        assert after["last_inference"] > 0
        every = client.get_inference_statistics()["model_stats"]
        assert "add_64x64" in {m["name"] for m in every}
    finally:
        client.close()


def test_statistics_of_an_unknown_model_is_not_found(service: Service) -> None:
    r = httpx.get(service.url + "/v2/models/no_such_model/stats")
    assert r.status_code in (400, 404) and r.json()["code"] == "not_found"
