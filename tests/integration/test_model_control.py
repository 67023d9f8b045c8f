"""Model control as Triton has it, driven by the unmodified tritonclient against a real service
process: explicit load, reload and unload, the repository index with each model's state and
reason, an unload refused while a renderer's session uses the model, the poll mode, and
Triton's wording for a model that is not there."""

from __future__ import annotations

import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import numpy as np
import pytest

from fenceline.client import Fence, IpcClient, Layout, SharedFrame
from fenceline.models import build_repository
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
    assert index["b"] == {"name": "b", "state": "UNAVAILABLE", "reason": "not loaded"}
    assert index["bad"]["state"] == "UNAVAILABLE"
    assert c.is_model_ready("a") and not c.is_model_ready("b")
    ready = httpx.post(explicit.url + "/v2/repository/index", json={"ready": True}).json()
    assert ready == [{"name": "a", "version": "1", "state": "READY"}]


def test_load_serves_a_model_and_unload_stops_it(explicit: Service) -> None:
    c = client(explicit)
    c.load_model("b")
    assert c.is_model_ready("b")
    assert float(infer(c, "b")[0, 0, 0, 0]) == 3.0
    assert by_name(c.get_model_repository_index())["b"]["state"] == "READY"
    c.load_model("b")  # a reload of a loaded model is no error
    c.unload_model("b")
    assert not c.is_model_ready("b")
    assert by_name(c.get_model_repository_index())["b"] == {
        "name": "b", "state": "UNAVAILABLE", "reason": "unloaded"}
    with pytest.raises(InferenceServerException, match="Request for unknown model: 'b' has no "
                       "available versions"):
        infer(c, "b")
    c.unload_model("b")  # unloading what is not loaded is no error


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
    r = httpx.post(explicit.url + "/v2/repository/models/nope/unload")
    assert r.status_code == 404
    assert r.json()["error"] == "Request for unknown model: 'nope' is not found"
    r = httpx.post(explicit.url + "/v2/repository/models/b/load",
                   json={"parameters": {"config": "{}"}})
    assert r.status_code == 501 and "loads a model from its repository only" in r.json()["error"]


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
