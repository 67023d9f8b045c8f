"""Who runs at which priority, and on how many threads, in a real service
(runtime/ort_options.py): while several renderer sessions run on the CPU of a machine of four
CPUs or more, onnxruntime's intra-op pool threads at idle priority, so that renderers and the
service's own threads never wait behind them; with one session, or on a smaller machine, every
thread at normal priority. A run that starts while the service's runs in flight fill its CPUs
takes the model's one-thread session, on both run paths."""

from __future__ import annotations

import contextlib
import os
import threading
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import numpy as np
import pytest

from fenceline.client import IpcClient
from fenceline.protocol import codec
from tests.conftest import TEST_MODELS
from tests.integration.test_run_page import (
    ANSWERED,
    REPLY_FLAGS_AT,
    RawPageClient,
    raw_session,
)
from tests.support.helpers import FrameSession, open_session
from tests.support.service import Service, running
from tests.support.waiting import wait_until

pytestmark = [pytest.mark.skipif(not hasattr(os, "SCHED_IDLE"), reason="SCHED_IDLE is Linux's"),
              pytest.mark.alone]  # turns are taken when the runs in flight fill the CPUs


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


def status_row(service: Service, s: FrameSession) -> dict[str, Any]:
    r = httpx.get(service.url + "/v2/interop/status", timeout=5)
    return next(row for row in r.json()["sessions"] if s.session_id.startswith(row["id"]))


@pytest.fixture
def two_cpus(model_repo: Path, tmp_path: Path) -> Iterator[Service]:
    """A service of its own on two CPUs."""
    if len(os.sched_getaffinity(0)) < 2:
        pytest.skip("one CPU: the model has no pool, so its runs never fill the CPUs")
    with running(model_repo, tmp_path, cpus=2) as svc:
        yield svc


def test_a_run_takes_one_thread_while_the_runs_in_flight_fill_the_cpus(two_cpus: Service) -> None:
    svc = two_cpus
    with IpcClient(svc.socket, name="one-thread-busy") as a, \
            IpcClient(svc.socket, name="one-thread-small") as b:
        loaded = "one-thread session loaded"
        small = open_session(b, "add_64x64", [1, 3, 64, 64])
        opened = [small]
        try:
            # One session on two CPUs: no one-thread session is loaded.
            frames(b, small, 1)
            assert loaded not in svc.log_text()
            # Two: the sessions may fill the CPUs, so both models get one, and the session
            # made first is bound to it too.
            busy = open_session(a, "add_720p", [1, 3, 720, 1280])
            opened.append(busy)
            log = svc.log_text()
            assert f"model add_64x64 version 1: {loaded}" in log, log
            assert f"model add_720p version 1: {loaded}" in log, log
            assert log.count(loaded) == 2, log  # the other models never got one

            # One run at a time: each has the service's two CPUs, and takes the pool.
            frames(a, busy, 1)
            assert status_row(svc, busy)["single_thread_runs"] == 0
            assert status_row(svc, small)["single_thread_runs"] == 0

            # A renderer that keeps a 720p run in flight nearly all the time: a 64x64 run that
            # starts beside it finds both CPUs taken, and runs on one thread.
            stop, going, failed = threading.Event(), threading.Event(), []

            def keep_busy() -> None:
                busy.x[:] = 7  # written once: the loop keeps the service, not itself, busy
                v = 6
                try:
                    while not stop.is_set():
                        v += 1
                        busy.wait.signal(v)
                        assert a.run(busy.session_id, v).signal_value == v
                        going.set()
                except Exception as e:  # noqa: BLE001 - reported by the test's thread
                    failed.append(e)
                    going.set()

            worker = threading.Thread(target=keep_busy, name="busy-renderer")
            worker.start()
            try:
                assert going.wait(60), "the busy renderer's first frame"
                # Batches of 20 frames until one of them ran on one thread: most do, but on a
                # machine as small as the service's share, a batch may fall between the busy
                # renderer's runs.
                v = 5
                for _ in range(50):
                    for _ in range(20):
                        v += 1
                        small.x[:] = v
                        small.wait.signal(v)
                        assert b.run(small.session_id, v).signal_value == v
                        assert np.all(small.y == v + 1)  # the one-thread session's binding too
                    took = status_row(svc, small)["single_thread_runs"]
                    if took:
                        break
            finally:
                stop.set()
                worker.join(60)
            assert not failed, failed
            assert np.all(busy.y == 8)
            assert 0 < took <= v - 5

            # Alone again: the count of runs in flight went back down, so the pool again.
            frames(b, small, v + 1)
            row = status_row(svc, small)
            assert (row["single_thread_runs"], row["runs"]) == (took, v + 5)
        finally:
            for s in opened:
                s.close()


