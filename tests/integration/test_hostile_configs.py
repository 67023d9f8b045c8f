"""Hostile config.pbtxt files and model names against real services: 2,000-deep nesting, a
5,000-digit integer, a bad escape, bytes that are not UTF-8, a 5 MB file and a 300-byte name
are each one ``invalid_argument`` line naming the file and the line: ``fenceline serve`` exits 2
with that line, an explicit-mode load answers 400 with it and the repository index gives it as
the model's reason; no traceback in the log. Names are UTF-8 or refused."""

from __future__ import annotations

import shutil
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from fenceline.errors import InvalidArgument
from fenceline.models import build_repository
from fenceline.runtime import pbtxt
from fenceline.runtime.model_config import parse
from fenceline.runtime.models import ModelRepository
from tests.integration.test_model_config import BASE, serve_refuses
from tests.support.service import Service, running

LONG_NAME = "n" * 300

# name -> (config.pbtxt bytes, its line that is wrong, what the error says)
HOSTILE: dict[str, tuple[bytes, int, str]] = {
    "deep": (b'name: "m"\n' + b"optimization {\n" * 2000 + b"}\n" * 2000, 33,
             "messages nest more than 32 deep"),
    "huge-number": (b'name: "m"\n\nmax_batch_size: ' + b"9" * 5000 + b"\n", 3,
                    "a number of 5000 characters; at most 32"),
    "out-of-range": (b'name: "m"\nmax_batch_size: 99999999999999999999999\n', 2,
                     "does not fit in 64 bits"),
    "bad-escape": (b'name: "m"\nplatform: "onnx\\x"\n', 2, "bad escape '\\\\x' in a string"),
    "not-utf8-escape": (b'name: "m"\nplatform: "\\xff\\xfe"\n', 2,
                        "a string's escapes make bytes that are not UTF-8 text"),
    "not-utf8": (b'name: "m"\n# caf\xe9\n', 2, "byte 0xe9 is not UTF-8 text"),
    "5mb": (b'name: "m"\n' + b"# " + b"x" * (5 << 20) + b"\n", 1,
            f"a config is at most {pbtxt.MAX_BYTES}"),
    "long-name": (f'\nname: "{LONG_NAME}"\n'.encode(), 2, "name is 'nnnnnnnn"),
}


@pytest.fixture(scope="module")
def add_model(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = build_repository(tmp_path_factory.mktemp("builtin"), ["add_64x64"])
    return root / "add_64x64" / "1" / "model.onnx"


def model_dir(root: Path, name: str, model: Path, config: bytes | None = None) -> Path:
    d = root / name
    (d / "1").mkdir(parents=True)
    shutil.copyfile(model, d / "1" / "model.onnx")
    if config is not None:
        (d / "config.pbtxt").write_bytes(config)
    return d


@pytest.mark.parametrize("case", sorted(HOSTILE))
def test_a_hostile_config_is_one_invalid_argument_line_naming_file_and_line(
    tmp_path: Path, add_model: Path, case: str
) -> None:
    config, line, what = HOSTILE[case]
    d = model_dir(tmp_path / "repo", "m", add_model, config)
    repo = ModelRepository(tmp_path / "repo", mode="explicit")
    with pytest.raises(InvalidArgument) as e:
        repo.load("m")
    assert str(e.value).startswith(f"{d / 'config.pbtxt'}:{line}: "), str(e.value)
    assert what in str(e.value) and "\n" not in str(e.value)
    assert len(str(e.value)) < 400
    [entry] = repo.index()
    assert entry["state"] == "UNAVAILABLE" and entry["reason"] == e.value.message


def test_the_reader_in_process_has_the_same_bounds() -> None:
    with pytest.raises(InvalidArgument, match=r"^config.pbtxt:1: messages nest more than 32"):
        parse("a {" * 10_000 + "}" * 10_000)
    assert parse('s: "\\101\\x42\\u00e9\\U0001F600\\n\\\'"')["s"] == ["ABé\U0001F600\n'"]
    assert parse("a: -9223372036854775808 b: 18446744073709551615 c: 1e999")["b"] == [2**64 - 1]


@pytest.mark.parametrize("case", ["deep", "huge-number", "bad-escape", "long-name"])
def test_serve_with_a_hostile_config_exits_2_with_one_line(
    tmp_path: Path, add_model: Path, case: str
) -> None:
    config, line, what = HOSTILE[case]
    d = model_dir(tmp_path / "repo", "m", add_model, config)
    lines = serve_refuses(tmp_path / "repo", tmp_path)
    assert len(lines) == 1, lines
    assert lines[0].startswith(f"fenceline: {d / 'config.pbtxt'}:{line}: ") and what in lines[0]


@pytest.fixture(scope="module")
def explicit(tmp_path_factory: pytest.TempPathFactory, add_model: Path) -> Iterator[Service]:
    tmp = tmp_path_factory.mktemp("hostile")
    root = tmp / "repo"
    model_dir(root, "good", add_model, BASE.replace('"m"', '"good"').encode())
    model_dir(root, "modèle", add_model)
    for case, (config, _, _) in HOSTILE.items():
        model_dir(root, case, add_model, config.replace(b'"m"', f'"{case}"'.encode()))
    (tmp / "svc").mkdir()
    with running(root, tmp / "svc", "--model-control-mode", "explicit") as svc:
        yield svc


@pytest.mark.parametrize("case", sorted(HOSTILE))
def test_explicit_load_of_a_hostile_config_answers_400_and_keeps_the_reason(
    explicit: Service, case: str
) -> None:
    _, line, what = HOSTILE[case]
    r = httpx.post(f"{explicit.url}/v2/repository/models/{case}/load", timeout=60)
    assert r.status_code == 400, r.text
    body = r.json()
    assert body["code"] == "invalid_argument" and f"config.pbtxt:{line}: " in body["error"]
    assert (what if case != "long-name" else "name is 'nnn") in body["error"]
    index = {e["name"]: e for e in httpx.post(f"{explicit.url}/v2/repository/index").json()}
    assert index[case]["state"] == "UNAVAILABLE" and index[case]["reason"] == body["error"]
    assert "Traceback" not in explicit.log_text()


def test_model_names_are_utf8_text_of_at_most_255_bytes_or_refused(explicit: Service) -> None:
    url = f"{explicit.url}/v2/repository/models"
    for name in (LONG_NAME, "%FF%FE", "a%00b", ".."):
        r = httpx.post(f"{url}/{name}/load", timeout=30)
        assert r.status_code in (400, 404), (name, r.text)
        if name != "..":  # ".." never reaches the route: the URL is normalised first
            assert r.status_code == 400 and r.json()["code"] == "invalid_argument", (name, r.text)
    assert httpx.post(f"{url}/modèle/load", timeout=60).status_code == 200
    index = {e["name"]: e for e in httpx.post(f"{explicit.url}/v2/repository/index").json()}
    assert index["modèle"]["state"] == "READY"
    assert httpx.get(f"{explicit.url}/v2/models/modèle/ready").status_code == 200
    assert not any(LONG_NAME in n or "\ufffd" in n for n in index)
    assert httpx.post(f"{url}/good/load", timeout=60).status_code == 200
    assert "Traceback" not in explicit.log_text()
