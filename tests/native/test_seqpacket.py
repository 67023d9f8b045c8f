"""The importer's SOCK_SEQPACKET receive and send, on real socket pairs: a message already
there, a spin that ends before the message and one that it cuts short, the end of the peer, a
message too long or with too many fds, a send to a peer that is gone, a send that must wait for
room (without the GIL) and one that is not taken in time, the peer's process watched through a
pidfd, purging what a closed connection left queued, and the Python client's end
(``_native.ClientSocket``): its RUN replies and the spinner slot its wait takes
(fenceline.waiting)."""

from __future__ import annotations

import errno
import os
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from fenceline import _native
from fenceline.protocol import codec
from fenceline.waiting import WINDOW_SHIFT, WINDOWS_PER_PERIOD, SpinGate

pytestmark = [pytest.mark.skipif(_native.PLATFORM != "posix", reason="SOCK_SEQPACKET is POSIX"),
              pytest.mark.alone]  # the spin rule's waits depend on which CPUs are idle
MAX, MAX_FDS = 1024, 4


@pytest.fixture
def pair() -> Iterator[tuple[socket.socket, socket.socket]]:
    a, b = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
    with a, b:
        yield a, b


def test_a_waiting_message_and_its_fds_are_taken_at_once(pair: tuple[socket.socket, socket.socket]
                                                         ) -> None:
    a, b = pair
    r, w = os.pipe()
    try:
        socket.send_fds(a, [b"hello"], [r])
        data, fds, problem = _native.recv_message(b.fileno(), MAX, MAX_FDS, 10**9)
        assert (data, problem, len(fds)) == (b"hello", None, 1)
        os.write(w, b"x")
        assert os.read(fds[0], 1) == b"x"  # the fd is the pipe's read end, now ours
        os.close(fds[0])
    finally:
        os.close(r)
        os.close(w)


def test_a_wait_that_may_not_block_spins_and_returns_none(
        pair: tuple[socket.socket, socket.socket]) -> None:
    _, b = pair
    t0 = time.perf_counter_ns()
    got = _native.recv_message(b.fileno(), MAX, MAX_FDS, 2_000_000, False)
    assert got is None
    assert time.perf_counter_ns() - t0 >= 2_000_000  # the spin ran its whole length


def test_a_message_that_comes_during_the_spin_ends_it(
        pair: tuple[socket.socket, socket.socket]) -> None:
    a, b = pair
    threading.Timer(0.05, lambda: a.send(b"late")).start()
    got = _native.recv_message(b.fileno(), MAX, MAX_FDS, 3 * 10**9, False)
    assert got is not None and got[0] == b"late"  # a spin that ran out would return None


def test_the_peers_end_too_long_and_too_many_fds(pair: tuple[socket.socket, socket.socket]
                                                ) -> None:
    a, b = pair
    a.send(b"x" * (MAX + 10))
    data, fds, problem = _native.recv_message(b.fileno(), MAX, MAX_FDS)
    assert problem == f"frame longer than {MAX} bytes" and len(data or b"") == MAX and fds == []
    pipes = [os.pipe() for _ in range(MAX_FDS + 1)]
    try:
        socket.send_fds(a, [b"fds"], [r for r, _ in pipes])
        _, fds, problem = _native.recv_message(b.fileno(), MAX, MAX_FDS)
        assert problem == f"frame carries more than {MAX_FDS} fds" and fds == []
    finally:
        for r, w in pipes:
            os.close(r)
            os.close(w)
    a.close()
    assert _native.recv_message(b.fileno(), MAX, MAX_FDS, 50_000) == (None, [], None)


def test_send_to_a_peer_that_is_gone_raises_without_a_signal(
        pair: tuple[socket.socket, socket.socket]) -> None:
    a, b = pair
    b.close()
    with pytest.raises(OSError):
        _native.send_message(a.fileno(), b"nobody")