def turns(service: Service) -> dict[str, int]:
    r = httpx.get(service.url + "/v2/interop/status", timeout=5)
    got: dict[str, int] = r.json()["server"]["large_frame_turns"]
    return got


def test_large_frames_take_turns_while_the_runs_in_flight_fill_the_cpus(two_cpus: Service) -> None:
    svc = two_cpus
    shape = [1, 3, 720, 1280]
    frame_bytes = 2 * int(np.prod(shape)) * 4  # input and output
    with IpcClient(svc.socket, name="turns-a") as a, IpcClient(svc.socket, name="turns-b") as b:
        cache = turns(svc)["cache_bytes"]
        if cache == 0:
            pytest.skip("this machine does not say how large its last-level cache is")
        if frame_bytes * 4 < cache:
            pytest.skip(f"a 720p frame is not large beside this {cache >> 20} MiB cache")
        one = open_session(a, "add_720p", shape)
        two = open_session(b, "add_720p", shape)
        try:
            frames(a, one, 1)  # one run in flight on two CPUs: no turn
            assert turns(svc)["runs"] == 0
            failed: list[BaseException] = []

            def renderer(client: IpcClient, s: FrameSession, first: int) -> None:
                try:
                    for v in range(first, first + 60):
                        s.x[:] = v
                        s.wait.signal(v)
                        assert client.run(s.session_id, v).signal_value == v
                        assert np.all(s.y == v + 1)  # every frame's own output
                except BaseException as e:  # noqa: BLE001 - reported by the test's thread
                    failed.append(e)

            both = [threading.Thread(target=renderer, args=(a, one, 10)),
                    threading.Thread(target=renderer, args=(b, two, 10))]
            for t in both:
                t.start()
            for t in both:
                t.join(120)
            assert not failed, failed
            got = turns(svc)
            # Two renderers' runs fill the two CPUs: one run at a time on both cores, the turn
            # kept after a run for the same session's next frame.
            assert got["runs"] > 0, got
            assert got["kept_taken_back"] + got["kept_expired"] > 0, got
            assert got["runs"] <= 120, got  # only the two renderers' 720p runs
        finally:
            one.close()
            two.close()


@pytest.fixture
def pools_yield_here(model_repo: Path, tmp_path: Path) -> Iterator[Service]:
    """A service of its own whose pools yield with two sessions on the CPU on this machine too
    (from one usable CPU on, not four)."""
    with running(model_repo, tmp_path, yield_cpus=1) as svc:
        yield svc


