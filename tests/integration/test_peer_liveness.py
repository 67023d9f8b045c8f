"""A renderer that leaves its own end of the connection in the service's receive queue (a frame
carrying it as SCM_RIGHTS) and dies: the socket never hangs up, so the service must see the
process go (its pidfd), or give up on a reply nobody takes (the send timeout). Real processes on
both sides (fenceline.soak.hostile); docs/reliability.md, "A renderer dies"."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from fenceline import _native
from fenceline.models import build_repository
from fenceline.soak import hostile
from tests.conftest import TEST_MODELS
from tests.support.metrics import metric
from tests.support.service import Service, running

STATES = ["send-blocked", "fence-wait"]
# Its runs queued behind a slow one in progress, on the socket without and with the run page.
QUEUED = ["queued", "queued-page"]
SEND_TIMEOUT_S = 60


def threads(svc: Service) -> int:
    return len(os.listdir(f"/proc/{svc.pid}/task"))


def snapshot(svc: Service) -> tuple[int, list[str], list[str]]:
    """(threads, fds, shared-memory mappings) once they have settled."""
    fds, maps = svc.settled()
    return threads(svc), fds, maps


def kill_and_time(svc: Service, proc: subprocess.Popen[str],
                  before: tuple[int, list[str], list[str]]) -> float | None:
    """SIGKILLs the renderer; seconds until the service's threads, fds and mappings are back
    at ``before`` (None: not within half the send timeout)."""
    threads_before, fds_before, maps_before = before
    proc.kill()
    proc.wait(10)
    return until(lambda: svc.maps() == maps_before and sorted(svc.fds()) == fds_before
                 and threads(svc) == threads_before, timeout_s=SEND_TIMEOUT_S / 2)


def end(proc: subprocess.Popen[str]) -> None:
    if proc.poll() is None:
        proc.kill()
    proc.wait(10)
    assert proc.stdout is not None
    proc.stdout.close()


def counts(svc: Service, before: tuple[int, list[str], list[str]],
           during: tuple[int, int, int]) -> str:
    return (f"threads {before[0]} -> {during[0]} -> {threads(svc)}, fds {len(before[1])} -> "
            f"{during[1]} -> {len(svc.fds())}, mappings {len(before[2])} -> {during[2]} -> "
            f"{len(svc.maps())}")


def until(check: Callable[[], bool], timeout_s: float) -> float | None:
    """Seconds until ``check`` held, None when it did not within ``timeout_s``."""
    start = time.monotonic()
    while time.monotonic() - start < timeout_s:
        if check():
            return time.monotonic() - start
        time.sleep(0.005)
    return None


def own_end(svc: Service, state: str) -> tuple[subprocess.Popen[str], dict[str, object]]:
    proc = subprocess.Popen(
        [sys.executable, "-m", "fenceline.soak.hostile", f"own-end-{state}", str(svc.socket)],
        stdout=subprocess.PIPE, text=True,
    )
    assert proc.stdout is not None
    line = proc.stdout.readline()
    assert line, f"the hostile renderer exited with {proc.wait(10)}"
    return proc, json.loads(line)


@pytest.fixture(scope="module")
def repo(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return build_repository(tmp_path_factory.mktemp("models"), [*TEST_MODELS, "slow_add_64x64"])


@pytest.fixture(scope="module")
def svc(repo: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Service]:
    # A send timeout far above the release bound: only the renderer's death can explain a
    # release within it.
    tmp = tmp_path_factory.mktemp("service-")
    with running(repo, tmp, "--ipc-send-timeout-s", str(SEND_TIMEOUT_S)) as s:
        yield s


@pytest.mark.parametrize("state", STATES)
def test_a_renderer_that_queued_its_own_end_and_was_killed_is_released_at_its_death(
    svc: Service, state: str
) -> None:
    before = snapshot(svc)
    proc, ready = own_end(svc, state)
    try:
        if state == "send-blocked":
            # It stopped after the service's send blocked: fewer runs served than it sent.
            assert 0 < int(str(ready["served"])) < 5000
        else:
            time.sleep(0.3)  # the service is in the fence wait (600 s timeout)
        during = (threads(svc), len(svc.fds()), len(svc.maps()))
        assert during[0] > before[0] and during[2] > len(before[2]), during
        released = kill_and_time(svc, proc, before)
    finally:
        end(proc)
    print(f"\n{state} ({svc.log.parent.name}): released {released} s after SIGKILL; "
          f"{counts(svc, before, during)}")
    # Long before the send timeout (or the fence wait's 600 s) could end the connection: only
    # the renderer's death explains the release.
    assert released is not None, f"not released {SEND_TIMEOUT_S / 2:g} s after SIGKILL"
    assert metric(svc, "fenceline_ipc_open_connections") == 0


@pytest.mark.parametrize("state", QUEUED)
def test_a_renderer_killed_with_runs_queued_is_released_and_its_queued_runs_never_run(
    svc: Service, state: str
) -> None:
    before = snapshot(svc)
    proc, ready = own_end(svc, state)
    try:
        # Its output fence, read through the renderer's fd table: the value is the last run
        # the service executed (run n signals n).
        done = _native.HostFence.from_fd(
            os.open(f"/proc/{proc.pid}/fd/{ready['done_fd']}", os.O_RDWR))
        assert until(lambda: done.value >= 1, timeout_s=120) is not None  # the first one ran
        during = (threads(svc), len(svc.fds()), len(svc.maps()))
        executed_before = int(done.value)
        released = kill_and_time(svc, proc, before)
        time.sleep(1.0)  # a queued run served after the release would show by now
        executed = int(done.value)
        done.close()
    finally:
        end(proc)
    print(f"\n{state} ({svc.log.parent.name}): released {released} s after SIGKILL; runs "
          f"executed {executed_before} at the kill, {executed} in all of "
          f"{hostile.QUEUED_RUNS}; {counts(svc, before, during)}")
    # The run in progress at the kill may finish; nothing queued behind it runs.
    assert executed <= executed_before + 1 < hostile.QUEUED_RUNS, (executed_before, executed)
    assert released is not None, f"not released {SEND_TIMEOUT_S / 2:g} s after SIGKILL"
    assert metric(svc, "fenceline_ipc_open_connections") == 0


def test_a_renderer_that_does_not_take_its_replies_is_dropped_after_the_send_timeout(
    repo: Path, tmp_path: Path
) -> None:
    with running(repo, tmp_path, "--ipc-send-timeout-s", "0.5") as s:
        _, fds_before, maps_before = snapshot(s)
        proc, ready = own_end(s, "send-blocked")  # alive, and its end never hangs up
        try:
            assert 0 < int(str(ready["served"])) < 5000
            # It noticed the stall 0.3 s after the service's send began to wait.
            dropped = until(lambda: s.maps() == maps_before and sorted(s.fds()) == fds_before,
                            timeout_s=10)
            assert dropped is not None, "not dropped 10 s after its replies stopped being taken"
            assert proc.poll() is None
            assert metric(s, "fenceline_ipc_open_connections") == 0
            assert "a reply was not taken within 500 ms (--ipc-send-timeout-s)" in s.log_text()
        finally:
            proc.kill()
            proc.wait(10)
            assert proc.stdout is not None
            proc.stdout.close()
