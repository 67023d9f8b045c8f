"""Model control as Triton has it, driven by the unmodified tritonclient against a real service
process: explicit load (with a config override), reload and unload, the repository index in
Triton's shapes, an unload refused while a renderer's session uses the model, a model's
metrics dropped at unload, the poll mode, and Triton's wording for a model that is not
there."""

from __future__ import annotations

import json
import shutil
import threading
from collections.abc import Iterator
from pathlib import Path
from types import SimpleNamespace
from typing import Any, cast

import httpx
import numpy as np
import pytest

from fenceline.client import Fence, IpcClient, Layout, SharedFrame
from fenceline.errors import NotFound
from fenceline.models import build_repository
from fenceline.runtime.model_control import ModelControl
from fenceline.runtime.models import ModelRepository
from fenceline.runtime.service import Runtime
from tests.support.metrics import metrics_text
from tests.support.service import Service, running
from tests.support.waiting import wait_until

tritonclient_http = pytest.importorskip("tritonclient.http")
from tritonclient.utils import InferenceServerException  # noqa: E402

BAD_CONFIG = 'name: "bad"\nmax_batch_size: 0\nfoo_bar: 3\n'


@pytest.fixture(scope="module")
def add_model(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = build_repository(tmp_path_factory.mktemp("builtin"), ["add_64x64"])
    return root / "add_64x64" / "1" / "model.onnx"


def model_dir(root: Path, name: str, model: Path, config: str | None = None) -> None:
    (root / name / "1").mkdir(parents=True)
    shutil.copyfile(model, root / name / "1" / "model.onnx")
    if config is not None:
        (root / name / "config.pbtxt").write_text(config)


@pytest.fixture
def explicit(tmp_path: Path, add_model: Path) -> Iterator[Service]:
    root = tmp_path / "repo"
    for name in ("a", "b"):
        model_dir(root, name, add_model)
    model_dir(root, "bad", add_model, BAD_CONFIG)
    (tmp_path / "svc").mkdir()
    with running(root, tmp_path / "svc", "--model-control-mode", "explicit",
                 "--load-model", "a") as svc:
        yield svc


def client(svc: Service) -> Any:
    return tritonclient_http.InferenceServerClient(svc.url.removeprefix("http://"))


def infer(c: Any, model: str) -> np.ndarray:
    x = np.full((1, 3, 64, 64), 2.0, np.float32)
    inp = tritonclient_http.InferInput("x", list(x.shape), "FP32")
    inp.set_data_from_numpy(x)
    out: np.ndarray = c.infer(model, [inp]).as_numpy("y")
    return out


def by_name(index: list[dict[str, str]]) -> dict[str, dict[str, str]]:
    return {e["name"]: e for e in index}


def test_explicit_mode_loads_only_what_it_is_told_and_indexes_the_rest(explicit: Service) -> None:
    c = client(explicit)
    index = by_name(c.get_model_repository_index())
    assert index["a"] == {"name": "a", "version": "1", "state": "READY"}
    assert index["b"] == {"name": "b"}  # never loaded: Triton lists its name alone
    assert index["bad"] == {"name": "bad"}
    assert c.is_model_ready("a") and not c.is_model_ready("b")
    # Never loaded: Triton has no state for it, and says so in its own words.
    with pytest.raises(InferenceServerException, match="Request for unknown model: 'b' is "
                       "not found") as e:
        c.get_model_metadata("b")
    assert e.value.status() == "404"
    ready = httpx.post(explicit.url + "/v2/repository/index", json={"ready": True}).json()
    assert ready == [{"name": "a", "version": "1", "state": "READY"}]


def test_load_serves_a_model_and_unload_stops_it(explicit: Service) -> None:
    c = client(explicit)
    c.load_model("b")
    assert c.is_model_ready("b")
    assert float(infer(c, "b")[0, 0, 0, 0]) == 3.0
    assert by_name(c.get_model_repository_index())["b"]["state"] == "READY"
    c.load_model("b")  # a reload of a loaded model is no error
    assert 'nv_inference_request_success{model="b",version="1"} 1' in metrics_text(explicit)
    c.unload_model("b")
    assert not c.is_model_ready("b")
    assert by_name(c.get_model_repository_index())["b"] == {
        "name": "b", "version": "1", "state": "UNAVAILABLE", "reason": "unloaded"}
    with pytest.raises(InferenceServerException, match="Request for unknown model: 'b' has no "
                       "available versions"):
        infer(c, "b")
    # Its Triton series went with it, as Triton drops a model's metrics at unload; its
    # statistics are Triton's 400 for a model that is not served.
    assert 'model="b"' not in metrics_text(explicit).split("# HELP nv_inference")[1]
    with pytest.raises(InferenceServerException, match="requested model 'b' is not available"
                       ) as e:
        c.get_inference_statistics("b")
    assert e.value.status() == "400"
    c.unload_model("b")  # unloading what is not loaded is no error
    c.load_model("b")  # loaded again: its series start again at 0
    text = metrics_text(explicit)
    assert 'nv_inference_request_success{model="b",version="1"} 0' in text
    assert c.get_inference_statistics("b")["model_stats"][0]["inference_stats"]["fail"] == {
        "count": 0, "ns": 0}


def test_a_model_whose_config_triton_would_refuse_does_not_load_and_the_index_says_why(
    explicit: Service,
) -> None:
    c = client(explicit)
    with pytest.raises(InferenceServerException) as e:
        c.load_model("bad")
    where = "bad/config.pbtxt:3: unknown field 'foo_bar': not a field of Triton's ModelConfig"
    assert where in str(e.value)
    reason = by_name(c.get_model_repository_index())["bad"]
    assert reason["state"] == "UNAVAILABLE" and where in reason["reason"]
    r = httpx.post(explicit.url + "/v2/repository/models/bad/load")
    assert r.status_code == 400 and r.json()["code"] == "invalid_argument"


def test_loading_or_unloading_a_name_the_repository_lacks_is_not_found(explicit: Service) -> None:
    c = client(explicit)
    with pytest.raises(InferenceServerException, match="failed to load 'nope'"):
        c.load_model("nope")
    # The index lists the repository's directories only: the failed load left no entry.
    assert sorted(by_name(c.get_model_repository_index())) == ["a", "b", "bad"]
    with pytest.raises(InferenceServerException, match="Request for unknown model: 'nope' is "
                       "not found"):
        c.get_model_metadata("nope")
    r = httpx.post(explicit.url + "/v2/repository/models/nope/unload")
    assert r.status_code == 404
    assert r.json()["error"] == "Request for unknown model: 'nope' is not found"
    r = httpx.post(explicit.url + "/v2/repository/models/b/load",
                   json={"parameters": {"file:1/model.onnx": "AAAA"}})
    assert r.status_code == 501 and "model files from its repository only" in r.json()["error"]


def test_a_config_override_loads_the_model_with_it_and_the_next_load_reads_the_directory(
    explicit: Service,
) -> None:
    """tritonclient's load_model(name, config=JSON) as Triton applies it: the JSON ModelConfig
    replaces the directory's config.pbtxt for that load (field names as in the file or in
    lowerCamelCase, 64-bit integers as strings, enum names in any case), and one that does
    not parse is refused in Triton's words (400: docs/triton.md, "What differs")."""
    c = client(explicit)
    # "bad" has a config.pbtxt Triton refuses: the override replaces it.
    c.load_model("bad", config=json.dumps({
        "name": "bad", "maxBatchSize": 0, "versionPolicy": {"latest": {"numVersions": 1}},
        "input": [{"name": "x", "dataType": "TYPE_FP32", "dims": ["1", "3", "64", "64"]}]}))
    assert c.is_model_ready("bad") and float(infer(c, "bad")[0, 0, 0, 0]) == 3.0
    # Without the override the directory's config is read again: refused, the loaded version
    # stays served (as a failed reload in Triton).
    with pytest.raises(InferenceServerException, match="bad/config.pbtxt:3: unknown field"):
        c.load_model("bad")
    assert c.is_model_ready("bad")
    for config, why in (("{not json", "not JSON"),
                        ('["name"]', "the config is a JSON object"),
                        ('{"name": "b", "foo_bar": 3}', "unknown field 'foo_bar'"),
                        ('{"input": [{"name": "x", "data_type": "TYPE_FLOAT32"}]}',
                         "'TYPE_FLOAT32', not one of Triton's")):
        with pytest.raises(InferenceServerException) as e:
            c.load_model("b", config=config)
        assert e.value.status() == "400", config
        assert e.value.message().startswith("failed to load 'b': Invalid config override: "), (
            e.value.message())
        assert why in e.value.message()
    assert not c.is_model_ready("b")
    # A config whose tensors the model does not have is refused when the model loads.
    with pytest.raises(InferenceServerException, match="config.pbtxt names input 'z'"):
        c.load_model("b", config=json.dumps({"input": [{"name": "z", "data_type": "type_fp32"}]}))
    r = httpx.post(explicit.url + "/v2/repository/models/b/load",
                   json={"parameters": {"config": {"name": "b"}}})
    assert r.status_code == 400 and "'config' parameter is the model config as a JSON string" \
        in r.json()["error"]


def test_unload_is_refused_while_a_session_uses_the_model(explicit: Service) -> None:
    c = client(explicit)
    with IpcClient(explicit.socket) as ipc:
        layout = Layout.of(ipc.model_metadata("a"))
        frame = SharedFrame(layout.size_bytes)
        ready, done = Fence(), Fence()
        inputs, outputs = layout.views(ipc.import_memory(frame))
        session = ipc.session("a", inputs, outputs, ipc.import_fence(ready), ipc.import_fence(done))
        with pytest.raises(InferenceServerException, match=r"model 'a' has 1 session\(s\)"):
            c.unload_model("a")
        r = httpx.post(explicit.url + "/v2/repository/models/a/unload")
        assert r.status_code == 400 and r.json()["code"] == "conflict"
        layout.array(frame, "x")[:] = 1.0
        ready.signal(1)
        assert session.run(1, timeout_s=10).signal_value == 1  # still served
        session.close()
        frame.close()
    c.unload_model("a")
    assert not c.is_model_ready("a")


def test_the_default_mode_refuses_load_and_unload(tmp_path: Path, add_model: Path) -> None:
    root = tmp_path / "repo"
    model_dir(root, "a", add_model)
    (tmp_path / "svc").mkdir()
    with running(root, tmp_path / "svc") as svc:
        c = client(svc)
        for call in (c.load_model, c.unload_model):
            with pytest.raises(InferenceServerException,
                               match="not allowed in model control mode 'none'"):
                call("a")
        assert c.is_model_ready("a")
        with pytest.raises(InferenceServerException,
                           match="Request for unknown model: 'simple' is not found"):
            infer(c, "simple")


def test_poll_mode_loads_new_models_and_unloads_removed_ones(tmp_path: Path, add_model: Path) -> None:
    root = tmp_path / "repo"
    model_dir(root, "a", add_model)
    (tmp_path / "svc").mkdir()
    with running(root, tmp_path / "svc", "--model-control-mode", "poll",
                 "--repository-poll-secs", "0.2") as svc:
        c = client(svc)

        def wait_for(name: str, ready: bool) -> None:
            wait_until(lambda: c.is_model_ready(name) == ready, 30, what=f"{name} ready={ready}")

        model_dir(root, "new", add_model)
        wait_for("new", True)
        assert float(infer(c, "new")[0, 0, 0, 0]) == 3.0
        shutil.rmtree(root / "a")
        wait_for("a", False)
        with pytest.raises(InferenceServerException, match="not allowed in model control mode 'poll'"):
            c.load_model("a")


def test_loads_of_one_model_share_the_waiting_load_and_a_flood_makes_two(
    tmp_path: Path, add_model: Path
) -> None:
    """80 requests to reload a model while it loads: one load under way, one more for all the
    requests that came meanwhile (they may have changed the files), never 80."""
    root = tmp_path / "repo"
    model_dir(root, "a", add_model)
    repo = ModelRepository(root, mode="explicit")
    control = ModelControl(cast(Runtime, SimpleNamespace(models=repo)))
    real_load = repo.load
    loads: list[str] = []
    release = threading.Event()

    def slow_load(name: str, *, skip_empty: bool = False, config: str | None = None) -> bool:
        loads.append(name)
        assert release.wait(60)
        return real_load(name, skip_empty=skip_empty, config=config)

    repo.load = slow_load  # type: ignore[method-assign]
    try:
        first = control.submit_load("a")
        wait_until(lambda: loads == ["a"], 30, what="the first load to start")
        flood = [control.submit_load("a") for _ in range(79)]
        assert all(f is flood[0] for f in flood) and flood[0] is not first
        release.set()
        first.result(60)
        flood[0].result(60)
        assert loads == ["a", "a"]
        assert repo.index() == [{"name": "a", "version": "1", "state": "READY"}]
        with pytest.raises(NotFound):
            control.submit_load("nope")
        assert loads == ["a", "a"]
    finally:
        release.set()
        control.close()