def test_renderers_are_told_while_the_cores_are_shared_and_then_neither_nap_nor_stay(
        pools_yield_here: Service) -> None:
    """Every RUN reply says whether the service's runs on the CPU share its cores now (the
    pools at idle priority: docs/ipc.md, "RUN reply"), on the socket and on the run page alike;
    while they do, the Python client waits for its replies without napping or staying runnable
    (docs/fences.md), and once they no longer do it may again. Both clients asked for the
    flags in HELLO."""
    service, shared = pools_yield_here, codec.REPLY_CPUS_SHARED
    shape = [1, 3, 720, 1280]

    def run(client: IpcClient, s: FrameSession, v: int) -> int:
        s.x[:] = v
        s.wait.signal(v)
        reply = client.run(s.session_id, v)
        assert reply.signal_value == v and np.all(s.y == v + 1)
        return reply.flags

    with IpcClient(service.socket, name="shared-a") as a:
        assert a.server["features"] == [codec.FEATURE_REPLY_FLAGS]
        one = open_session(a, "add_720p", shape)
        assert [run(a, one, v) for v in range(1, 6)] == [0] * 5  # one session: not shared
        raw = RawPageClient(service)
        try:
            hello = {"client": "raw", "features": [codec.FEATURE_REPLY_FLAGS, "not-yet"]}
            said = codec.decode_json(raw.call(codec.Kind.HELLO, hello).body)
            assert said["features"] == [codec.FEATURE_REPLY_FLAGS]  # the names it knows
            raw.open_page()
            sid, x, y, wait = raw_session(raw, service)  # a second session on the CPU
            assert pool_priorities(service) == {"idle"}
            x[:] = 1
            wait(1)
            raw.post(sid, 1)
            assert raw.reply()[1] == ANSWERED  # on the page, its flags there
            on_page = memoryview(raw.page).cast("I")[REPLY_FLAGS_AT // 4]  # type: ignore[arg-type]
            assert on_page == shared
            assert np.all(y == 2)
            x[:] = 2
            wait(2)
            raw.rid += 1
            raw.sock.send(codec.encode_run(raw.rid, codec.Run(sid, 2, 0, 10_000)))
            frame = raw.recv()
            assert frame.kind == codec.Kind.RUN | codec.REPLY_BIT, frame
            assert codec.decode_run_reply(frame.body).flags == shared and np.all(y == 3)

            assert run(a, one, 6) == shared
            before = a.waits
            flags = [run(a, one, v) for v in range(7, 207)]
            after = a.waits
            assert flags == [shared] * 200
            assert (after["napped"], after["stayed"]) == (before["napped"], before["stayed"]), (
                before, after)
            assert after["blocked"] > before["blocked"], (before, after)
        finally:
            raw.close()
        # The second session went with raw's connection: the cores are the renderer's again.
        wait_until(lambda: pool_priorities(service) == {"normal"},
                   what="the pools at normal priority again")
        assert run(a, one, 207) == 0
        one.close()


def test_a_client_written_before_the_reply_flags_reads_zero_there_while_the_cores_are_shared(
        pools_yield_here: Service) -> None:
    """A renderer written to docs that called offset 20 of the RUN reply "reserved, 0" never
    asked for the flags (docs/ipc.md, "HELLO"): with no HELLO, or a HELLO without "features",
    every reply it gets has that word 0, on the socket and on the run page,
    while the cores are shared and a client beside it that asked is told so."""
    service, shared = pools_yield_here, codec.REPLY_CPUS_SHARED
    with IpcClient(service.socket, name="asks-for-flags") as a:
        one = open_session(a, "add_720p", [1, 3, 720, 1280])
        told = 0  # session one's frames
        for hello in (None, {"client": "earlier-docs"}):
            raw = RawPageClient(service)
            try:
                if hello is not None:
                    said = codec.decode_json(raw.call(codec.Kind.HELLO, hello).body)
                    assert said["features"] == [] and said["protocol"] == 1
                raw.open_page()
                sid, x, y, wait = raw_session(raw, service)  # a second session on the CPU
                assert pool_priorities(service) == {"idle"}
                told += 1
                one.x[:] = told
                one.wait.signal(told)
                assert a.run(one.session_id, told).flags == shared  # they are shared
                words: list[int] = []
                for v in range(1, 41, 2):  # odd values on the page, even ones on the socket
                    x[:] = v
                    wait(v)
                    raw.post(sid, v)
                    assert raw.reply()[1] == ANSWERED  # on the page, its flags there
                    words.append(memoryview(raw.page).cast("I")[REPLY_FLAGS_AT // 4])  # type: ignore[arg-type]
                    assert np.all(y == v + 1)
                    x[:] = v + 1
                    wait(v + 1)
                    raw.rid += 1
                    raw.sock.send(codec.encode_run(raw.rid, codec.Run(sid, v + 1, 0, 10_000)))
                    frame = raw.recv()
                    assert frame.kind == codec.Kind.RUN | codec.REPLY_BIT, frame
                    words.append(codec.decode_run_reply(frame.body).flags)
                    assert np.all(y == v + 2)
                assert words == [0] * 40, words
            finally:
                raw.close()
            wait_until(lambda: pool_priorities(service) == {"normal"},
                       what="the pools at normal priority again")
        one.close()
