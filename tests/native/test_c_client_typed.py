"""API version 5 of the C client (native/client/tests/test_typed.c, run as a separate process
against a real service): struct sizes checked with the fix in the message, programs of versions
1 to 4 still served their layouts, typed server info and model metadata."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from fenceline.client import c_api
from tests.native.test_c_client import CLIENT_SRC, NEEDS_CC, compile_c
from tests.support.service import Service

pytestmark = NEEDS_CC

CHECKS = [
    "struct_size_zero_is_refused_with_the_fix",
    "bigger_structs_of_later_versions_are_read",
    "programs_of_version_4_still_run",
    "server_details",
    "model_metadata",
    "session_from_metadata_runs",
    "datatype_sizes",
]


@pytest.fixture(scope="module")
def program(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("c-typed")
    return compile_c([CLIENT_SRC / "tests" / "test_typed.c"], out / "test_typed",
                     *c_api.c_link_flags())


def run(cmd: list[str | Path]) -> subprocess.CompletedProcess[str]:
    return subprocess.run([str(c) for c in cmd], capture_output=True, text=True, timeout=60)


def test_every_typed_check_is_run(program: Path) -> None:
    r = run([program, "-", "list"])
    assert r.returncode == 0, r.stderr
    assert r.stdout.split() == CHECKS


@pytest.mark.parametrize("check", CHECKS)
def test_typed_check(check: str, program: Path, service: Service) -> None:
    r = run([program, service.socket, check])
    assert r.returncode == 0, f"{r.stdout}\n{r.stderr}"
    assert r.stdout.startswith(f"ok {check}")


def test_struct_size_error_names_the_struct_and_its_size(program: Path, service: Service) -> None:
    r = run([program, service.socket, "struct_size_zero_is_refused_with_the_fix"])
    assert r.returncode == 0, r.stderr
    assert "[invalid_argument] Run: struct_size is 4, below the 32 bytes of the first " \
           "FlRunResult; set it to sizeof(FlRunResult) (32 in this library)" in r.stdout
