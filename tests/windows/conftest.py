"""The Windows lane's tests: they run in a Windows CPython (under Wine in CI, see .ci/windows),
with the win_amd64 wheel installed, and start real separate Windows processes. Elsewhere they
are skipped."""

from __future__ import annotations

import os
import secrets
import sys
from collections.abc import Iterator
from typing import TYPE_CHECKING

import pytest

if TYPE_CHECKING:
    from tests.windows.test_service import WinService

collect_ignore_glob = [] if sys.platform == "win32" else ["win_*.py"]


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    if sys.platform == "win32":
        return
    skip = pytest.mark.skip(reason="Windows-only: runs in the Windows lane (.ci/windows)")
    for item in items:
        if "tests/windows" in str(item.path).replace(os.sep, "/"):
            item.add_marker(skip)


@pytest.fixture
def unique() -> str:
    """A fresh name stem: the lane's runs and tests share one Wine session namespace."""
    return f"fl-{os.getpid()}-{secrets.token_hex(4)}"


@pytest.fixture(scope="session")
def service(tmp_path_factory: pytest.TempPathFactory) -> Iterator[WinService]:
    """One service for every module: starting one under Wine takes a while."""
    from tests.windows.test_service import run_service

    yield from run_service(tmp_path_factory)
