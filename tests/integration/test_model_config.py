"""Triton's config.pbtxt in real model repositories: version_policy picks the version
directories that load, the tensors it names are checked against the model file, every field of
Triton's that fenceline does not honour is one warning naming it, at load, per model, and a
field that is not Triton's, or a value of the wrong kind, refuses the model with one line
naming the file, the line and the field."""

from __future__ import annotations

import logging
import shutil
import subprocess
import sys
from pathlib import Path

import httpx
import pytest

from fenceline.errors import FencelineError, InvalidArgument, NotFound
from fenceline.models import build_repository
from fenceline.runtime.model_config import parse
from fenceline.runtime.models import ModelRepository
from tests.support.service import start_service, stop_service

BASE = """
name: "m"
platform: "onnxruntime_onnx"
max_batch_size: 0
input [ { name: "x", data_type: TYPE_FP32, dims: [ 1, 3, 64, 64 ] } ]
output [ { name: "y", data_type: TYPE_FP32, dims: [ 1, 3, 64, 64 ] } ]
"""


@pytest.fixture(scope="module")
def add_model(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = build_repository(tmp_path_factory.mktemp("builtin"), ["add_64x64", "add_dynamic"])
    return root / "add_64x64" / "1" / "model.onnx"


def repository(tmp: Path, model: Path, versions: list[str], config: str | None) -> Path:
    """``tmp/repo/m/<version>/model.onnx`` for each version, and ``config`` as config.pbtxt."""
    root = tmp / "repo"
    for v in versions:
        (root / "m" / v).mkdir(parents=True)
        shutil.copyfile(model, root / "m" / v / "model.onnx")
    if config is not None:
        (root / "m" / "config.pbtxt").write_text(config)
    return root


def loaded(root: Path) -> ModelRepository:
    return ModelRepository.from_sources(root)


@pytest.mark.parametrize(
    "policy, versions",
    [
        ("", ["3"]),  # Triton's default: the newest one
        ("version_policy: { latest: { num_versions: 2 } }", ["2", "3"]),
        ("version_policy: { all { } }", ["1", "2", "3"]),
        ("version_policy: { specific: { versions: [ 1, 3 ] } }", ["1", "3"]),
    ],
    ids=["default", "latest-2", "all", "specific"],
)
def test_version_policy_loads_the_versions_triton_would(
    tmp_path: Path, add_model: Path, policy: str, versions: list[str]
) -> None:
    repo = loaded(repository(tmp_path, add_model, ["1", "2", "3"], BASE + policy))
    assert sorted(m.version for m in repo) == versions
    assert repo.get("m").version == versions[-1]
    assert repo.get("m").metadata()["versions"] == versions
    for v in ["1", "2", "3"]:
        if v in versions:
            assert repo.get("m", v).path == tmp_path / "repo" / "m" / v / "model.onnx"
        else:
            with pytest.raises(NotFound, match=f"Request for unknown model: 'm' version {v} is not found"):
                repo.get("m", v)


def test_specific_version_without_a_model_file_is_refused(tmp_path: Path, add_model: Path) -> None:
    root = repository(tmp_path, add_model, ["1", "2"], BASE + "version_policy: { specific { versions: [2, 7] } }")
    with pytest.raises(InvalidArgument, match=r"asks for version\(s\) \[7\].*versions present: \[1, 2\]"):
        loaded(root)


def test_unhonoured_fields_are_one_warning_naming_them(
    tmp_path: Path, add_model: Path, caplog: pytest.LogCaptureFixture
) -> None:
    config = BASE.replace('dims: [ 1, 3, 64, 64 ] } ]\noutput', 'dims: [ 1, 3, 64, 64 ], '
                          'reshape: { shape: [ 3, 64, 64 ] } } ]\noutput') + """
instance_group [ { kind: KIND_GPU, count: 2 } ]
dynamic_batching { max_queue_delay_microseconds: 100 }
parameters { key: "k" value: { string_value: "v" } }
"""
    root = repository(tmp_path, add_model, ["1"], config)
    with caplog.at_level(logging.WARNING, logger="fenceline.runtime"):
        repo = loaded(root)
    assert repo.get("m").version == "1"
    warnings = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert warnings == [
        "model m: config.pbtxt field(s) fenceline does not honour, ignored: input.reshape, "
        "dynamic_batching, instance_group, parameters"
    ]


def test_a_config_with_only_honoured_fields_warns_nothing(
    tmp_path: Path, add_model: Path, caplog: pytest.LogCaptureFixture
) -> None:
    root = repository(tmp_path, add_model, ["1", "2"], BASE + 'version_policy: { all {} }\n'
                      'default_model_filename: "model.onnx"')
    with caplog.at_level(logging.WARNING, logger="fenceline.runtime"):
        loaded(root)
    assert [r for r in caplog.records if r.levelno >= logging.WARNING] == []


@pytest.mark.parametrize(
    "change, message",
    [
        (('name: "m"', 'name: "other"'), "name is 'other' but the directory is 'm'"),
        (('"onnxruntime_onnx"', '"tensorrt_plan"'), "ONNX models with ONNX Runtime only"),
        (('name: "x", data_type: TYPE_FP32', 'name: "x", data_type: TYPE_INT8'),
         "input 'x' is TYPE_INT8; the model has FP32"),
        (('name: "y"', 'name: "z"'), "names output 'z', which the model lacks; its outputs are ['y']"),
        (("dims: [ 1, 3, 64, 64 ] } ]\noutput", "dims: [ 1, 3, 32, 32 ] } ]\noutput"),
         "gives input 'x' dims [1, 3, 32, 32]; the model has [1, 3, 64, 64]"),
        (("max_batch_size: 0", "max_batch_size: 0\nversion_policy: { newest {} }"),
         "field 'version_policy.newest' is not one of latest, all, specific"),
        (("input [", "input ["), None),
        (('platform: "onnxruntime_onnx"', "platform: onnxruntime_onnx {"), "protobuf text format"),
        (('max_batch_size: 0', 'max_batch_size: 0 }'), "expected a field name, not '}'"),
    ],
    ids=["name", "platform", "datatype", "output-name", "dims", "policy", "valid", "unclosed", "stray"],
)
def test_config_mistakes_are_clear_errors(
    tmp_path: Path, add_model: Path, change: tuple[str, str], message: str | None
) -> None:
    assert change[0] in BASE
    root = repository(tmp_path, add_model, ["1"], BASE.replace(*change))
    if message is None:
        loaded(root)
        return
    with pytest.raises(InvalidArgument) as e:
        loaded(root)
    assert message in str(e.value)
    assert isinstance(e.value, FencelineError) and e.value.code == "invalid_argument"


def test_batched_config_dims_leave_out_the_batch_dimension(tmp_path: Path, add_model: Path,
                                                           caplog: pytest.LogCaptureFixture) -> None:
    """add_dynamic is [1, 3, height, width]; with max_batch_size Triton's dims skip the first."""
    dynamic = add_model.parents[2] / "add_dynamic" / "1" / "model.onnx"
    config = ('max_batch_size: 4\ninput [ { name: "x", data_type: TYPE_FP32, dims: [ 3, -1, -1 ] } ]\n'
              'output [ { name: "y", data_type: TYPE_FP32, dims: [ 3, 720, 1280 ] } ]\n')
    with caplog.at_level(logging.WARNING, logger="fenceline.runtime"):
        loaded(repository(tmp_path, dynamic, ["1"], config))
    assert any("ignored: max_batch_size: 4" in r.getMessage() for r in caplog.records)


def test_text_format_reader_takes_triton_spellings() -> None:
    msg = parse("""
        # a comment
        name: 'q'  # after a value
        version_policy < latest { num_versions: 2 } >
        output: [ { name: "y" label_filename: "labels.txt" }, { name: "z" } ];
        optimization { cuda { graphs: true } }
        parameters: { key: "scale" value: { string_value: "0.5" } }
        model_warmup [ { batch_size: 1.5e0 } ]
    """)
    assert msg["name"] == ["q"]
    assert msg["version_policy"] == [{"latest": [{"num_versions": [2]}]}]
    assert [o["name"] for o in msg["output"]] == [["y"], ["z"]]
    assert msg["optimization"] == [{"cuda": [{"graphs": [True]}]}]
    assert msg["model_warmup"] == [{"batch_size": [1.5]}]


def test_service_serves_every_policy_version_and_warns_once(tmp_path: Path, add_model: Path) -> None:
    """A real service: the versions are KServe routes, the repository index lists each, the
    unhonoured field is one warning line in the service's log."""
    root = repository(tmp_path, add_model, ["1", "2", "3"],
                      BASE + "version_policy: { specific: { versions: [ 1, 3 ] } }\n"
                      "dynamic_batching { }\n")
    (tmp_path / "svc").mkdir()
    svc = start_service(root, tmp_path / "svc")
    try:
        meta = httpx.get(svc.url + "/v2/models/m").json()
        assert meta["versions"] == ["1", "3"]
        assert httpx.get(svc.url + "/v2/models/m/versions/3/ready").status_code == 200
        assert httpx.get(svc.url + "/v2/models/m/versions/2/ready").status_code == 404
        body = {"inputs": [{"name": "x", "datatype": "FP32", "shape": [1, 3, 64, 64],
                            "data": [1.0] * (3 * 64 * 64)}]}
        r = httpx.post(svc.url + "/v2/models/m/versions/1/infer", json=body, timeout=30)
        assert r.status_code == 200 and r.json()["model_version"] == "1", r.text
        index = httpx.post(svc.url + "/v2/repository/index").json()
        assert sorted(e["version"] for e in index if e["name"] == "m") == ["1", "3"]
        stats = httpx.get(svc.url + "/v2/models/stats").json()["model_stats"]
        assert [s["version"] for s in stats if s["name"] == "m"] == ["3"]
    finally:
        stop_service(svc)
    log = svc.log_text()
    warnings = [line for line in log.splitlines() if "does not honour" in line]
    assert len(warnings) == 1 and "dynamic_batching" in warnings[0], log


def serve_refuses(root: Path, tmp_path: Path) -> list[str]:
    """``fenceline serve`` of the repository ``root`` exits 2 without a traceback; its
    ``fenceline:`` lines on stderr."""
    r = subprocess.run([sys.executable, "-m", "fenceline", "serve", "--model-repository", str(root),
                        "--port", "0", "--socket", str(tmp_path / "fl.sock")],
                       capture_output=True, text=True, timeout=120, stdin=subprocess.DEVNULL)
    assert r.returncode == 2, r.stderr
    assert "Traceback" not in r.stderr
    return [line for line in r.stderr.splitlines() if line.startswith("fenceline:")]


def test_serve_with_a_bad_config_is_one_line_and_exit_2(tmp_path: Path, add_model: Path) -> None:
    root = repository(tmp_path, add_model, ["1"], BASE.replace("TYPE_FP32", "TYPE_FP16", 1))
    lines = serve_refuses(root, tmp_path)
    assert len(lines) == 1 and "input 'x' is TYPE_FP16; the model has FP32" in lines[0], lines


@pytest.mark.parametrize(
    "config, line, field",
    [
        (BASE + "foo_bar: 3\n", 7, "unknown field 'foo_bar': not a field of Triton's ModelConfig"),
        (BASE.replace("max_batch_size: 0", "max_batch: 8"), 4,
         "unknown field 'max_batch': not a field of Triton's ModelConfig"),
        (BASE.replace('name: "x",', 'name: "x", dimz: [ 1 ],'), 5,
         "unknown field 'input.dimz': not a field of Triton's ModelInput"),
        (BASE.replace("max_batch_size: 0", 'max_batch_size: "four"'), 4,
         "field 'max_batch_size' is an integer, not 'four'"),
        (BASE.replace('name: "m"', "name: 3"), 2, "field 'name' is a string, not 3"),
        (BASE.replace("data_type: TYPE_FP32, dims: [ 1", "data_type: TYPE_FLOAT32, dims: [ 1", 1),
         5, "field 'input.data_type' of 'x' is 'TYPE_FLOAT32', not one of Triton's"),
        (BASE.replace("dims: [ 1, 3, 64, 64 ] } ]\noutput", "dims: [ 1, 3, 6.5, 64 ] } ]\noutput"),
         5, "field 'input.dims' of 'x': dims are integers"),
    ],
    ids=["unknown", "typo", "tensor-field", "batch-kind", "name-kind", "datatype", "dims-kind"],
)
def test_a_field_triton_lacks_or_a_wrong_value_refuses_the_model_naming_file_line_and_field(
    tmp_path: Path, add_model: Path, config: str, line: int, field: str
) -> None:
    root = repository(tmp_path, add_model, ["1"], config)
    with pytest.raises(InvalidArgument) as e:
        loaded(root)
    assert str(e.value).startswith(f"{root / 'm' / 'config.pbtxt'}:{line}: {field}"), str(e.value)
    assert "\n" not in str(e.value)


def test_serve_with_an_unknown_config_field_is_one_line_naming_it_and_exit_2(
    tmp_path: Path, add_model: Path
) -> None:
    root = repository(tmp_path, add_model, ["1"], BASE + "foo_bar: 3\n")
    lines = serve_refuses(root, tmp_path)
    assert lines == [f"fenceline: {root / 'm' / 'config.pbtxt'}:7: unknown field 'foo_bar': not a "
                     "field of Triton's ModelConfig; fix or remove it (the model is not loaded)"]


def test_serve_with_a_missing_repository_is_one_line_and_exit_2(tmp_path: Path) -> None:
    missing = tmp_path / "no-such-repo"
    r = subprocess.run([sys.executable, "-m", "fenceline", "serve", "--model-repository",
                        str(missing), "--port", "0", "--socket", str(tmp_path / "fl.sock")],
                       capture_output=True, text=True, timeout=120, stdin=subprocess.DEVNULL)
    assert r.returncode == 2, r.stderr
    assert r.stderr.strip().splitlines() == [
        f"fenceline: --model-repository {missing} is not a directory; it holds "
        "<name>/<version>/model.onnx (`fenceline models write DIR` writes the builtin ones)"]
