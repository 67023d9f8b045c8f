"""Who runs at which priority in a real service (runtime/ort_options.py): while several
renderer sessions run on the CPU of a machine of four CPUs or more, onnxruntime's intra-op pool
threads at idle priority, so that renderers and the service's own threads never wait behind
them; with one session, or on a smaller machine, every thread at normal priority."""

from __future__ import annotations

import contextlib
import os
from collections import Counter

import httpx
import numpy as np
import pytest

from fenceline.client import IpcClient
from tests.conftest import TEST_MODELS
from tests.support.helpers import FrameSession, open_session
from tests.support.service import Service
from tests.support.waiting import wait_until

pytestmark = pytest.mark.skipif(not hasattr(os, "SCHED_IDLE"), reason="SCHED_IDLE is Linux's")


def policies(pid: int) -> Counter[int]:
    out: Counter[int] = Counter()
    for tid in os.listdir(f"/proc/{pid}/task"):
        with contextlib.suppress(ProcessLookupError):  # a thread that just ended
            out[os.sched_getscheduler(int(tid))] += 1
    return out


def pool_priorities(service: Service) -> set[str]:
    """What the status JSON says of the models' pools."""
    r = httpx.get(service.url + "/v2/interop/status", timeout=5)
    return {m["pool_priority"] for m in r.json()["models"]}


def frames(client: IpcClient, s: FrameSession, first: int) -> None:
    for v in range(first, first + 5):
        s.x[:] = v
        s.wait.signal(v)
        assert client.run(s.session_id, v).signal_value == v
        assert np.all(s.y == v + 1)  # the pool's share of the run was done too


def test_pool_threads_yield_while_several_sessions_run_and_only_then(service: Service) -> None:
    cpus = len(os.sched_getaffinity(service.pid))
    if cpus < 2:
        pytest.skip("one CPU: onnxruntime starts no pool thread")
    # One pool per loaded model, each of the usable CPUs less the caller; they yield from two
    # sessions on, on four CPUs or more.
    yielding = len(TEST_MODELS) * (cpus - 1) if cpus >= 4 else 0
    shape = [1, 3, 720, 1280]
    with IpcClient(service.socket, name="scheduling-a") as a, \
            IpcClient(service.socket, name="scheduling-b") as b:
        one = open_session(a, "add_720p", shape)
        try:
            frames(a, one, 1)
            assert policies(service.pid)[os.SCHED_IDLE] == 0
            assert pool_priorities(service) == {"normal"}
            two = open_session(b, "add_720p", shape)
            try:
                frames(a, one, 10)
                frames(b, two, 1)
                got = policies(service.pid)
                assert got[os.SCHED_IDLE] == yielding, got
                assert set(got) <= {os.SCHED_OTHER, os.SCHED_IDLE}, got
                assert pool_priorities(service) == {"idle" if yielding else "normal"}
            finally:
                two.close()
        finally:
            one.close()
    # Both connections closed: their sessions are released, and the pools are normal again.
    wait_until(lambda: policies(service.pid)[os.SCHED_IDLE] == 0,
               what="the pools at normal priority again")
