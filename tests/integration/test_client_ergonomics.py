"""The Python client as a newcomer uses it: numpy dtypes where datatype names go, session
objects, a layout computed from the model's metadata, one error tree, seconds for timeouts."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from fenceline.client import (
    ClientError,
    Fence,
    HttpClient,
    IpcClient,
    Layout,
    ServiceError,
    Session,
    SharedFrame,
    UsageError,
    View,
)
from fenceline.models import build_repository
from tests.support.service import Service, start_service, stop_service


def test_view_takes_numpy_types_and_reads_back_the_name() -> None:
    assert View("m", np.float32, [1, 3]).datatype == "FP32"
    assert View("m", np.dtype("float16"), (2,)).datatype == "FP16"
    assert View("m", "UINT8", [4]).datatype == "UINT8"
    with pytest.raises(UsageError, match="not one of"):
        View("m", np.complex64, [1])
    with pytest.raises(ClientError):
        View("m", "FLOAT", [1])


def test_model_metadata_is_the_same_over_both_clients(service: Service) -> None:
    with IpcClient(service.socket) as ipc, HttpClient(service.url) as http:
        a, b = ipc.model_metadata("add_64x64"), http.model_metadata("add_64x64")
    assert a == b
    assert a["inputs"] == [{"name": "x", "datatype": "FP32", "shape": [1, 3, 64, 64]}]
    with IpcClient(service.socket) as ipc, pytest.raises(ServiceError) as err:
        ipc.model_metadata("no_such_model")
    assert err.value.code == "not_found"


def test_layout_and_session_object_run_without_byte_offsets(service: Service) -> None:
    with IpcClient(service.socket) as client:
        layout = Layout.of(client.model_metadata("image_filter"))
        assert layout.outputs["display"].offset_bytes % 64 == 0
        assert layout.outputs["display"].offset_bytes >= layout.inputs["image"].size_bytes
        with SharedFrame(layout.size_bytes) as frame, Fence() as ready, Fence() as done:
            inputs, outputs = layout.views(client.import_memory(frame))
            session = client.session("image_filter", inputs, outputs,
                                     client.import_fence(ready), client.import_fence(done))
            assert isinstance(session, Session) and session["id"] == session.id
            image = layout.array(frame, "image")
            image[:] = 0.25
            ready.signal(1)
            reply = session.run(1, timeout_s=5.0)
            assert reply.signal_value == 1 and done.value == 1
            display = layout.array(frame, "display")
            assert display.shape == (1, 3, 720, 1280)
            assert float(display[0, 0, 360, 640]) == pytest.approx(0.25 * 2 / (1 + 0.25 * 2))
            session.close()
            session.close()  # safe twice
            with pytest.raises(UsageError, match="closed"):
                session.run(2)


def test_layout_needs_the_free_dimensions() -> None:
    meta = {"inputs": [{"name": "x", "datatype": "FP32", "shape": [1, 3, -1, -1]}],
            "outputs": [{"name": "y", "datatype": "FP32", "shape": [1, 3, -1, -1]}]}
    with pytest.raises(UsageError, match="free dimensions"):
        Layout.of(meta)
    layout = Layout.of(meta, {"x": [1, 3, 4, 4], "y": [1, 3, 4, 4]})
    assert layout.size_bytes == 2 * 192 and layout.outputs["y"].offset_bytes == 192


def test_timeouts_are_seconds_and_run_out_with_a_service_error(service: Service) -> None:
    with IpcClient(service.socket) as client, SharedFrame(2 * 3 * 64 * 64 * 4) as frame, \
            Fence() as ready, Fence() as done:
        layout = Layout.of(client.model_metadata("add_64x64"))
        inputs, outputs = layout.views(client.import_memory(frame))
        with client.session("add_64x64", inputs, outputs, client.import_fence(ready),
                            client.import_fence(done)) as session:
            with pytest.raises(ServiceError) as err:
                session.run(1, timeout_s=0.05)  # nobody signals 1
            assert err.value.code == "timed_out"
            with pytest.raises(UsageError, match="not both"):
                client.run(session.id, 1, timeout_ms=10, timeout_s=0.01)


def test_use_after_close_is_a_usage_error(service: Service) -> None:
    client = IpcClient(service.socket)
    client.close()
    client.close()
    with pytest.raises(UsageError):
        client.model_metadata("add_64x64")
    http = HttpClient(service.url)
    http.close()
    with pytest.raises(UsageError):
        http.model_metadata("add_64x64")


def test_http_client_finds_the_service_and_its_token_from_the_serve_environment(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The variables that configured ``fenceline serve`` (a wildcard host, a port, a token
    file) point ``HttpClient()`` at it, as FENCELINE_SOCKET does for ``IpcClient()``."""
    token = tmp_path / "token"
    token.write_text("s3cret\n")
    svc = start_service(build_repository(tmp_path / "models", ["add_64x64"]), tmp_path,
                        "--token-file", str(token))
    try:
        port = svc.url.rsplit(":", 1)[1]
        monkeypatch.delenv("FENCELINE_URL", raising=False)
        monkeypatch.setenv("FENCELINE_HOST", "0.0.0.0")
        monkeypatch.setenv("FENCELINE_PORT", port)
        monkeypatch.setenv("FENCELINE_TOKEN_FILE", str(token))
        with HttpClient() as client:
            assert client.url == f"http://127.0.0.1:{port}"
            assert "memory" in client.capabilities()
        monkeypatch.delenv("FENCELINE_TOKEN_FILE")
        with HttpClient() as client, pytest.raises(ServiceError) as err:
            client.capabilities()
        assert err.value.status == 401
        with HttpClient(token="s3cret") as client:
            assert "memory" in client.capabilities()
        monkeypatch.setenv("FENCELINE_URL", svc.url)
        monkeypatch.setenv("FENCELINE_PORT", "1")  # FENCELINE_URL wins
        with HttpClient(token="s3cret") as client:
            assert client.url == svc.url and "memory" in client.capabilities()
        monkeypatch.setenv("FENCELINE_TOKEN_FILE", str(tmp_path / "missing"))
        with pytest.raises(UsageError, match="FENCELINE_TOKEN_FILE="):
            HttpClient()
    finally:
        stop_service(svc)
