"""Fixtures of the integration tests: ``transport`` runs a behaviour over every client that can
express it (HTTP, the Python IPC client, the C client), tests/support/transports.py."""

from __future__ import annotations

import os
import shutil
from collections.abc import Iterator
from pathlib import Path

import pytest

from fenceline.client import ClientError, c_api
from tests.support.helpers import shared_dir
from tests.support.service import Service
from tests.support.transports import TRANSPORTS, Transport, open_transport
from tests.support.users import User


def c_client_missing() -> str | None:
    try:
        (c_api.c_library_dir() / c_api.LIBRARY).stat()
    except (ClientError, OSError) as e:
        return f"the C client library is not installed: {e}"
    return None


@pytest.fixture(params=TRANSPORTS)
def transport(request: pytest.FixtureRequest, service: Service) -> Iterator[Transport]:
    if request.param == "c" and (reason := c_client_missing()):
        pytest.skip(reason)
    t = open_transport(request.param, service.url, service.socket)
    yield t
    t.close()


@pytest.fixture(scope="module")
def other_user() -> Iterator[User]:
    """A second real Unix user's process (tests/support/users.py); skipped without root."""
    if os.geteuid() != 0 or shutil.which("useradd") is None:
        pytest.skip("a second Unix user needs root and useradd")
    u = User("fenceline-test-a")
    yield u
    u.close()


@pytest.fixture(scope="module")
def shared() -> Iterator[Path]:
    """A directory every test user can reach, for a service's socket."""
    with shared_dir() as d:
        yield d
