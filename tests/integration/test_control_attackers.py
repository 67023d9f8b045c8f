"""The soak's control-plane attackers (fenceline.soak.control_attack), each a real process
against a real service in explicit mode: hostile configs and names, an 80-client reload flood
and a trace flood get only their documented answers, and the service logs no traceback."""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from fenceline.soak import control_attack
from tests.support.service import Service, running


@pytest.fixture(scope="module")
def svc(model_repo: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Service]:
    tmp = tmp_path_factory.mktemp("attackers")
    load = control_attack.write_repository(tmp / "repo", model_repo / "add_64x64" / "1" / "model.onnx")
    (tmp / "svc").mkdir()
    with running(tmp / "repo", tmp / "svc", "--model-control-mode", "explicit",
                 *(a for m in load for a in ("--load-model", m))) as s:
        yield s


@pytest.mark.parametrize("mode", control_attack.MODES)
def test_a_control_plane_attacker_gets_only_its_documented_answers(svc: Service, mode: str) -> None:
    done = subprocess.run([sys.executable, "-m", "fenceline.soak.control_attack", mode, svc.url,
                           str(svc.socket)], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    codes = json.loads(done.stdout.splitlines()[-1])["codes"]
    assert codes and set(codes) <= control_attack.ANSWERS[mode], codes
    if mode == "bad-configs":  # every hostile config and name refused, one by one
        assert codes == {"400": len(control_attack.HOSTILE_CONFIGS) + len(control_attack.BAD_NAMES)}
        index = {e["name"]: e for e in httpx.post(svc.url + "/v2/repository/index").json()}
        for name in control_attack.HOSTILE_CONFIGS:
            assert index[name]["state"] == "UNAVAILABLE" and "config.pbtxt:" in index[name]["reason"]
    if mode == "trace-flood":
        assert codes.get("200") and codes.get("403"), codes
    assert "Traceback" not in svc.log_text()