def test_a_send_into_a_full_socket_waits_without_the_gil(
        pair: tuple[socket.socket, socket.socket]) -> None:
    a, b = pair
    a.setblocking(False)
    sent = 0
    with pytest.raises(BlockingIOError):
        while True:
            a.send(b"x" * 512)
            sent += 1
    a.setblocking(True)
    ticks = []
    stop = threading.Event()

    def python_work() -> None:  # needs the GIL while the send waits
        while not stop.is_set():
            ticks.append(1)
            time.sleep(0.001)

    def drain() -> None:
        time.sleep(0.2)
        for _ in range(sent + 1):
            b.recv(1024)

    threads = [threading.Thread(target=python_work), threading.Thread(target=drain)]
    for t in threads:
        t.start()
    try:
        _native.send_message(a.fileno(), b"one more")
    finally:
        stop.set()
        for t in threads:
            t.join(10)
    assert len(ticks) >= 10


def _outside_a_window() -> None:
    """Returns once the spin rule's clock is well outside its exploration windows, in which a
    wait blocks at once instead of spinning (native/common/spin_rule.h)."""
    while (time.monotonic_ns() >> WINDOW_SHIFT) % WINDOWS_PER_PERIOD in (0, WINDOWS_PER_PERIOD - 1):
        time.sleep(0.001)


def _asleep_on(tid: int, fd: int) -> bool:
    """Whether thread ``tid`` of this process sleeps in a system call on ``fd``: its receive
    blocked, neither spinning (running) nor waiting for the GIL (a futex)."""
    try:
        with open(f"/proc/self/task/{tid}/stat") as f:
            state = f.read().rsplit(")", 1)[1].split()[0]
        with open(f"/proc/self/task/{tid}/syscall") as f:
            call = f.read().split()
    except OSError:
        return False
    return state == "S" and len(call) > 1 and call[0] != "running" and int(call[1], 16) == fd


def _reply_once_asleep(a: socket.socket, fd: int, data: bytes, sent: list[int]) -> None:
    """Sends ``data`` on ``a`` once the calling thread sleeps in its receive on ``fd`` (at most
    30 s: then the reply was there before any wait), appending the time it saw that to ``sent``;
    however long either thread is descheduled, the reply never comes before the wait."""
    tid = threading.get_native_id()

    def send() -> None:
        deadline = time.monotonic() + 30
        while not _asleep_on(tid, fd) and time.monotonic() < deadline:
            time.sleep(0.0005)
        sent.append(time.monotonic_ns())
        a.send(data)

    threading.Thread(target=send, daemon=True).start()


def _touches_a_window(start_ns: int, end_ns: int) -> bool:
    """Whether [start_ns, end_ns] of the monotonic clock meets an exploration window, in which
    a wait blocks at once instead of asking for a spinner slot (native/common/spin_rule.h)."""
    return any(w % WINDOWS_PER_PERIOD == 0
               for w in range(start_ns >> WINDOW_SHIFT, (end_ns >> WINDOW_SHIFT) + 1))


def test_the_clients_wait_spins_only_with_a_spinner_slot() -> None:
    """Without a slot the wait blocks at once; with one it spins (or naps, then spins) to the
    end of its budget (the reply is sent only once the receive sleeps), then blocks, and gives
    the slot back. A try whose wait may have begun in an exploration window is made again."""
    for _ in range(20):
        a, b = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        with a, b:
            end = _native.ClientSocket(b.fileno(), 1_000_000, codec.RunReply)
            sent: list[int] = []
            _outside_a_window()
            t0 = time.monotonic_ns()
            _reply_once_asleep(a, b.fileno(), b"ok", sent)
            assert end.receive(1, SpinGate(0).native) == b"ok"
            denied, blocked = end.denied, dict(end.waits)
            gate = SpinGate(1)
            _outside_a_window()
            t1 = time.monotonic_ns()
            _reply_once_asleep(a, b.fileno(), b"there", sent)
            assert end.receive(2, gate.native) == b"there"
            if _touches_a_window(t0, sent[0]) or _touches_a_window(t1, sent[1]):
                continue
            assert (denied, blocked["blocked"], blocked["spun"]) == (1, 1, 0), blocked
            assert end.denied == 1 and gate.spinning() == 0  # it had the slot, and gave it back
            w = end.waits  # it spun, or napped and then spun (a nap holds the slot too)
            assert (w["spun"] + w["napped"], w["blocked"]) == (1, 1), w
            return
    pytest.fail("every try's waits met an exploration window")


