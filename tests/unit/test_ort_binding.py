"""runtime/ort_binding.py: the native runner reaches onnxruntime's private binding objects only
on an onnxruntime it was tested with, and otherwise calls the public run_with_iobinding, with one
clear warning; the model runs alike either way."""

from __future__ import annotations

import re
from pathlib import Path

import numpy as np
import onnxruntime
import pytest

from fenceline.models import build_repository
from fenceline.runtime import ort_binding
from fenceline.runtime.models import ModelRepository


@pytest.fixture(scope="module")
def session(tmp_path_factory: pytest.TempPathFactory) -> onnxruntime.InferenceSession:
    repo = build_repository(tmp_path_factory.mktemp("models"), ["add_64x64"])
    s = ModelRepository.from_sources(repo, {}).get("add_64x64").session
    assert s is not None
    return s


def test_this_onnxruntime_gives_the_native_runner_its_entry(
    session: onnxruntime.InferenceSession,
) -> None:
    run, binding = ort_binding.native_entry(session, session.io_binding())
    assert callable(run) and type(binding).__name__ == "SessionIOBinding"


def _runs(run: object, binding: object, x: np.ndarray, y: np.ndarray) -> None:
    x[:] = 2.5
    run(binding, None)  # type: ignore[operator]
    assert np.all(y == 3.5)


@pytest.mark.parametrize("version", ["1.16.3", "1.99.0", "2.0.0", "dev"])
def test_an_untested_onnxruntime_is_called_through_its_public_api(
    session: onnxruntime.InferenceSession, version: str, monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
) -> None:
    monkeypatch.setattr(onnxruntime, "__version__", version)
    monkeypatch.setattr(ort_binding, "_checked", None)
    x, y, binding = _bound(session)
    with caplog.at_level("WARNING", "fenceline.runtime"):
        run, given = ort_binding.native_entry(session, binding)
        ort_binding.native_entry(session, binding)
    assert given is binding and run == session.run_with_iobinding
    _runs(run, given, x, y)
    [record] = caplog.records  # once per process, not per session
    assert f"onnxruntime {version} is not one the native run path was tested with" in record.message
    assert "calls its public run_with_iobinding" in record.message


def _bound(session: onnxruntime.InferenceSession) -> tuple[np.ndarray, np.ndarray, object]:
    x = np.zeros((1, 3, 64, 64), np.float32)
    y = np.zeros_like(x)
    b = session.io_binding()
    b.bind_input("x", "cpu", 0, np.float32, list(x.shape), x.ctypes.data)
    b.bind_output("y", "cpu", 0, np.float32, list(y.shape), y.ctypes.data)
    return x, y, b


def test_the_private_entry_runs_the_model_as_the_public_one(
    session: onnxruntime.InferenceSession,
) -> None:
    x, y, binding = _bound(session)
    _runs(*ort_binding.native_entry(session, binding), x, y)


def test_a_binding_without_the_private_objects_is_not_given_them(
    session: onnxruntime.InferenceSession,
) -> None:
    class Plain:  # what a future binding might be: the public methods only
        pass

    why = ort_binding.unusable(Plain(), session.io_binding())
    assert why is not None and "lacks InferenceSession._sess.run_with_iobinding" in why


def test_only_the_shim_touches_the_private_attributes() -> None:
    root = Path(ort_binding.__file__).parents[1]
    private = re.compile(r"\._(sess|iobinding)\b")
    users = sorted(str(p.relative_to(root)) for p in root.rglob("*.py")
                   if private.search(p.read_text()))
    assert users == ["runtime/ort_binding.py"]
