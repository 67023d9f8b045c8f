"""Shared fixtures: a real service in its own process (tests/support/service.py) and the
builtin models. Tests are grouped by level: unit/, integration/ (a real service, real clients),
e2e/ (the CLI, the container entrypoint, a browser), native/ (the C++ importer and the C client)
and gpu/ (skipped without an NVIDIA GPU)."""

from __future__ import annotations

import fcntl
import os
from collections.abc import Iterator
from pathlib import Path

import pytest
from hypothesis import HealthCheck, settings

from fenceline.models import build_repository
from tests.support.service import Service, running

TEST_MODELS = ["add_64x64", "add_720p", "image_filter", "add_64x64_fp16"]

# Property tests judge behaviour, never time: without this, Hypothesis fails an example that took
# over 200 ms, or whose data took long to draw, which a busy machine makes happen.
settings.register_profile("fenceline", deadline=None, suppress_health_check=[HealthCheck.too_slow])
settings.load_profile("fenceline")


@pytest.hookimpl(wrapper=True)
def pytest_runtest_protocol(item: pytest.Item, nextitem: pytest.Item | None) -> Iterator[object]:
    """With the README's two workers (pytest-xdist), a test marked ``alone`` runs while the other
    worker runs none: it judges how the service or the client uses CPUs (spinning, yielding,
    taking turns) and needs the CPUs this run may use. Every other test holds the run's lock
    shared; a test marked ``alone`` holds it exclusive."""
    basetemp = item.config.option.basetemp
    if not os.environ.get("PYTEST_XDIST_WORKER") or not basetemp:
        return (yield)
    with open(os.path.join(os.path.dirname(basetemp), "alone.lock"), "a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX if item.get_closest_marker("alone") else fcntl.LOCK_SH)
        return (yield)  # closing the file releases the lock


@pytest.fixture(scope="session")
def model_repo(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return build_repository(tmp_path_factory.mktemp("models"), TEST_MODELS)


@pytest.fixture(scope="module")
def service(model_repo: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Service]:
    with running(model_repo, tmp_path_factory.mktemp("service")) as svc:
        yield svc