def test_the_clients_end_reads_its_runs_reply_natively_and_hands_back_anything_else(
        pair: tuple[socket.socket, socket.socket]) -> None:
    a, b = pair
    end = _native.ClientSocket(b.fileno(), 0, codec.RunReply)
    sid = bytes(range(16))
    end.send_run(codec.Kind.RUN, 7, sid, 5, 6, 250)
    assert codec.decode_run(codec.decode(a.recv(MAX)).body) == codec.Run(sid, 5, 6, 250)
    reply = codec.encode(codec.Kind.RUN | codec.REPLY_BIT, 7,
                         codec.RUN_REPLY_BODY.pack(6, 1, 2, 3, 0))
    a.send(reply)
    assert end.receive(7, SpinGate(1).native) == codec.RunReply(6, 1, 2, 3)
    a.send(reply)  # the same reply where request 8's is due: the caller judges it
    assert end.receive(8, SpinGate(1).native) == reply
    a.send(b"")
    assert end.receive(9, SpinGate(1).native) == "empty frame: every frame starts with the " \
        "16-byte header"
    with pytest.raises(ValueError, match="16 bytes"):
        end.send_run(codec.Kind.RUN, 10, b"short", 1, 1, 1)
    a.close()
    assert end.receive(11, SpinGate(1).native) is None  # the service's end


def _answer_runs(a: socket.socket, frames: int, after_ns: int,
                 cpus: set[int] | None = None) -> threading.Thread:
    """A peer that answers each RUN ``after_ns`` after it came, busy meanwhile, as a model's
    run would be (``cpus``: the peer thread's CPUs)."""
    def model() -> None:
        if cpus is not None:
            os.sched_setaffinity(0, cpus)  # this thread only
        for _ in range(frames):
            rid = codec.decode(a.recv(MAX)).request_id
            t = time.perf_counter_ns() + after_ns
            while time.perf_counter_ns() < t:
                pass
            us = after_ns // 1000  # the service's time for the frame, as a reply reports it
            a.send(codec.encode(codec.Kind.RUN | codec.REPLY_BIT, rid,
                                codec.RUN_REPLY_BODY.pack(rid, 0, us, us, 0)))

    peer = threading.Thread(target=model)
    peer.start()
    return peer


def _run_frames(end: Any, gate: SpinGate, frames: int, after_ns: int) -> None:
    us = after_ns // 1000
    for rid in range(1, frames + 1):
        end.send_run(codec.Kind.RUN, rid, bytes(16), rid, 0, 1000)
        assert end.receive(rid, gate.native) == codec.RunReply(rid, 0, us, us)


def test_the_clients_replies_due_after_a_run_all_arrive_whether_it_naps_or_blocks(
        pair: tuple[socket.socket, socket.socket]) -> None:
    """A peer that answers each RUN 200 us after it came, as a model's run would: the waits are
    long enough to nap (docs/fences.md, "Why spin first"), and the rule's exploration windows
    nap even while blocking is preferred; every reply arrives, in order, whichever way."""
    a, b = pair
    end = _native.ClientSocket(b.fileno(), 100_000, codec.RunReply)
    gate = SpinGate(1)
    peer = _answer_runs(a, 300, 200_000)
    try:
        _run_frames(end, gate, 300, 200_000)
    finally:
        peer.join(30)
    assert gate.spinning() == 0 and isinstance(end.napping, bool)
    # Each reply came 200 us after its RUN: a frame waited once, one way or another (or not at
    # all, where the reply was there before the client looked: a thread descheduled meanwhile).
    w = end.waits
    assert 0 < w["spun"] + w["napped"] + w["blocked"] <= 300, w
    assert w["nap_missed"] <= w["napped"] and w["stayed_answered"] <= w["stayed"], w


