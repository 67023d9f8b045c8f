"""The seed row of ``fenceline bench --gpu --peers`` (bench/seed_ep.py): the probe runs the real
onnxruntime in a child process and says in one line why the plugin was not measured."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest

from fenceline.bench import seed_ep
from fenceline.models.builtin import build_repository

pytestmark = pytest.mark.skipif(
    importlib.util.find_spec("onnxruntime_ep_nv_tensorrt_rtx") is not None,
    reason="the NvTensorRtRtx plugin is installed here: tests/gpu judges its row",
)


def test_without_the_plugin_the_row_names_the_package_to_install(tmp_path: Path) -> None:
    repo = build_repository(tmp_path, ["add_64x64"])
    row, got = seed_ep.probe(repo / "add_64x64" / "1" / "model.onnx", [1, 3, 64, 64], 0.25)
    assert row == f"not measured: the plugin is not installed (pip install {seed_ep.PACKAGE})"
    assert got["step"] == "import" and "onnxruntime_ep_nv_tensorrt_rtx" in got["error"]

