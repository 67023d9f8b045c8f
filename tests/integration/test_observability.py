"""/metrics and Triton's statistics extension as the usual tools read them: the process
collector is there, no `_created` series, a browser's favicon is not an API error, and
tritonclient's get_inference_statistics reads real counts."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import httpx
import numpy as np
import pytest

from tests.support.metrics import metric
from tests.support.service import Service

tritonclient_http = pytest.importorskip("tritonclient.http")

# Prometheus's own linter: on PATH, or where .ci/run puts it (beside the venv's python).
PROMTOOL = shutil.which("promtool") or shutil.which("promtool", path=str(Path(sys.executable).parent))


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


def test_statistics_of_a_model_that_is_not_served_are_triton_s_400(service: Service) -> None:
    """Triton answers statistics of a model without a ready version with INVALID_ARG (400),
    where its other routes answer an unknown model with NOT_FOUND (404)."""
    r = httpx.get(service.url + "/v2/models/no_such_model/stats")
    assert r.status_code == 400 and r.json()["code"] == "invalid_argument"
    assert r.json()["error"] == "requested model 'no_such_model' is not available"
    r = httpx.get(service.url + "/v2/models/add_64x64/versions/7/stats")
    assert r.status_code == 400
    assert r.json()["error"] == "requested model version is not available for model 'add_64x64'"


@pytest.mark.skipif(PROMTOOL is None, reason="promtool is not installed (Debian's prometheus "
                    "package has it; .ci/run takes it from there)")
def test_promtool_finds_nothing_in_fenceline_s_own_families(service: Service) -> None:
    """`promtool check metrics` on a real scrape: fenceline's families are clean; what it
    says is only of Triton's own nv_* names, which fenceline keeps as Triton spells them
    (docs/triton.md, "Metrics"), each explained there."""
    assert PROMTOOL is not None
    text = httpx.get(service.url + "/metrics").text
    assert "fenceline_session_runs_total" in text and "nv_inference_count{" in text
    done = subprocess.run([PROMTOOL, "check", "metrics"], input=text, capture_output=True,
                          text=True, timeout=120, check=False)
    findings = [line for line in (done.stdout + done.stderr).splitlines() if line.strip()]
    assert [f for f in findings if not f.startswith("nv_")] == [], findings
    # Exit 3 is "lint findings only"; 1 would be a scrape it cannot parse.
    assert done.returncode == (3 if findings else 0), (done.returncode, findings)
    explained = {
        'counter metrics should have "_total" suffix',
        'non-histogram and non-summary metrics should not have "_count" suffix',
        "metric names should not contain abbreviated units",
    }
    for f in findings:
        assert f.split(" ", 1)[1] in explained, f