@pytest.mark.parametrize(("after_ns", "max_spin_ns", "stay"),
                         [(0, 100_000, None), (300_000, 0, None), (300_000, 100_000, "0")])
def test_the_client_does_not_stay_runnable_for_a_short_reply_or_when_told_not_to(
        pair: tuple[socket.socket, socket.socket], monkeypatch: pytest.MonkeyPatch,
        after_ns: int, max_spin_ns: int, stay: str | None) -> None:
    """An immediate reply (however long a wait now and then takes: a Python peer's thread
    switch) is the spin rule's: the renderer never stays runnable for it (client_runs.cpp,
    "Staying runnable"), nor does a client that never spins (max_spin_ns=0) or one made with
    FENCELINE_STAY=0. Every reply arrives, in order."""
    a, b = pair
    if stay is not None:
        monkeypatch.setenv("FENCELINE_STAY", stay)
    end = _native.ClientSocket(b.fileno(), max_spin_ns, codec.RunReply)
    gate = SpinGate(1)
    peer = _answer_runs(a, 200, after_ns)
    try:
        _run_frames(end, gate, 200, after_ns)
    finally:
        peer.join(30)
    assert end.waits["stayed"] == 0 and end.waits["stayed_answered"] == 0
    assert gate.spinning() == 0


def test_the_client_stays_runnable_for_a_long_reply_while_its_core_is_wanted(
        pair: tuple[socket.socket, socket.socket]) -> None:
    """A reply that takes a model's run to come (300 us here, past the 100-us spin budget,
    and the service says so in the reply's total_us) is waited for by first giving the core
    away with sched_yield rather than sleeping at once, while another thread wants that core
    (the peer, on the same CPU, as a pool thread of the model would be); every reply arrives,
    in order."""
    a, b = pair
    cpu = min(os.sched_getaffinity(0))
    end = _native.ClientSocket(b.fileno(), 100_000, codec.RunReply)
    gate = SpinGate(1)
    frames = 200
    peer = _answer_runs(a, frames, 300_000, {cpu})
    mine = os.sched_getaffinity(0)
    os.sched_setaffinity(0, {cpu})
    try:
        _run_frames(end, gate, frames, 300_000)
    finally:
        os.sched_setaffinity(0, mine)
        peer.join(30)
    assert gate.spinning() == 0  # the slot of each stay was given back
    # From the first waits on, once the replies' average says "long": every wait but those.
    assert end.waits["stayed"] >= frames - 20, (end.waits["stayed"], end.waits["stayed_answered"])
    assert end.waits["stayed_answered"] <= end.waits["stayed"]


@pytest.mark.skipif(len(os.sched_getaffinity(0)) < 2, reason="needs two CPUs")
@pytest.mark.skipif(not hasattr(os, "SCHED_FIFO"), reason="needs SCHED_FIFO")
def test_the_client_stops_staying_runnable_where_its_core_is_idle(
        pair: tuple[socket.socket, socket.socket]) -> None:
    """The same long replies from a peer on another CPU: the renderer's yields find its core
    idle, so after 16 such stays it stays only in the spin rule's exploration windows (one
    2.1-ms window in sixteen). Its core is kept idle for it whatever else the machine runs: the
    renderer's thread runs there at real-time priority (SCHED_FIFO), so a yield finds nothing
    else to run unless another thread of that priority wants the core."""
    a, b = pair
    cpus = sorted(os.sched_getaffinity(0))
    end = _native.ClientSocket(b.fileno(), 100_000, codec.RunReply)
    gate = SpinGate(1)
    frames = 400
    mine, policy = os.sched_getaffinity(0), os.sched_getscheduler(0)
    try:  # this thread only; back at once: the peer's thread, started next, would inherit it
        os.sched_setscheduler(0, os.SCHED_FIFO, os.sched_param(1))
    except PermissionError:
        pytest.skip("SCHED_FIFO is not allowed here (CAP_SYS_NICE or RLIMIT_RTPRIO): the "
                    "renderer's core cannot be kept idle on a busy machine")
    os.sched_setscheduler(0, policy, os.sched_param(0))
    peer = _answer_runs(a, frames, 300_000, {cpus[1]})
    os.sched_setaffinity(0, {cpus[0]})
    try:
        os.sched_setscheduler(0, os.SCHED_FIFO, os.sched_param(1))
        _run_frames(end, gate, frames, 300_000)
    finally:
        os.sched_setscheduler(0, policy, os.sched_param(0))
        os.sched_setaffinity(0, mine)
        peer.join(30)
    assert 16 <= end.waits["stayed"] < frames // 3, end.waits["stayed"]


