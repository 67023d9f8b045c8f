"""Fixtures of the integration tests: ``transport`` runs a behaviour over every client that can
express it (HTTP, the Python IPC client, the C client), tests/support/transports.py."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from fenceline.client import ClientError, c_api
from tests.support.service import Service
from tests.support.transports import TRANSPORTS, Transport, open_transport


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