def _fill(a: socket.socket) -> None:
    a.setblocking(False)
    with pytest.raises(BlockingIOError):
        while True:
            a.send(b"x" * 512)
    a.setblocking(True)


def test_a_send_that_is_not_taken_in_time_raises_timeout_error(
        pair: tuple[socket.socket, socket.socket]) -> None:
    a, _ = pair
    _fill(a)
    start = time.monotonic()
    with pytest.raises(TimeoutError, match="within 150 ms"):
        _native.send_message(a.fileno(), b"one more", 150)
    assert time.monotonic() - start >= 0.14  # not before its time


def _connected_child(tmp_path: Path) -> tuple[socket.socket, subprocess.Popen[bytes]]:
    """A socket accepted from a child process that connected, then passed its end to a
    grandchild that lives on: the child's death does not hang the socket up."""
    path = tmp_path / "s"
    with socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET) as listener:
        listener.bind(str(path))
        listener.listen(1)
        child = subprocess.Popen([sys.executable, "-c", (
            "import os, select, socket, time\n"
            "s = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET)\n"
            f"s.connect({str(path)!r})\n"
            "if os.fork() == 0:  # lives until the test closes its end\n"
            "    p = select.poll(); p.register(s, select.POLLRDHUP); p.poll(30_000); os._exit(0)\n"
            "time.sleep(30)\n")])
        conn, _ = listener.accept()
    return conn, child


def test_the_peer_process_is_watched_beyond_its_socket(tmp_path: Path) -> None:
    conn, child = _connected_child(tmp_path)
    with conn:
        peer = _native.PeerProcess(conn.fileno())
        assert peer.pid == child.pid and peer.pidfd >= 0, peer.liveness
        assert not peer.exited()
        _fill(conn)
        outcome: list[object] = []

        def send() -> None:  # waits in the full socket until the process exits
            try:
                _native.send_message(conn.fileno(), b"late", 60_000, peer.pidfd)
            except OSError as e:
                outcome.append(e.errno)

        sender = threading.Thread(target=send)
        sender.start()
        time.sleep(0.1)
        child.kill()
        child.wait(10)
        sender.join(30)
        assert outcome == [errno.ESRCH]  # the process's exit, not the 60-s send timeout
        assert peer.exited()
        # The grandchild still holds the socket, so only the pidfd ends a blocked receive.
        data, fds, _ = _native.recv_message(conn.fileno(), MAX, MAX_FDS, 0, True, peer.pidfd)
        assert (data, fds) == (None, [])
        peer.close()
        peer.close()
        assert peer.pidfd == -1


def test_purging_a_connection_closes_the_fds_queued_on_it(
        pair: tuple[socket.socket, socket.socket]) -> None:
    a, b = pair
    before = set(os.listdir("/proc/self/fd"))
    for _ in range(3):
        r, w = os.pipe()
        socket.send_fds(a, [b"frame"], [r, w])
        os.close(r)
        os.close(w)
    socket.send_fds(a, [b"its own end"], [a.fileno()])
    assert _native.purge_messages(b.fileno()) == (4, 7)
    assert set(os.listdir("/proc/self/fd")) == before
    assert a.recv(16) == b""  # shut down: the peer sees the end
