"""The run page's slots (docs/ipc.md, "The run page"): several RUNs in flight on the page, served
in their order, against a real service. The Python client posts what it sends ahead there; a raw
client writes the page by hand, garbage included."""

from __future__ import annotations

import mmap
import os
import struct
import time
from collections.abc import Callable

import numpy as np
import pytest

from fenceline import _native
from fenceline.client import IpcClient, ServiceError
from fenceline.protocol import codec
from tests.integration.test_run_page import (
    ANSWERED,
    ON_SOCKET,
    RawPageClient,
    expect_error,
    raw_session,
    shrink_sealed,
)
from tests.support.helpers import open_session
from tests.support.service import Service

pytestmark = pytest.mark.skipif(
    not hasattr(_native, "RunPage"), reason="the run page needs a Unix socket and memfd seals")

SLOTS = 8
REPLY = struct.Struct("<IIIIQ")  # seq, status, request_id, wait_us, signal


def slot_at(seq: int, slots: int = SLOTS) -> int:
    """Where RUN ``seq`` lives: slot 0 first, the sleeping words, then slots 1.."""
    k = seq % slots
    return 0 if k == 0 else 256 + (k - 1) * 128


class RingClient(RawPageClient):
    """RawPageClient with a page of slots, posting in any slot by hand."""

    def open_ring(self, slots: int = SLOTS) -> dict[str, object]:
        fd = shrink_sealed()
        try:
            reply = self.call(codec.Kind.OPEN_RUN_PAGE, {"slots": slots}, [fd])
            self.page = mmap.mmap(fd, 4096)
            return codec.decode_json(reply.body)
        finally:
            os.close(fd)

    def post_at(self, seq: int, at: int, session: bytes, wait: int, signal: int = 0,
                kind: int = codec.Kind.RUN) -> int:
        assert self.page is not None
        self.rid += 1
        struct.pack_into("<IIIQ", self.page, at + 4, kind, self.rid, 0xFFFFFFFF, 0)
        self.page[at + 16:at + 32] = session
        struct.pack_into("<QQ", self.page, at + 32, wait, signal)
        memoryview(self.page)[at:at + 4].cast("I")[0] = seq  # one store, the seq last
        self.sock.send(codec.encode(codec.Kind.NUDGE, 0))
        return self.rid

    def reply_at(self, seq: int) -> tuple[int, ...] | None:
        assert self.page is not None
        got = REPLY.unpack_from(self.page, slot_at(seq) + 64)
        return got if got[0] == seq else None

    @staticmethod
    def wait_for(check: Callable[[], tuple[int, ...] | None], timeout_s: float = 10
                 ) -> tuple[int, ...]:
        end = time.monotonic() + timeout_s
        while time.monotonic() < end:
            got = check()
            if got is not None:
                return got
            time.sleep(0.0005)
        raise AssertionError("no reply on the run page")


def test_runs_sent_ahead_are_posted_in_the_slots_and_answered_there_in_order(
        service: Service) -> None:
    with IpcClient(service.socket) as c:
        depth = 3
        sessions = [open_session(c, "add_64x64", [1, 3, 64, 64]) for _ in range(depth)]
        in_flight: list[tuple[int, int]] = []  # (request id, frame)
        for v in range(1, 61):
            s = sessions[v % depth]
            if len(in_flight) == depth:  # the frame of these buffers must be back first
                rid, frame = in_flight.pop(0)
                assert c.recv_run_reply(rid).signal_value == frame
                assert np.all(sessions[frame % depth].y == frame + 1)
            s.x[:] = v
            s.wait.signal(v)
            in_flight.append((c.send_run(s.session_id, v), v))
        for rid, frame in in_flight:
            assert c.recv_run_reply(rid).signal_value == frame
            assert np.all(sessions[frame % depth].y == frame + 1)
        # Every one of the sixty went on the page and was answered there, none on the socket.
        assert c.run_page_counts == {"posted": 60, "answered": 60}
        # run() goes on as before.
        s = sessions[0]
        s.wait.signal(63)
        assert c.run(s.session_id, 63).signal_value == 63


def test_a_refusal_in_the_middle_of_the_ring_is_answered_in_its_turn(service: Service) -> None:
    with IpcClient(service.socket) as c:
        s = open_session(c, "add_64x64", [1, 3, 64, 64])
        other = open_session(c, "add_64x64", [1, 3, 64, 64])
        unknown = "ab" * 16
        s.wait.signal(3)
        other.wait.signal(1)
        s.x[:] = 5
        rids = [c.send_run(s.session_id, 1), c.send_run(unknown, 1), c.send_run(s.session_id, 2),
                c.send_run(s.session_id, 2),  # not above the output fence's value: conflict
                c.send_run(other.session_id, 1), c.send_run(s.session_id, 3)]
        assert c.recv_run_reply(rids[0]).signal_value == 1
        with pytest.raises(ServiceError) as e:
            c.recv_run_reply(rids[1])
        # Worded as the same refusal of a RUN on the socket or of run().
        assert (e.value.code, e.value.message) == ("not_found", f"no session with id '{unknown}'")
        assert c.recv_run_reply(rids[2]).signal_value == 2
        with pytest.raises(ServiceError) as e:
            c.recv_run_reply(rids[3])
        assert e.value.code == "conflict"
        assert e.value.message == "signal_value 2 is not above the output fence's value 2"
        assert c.recv_run_reply(rids[4]).signal_value == 1
        assert c.recv_run_reply(rids[5]).signal_value == 3 and np.all(s.y == 6)
        assert c.run_page_counts == {"posted": 6, "answered": 4}
        with pytest.raises(ServiceError) as e:
            c.run(unknown, 1)
        assert (e.value.code, e.value.message) == ("not_found", f"no session with id '{unknown}'")


def test_runs_past_a_full_ring_go_on_the_socket_and_replies_keep_their_order(
        service: Service) -> None:
    with IpcClient(service.socket) as c:
        s = open_session(c, "add_64x64", [1, 3, 64, 64])
        s.x[:] = 1
        total = SLOTS + 4
        # All sent before the first input is there: the ring fills, the rest take the socket.
        rids = [c.send_run(s.session_id, v) for v in range(1, total + 1)]
        assert c.run_page_counts == {"posted": SLOTS, "answered": 0}
        s.wait.signal(total)
        for v, rid in enumerate(rids[:SLOTS + 1], 1):
            assert c.recv_run_reply(rid).signal_value == v
        # A socket RUN in flight: the next goes on the socket too, behind it.
        rids.append(c.send_run(s.session_id, total + 1))
        assert c.run_page_counts["posted"] == SLOTS
        s.wait.signal(total + 1)
        for v, rid in enumerate(rids[SLOTS + 1:], SLOTS + 2):
            assert c.recv_run_reply(rid).signal_value == v
        assert np.all(s.y == 2)
        # Nothing in flight: the page again.
        s.wait.signal(total + 3)
        a, b = c.send_run(s.session_id, total + 2), c.send_run(s.session_id, total + 3)
        assert [c.recv_run_reply(a).signal_value, c.recv_run_reply(b).signal_value] == [
            total + 2, total + 3]
        assert c.run_page_counts == {"posted": SLOTS + 2, "answered": SLOTS + 2}


def test_the_service_serves_the_slots_it_answered_and_a_client_that_asks_none_slot_0(
        service: Service) -> None:
    with RingClient(service) as raw:
        assert raw.open_ring(1000) == {"size": 4096, "slots": SLOTS}  # at most RUN_PAGE_SLOTS
    with RingClient(service) as raw:
        assert raw.open_ring(3) == {"size": 4096, "slots": 2}  # a power of two
    with RingClient(service) as raw:
        for bad in (0, -1, "8", 1.5, True):
            fd = shrink_sealed()
            try:
                expect_error(raw.call(codec.Kind.OPEN_RUN_PAGE, {"slots": bad}, [fd]),
                             "invalid_argument")
            finally:
                os.close(fd)


def test_garbage_seqs_and_slots_never_serve_a_run_twice_nor_stop_the_service(
        service: Service) -> None:
    with RingClient(service) as raw:
        raw.open_ring()
        sid, x, y, wait = raw_session(raw, service)
        x[:] = 2
        wait(100)
        # RUN 2 before RUN 1, RUN 1 in RUN 3's slot, a seq far ahead: none is taken.
        raw.post_at(2, slot_at(2), sid, 1, 2)
        raw.post_at(1, slot_at(3), sid, 1, 1)
        raw.post_at(9, slot_at(5), sid, 1, 9)
        # RUN 1 in its slot: then RUN 2, posted already, in its turn.
        raw.post_at(1, slot_at(1), sid, 1, 1)
        for seq, signal in ((1, 1), (2, 2)):
            got = raw.wait_for(lambda seq=seq: raw.reply_at(seq))
            assert got[1] == ANSWERED and got[4] == signal
        # RUN 1 and 2 written again: taken never again (the service waits for RUN 3).
        raw.post_at(1, slot_at(1), sid, 1, 50)
        raw.post_at(2, slot_at(2), sid, 1, 51)
        raw.post_at(3, slot_at(3), sid, 1, 3)
        got = raw.wait_for(lambda: raw.reply_at(3))
        assert got[1] == ANSWERED and got[4] == 3
        assert raw.reply_at(1)[4] == 1 and raw.reply_at(2)[4] == 2  # type: ignore[index]
        # Random bytes over the whole page, the sleeping words and the slots' replies too.
        assert raw.page is not None
        for _ in range(50):
            raw.page[:] = os.urandom(4096)
            raw.sock.send(codec.encode(codec.Kind.NUDGE, 0))
        # The connection still answers, and ran its session three times, once per RUN taken
        # (a random page holds RUN 4 in its slot once in 2**32).
        described = raw.call(codec.Kind.DESCRIBE, {"kind": "session", "id": sid.hex()})
        assert codec.decode_json(described.body)["runs"] == 3
        hello = raw.call(codec.Kind.HELLO, {"client": "after garbage"})
        assert hello.kind == codec.Kind.HELLO | codec.REPLY_BIT
    # The service still serves others.
    with IpcClient(service.socket) as c:
        s = open_session(c, "add_64x64", [1, 3, 64, 64])
        s.wait.signal(1)
        assert c.run(s.session_id, 1).signal_value == 1


def test_a_page_run_of_another_kind_is_refused_on_the_socket_in_the_ring(
        service: Service) -> None:
    with RingClient(service) as raw:
        raw.open_ring()
        sid, x, y, wait = raw_session(raw, service)
        wait(1)
        assert raw.page is not None
        raw.post_at(1, slot_at(1), sid, 1, 1)
        rid = raw.post_at(2, slot_at(2), sid, 1, 2, kind=codec.Kind.HELLO)  # not carried there
        raw.post_at(3, slot_at(3), sid, 1, 3)
        error = raw.recv()
        assert error.request_id == rid
        assert expect_error(error, "invalid_request") == (
            "the run page carries RUN and RUN_ASYNC, not kind 0x0001")
        assert raw.wait_for(lambda: raw.reply_at(1))[1] == ANSWERED
        assert raw.wait_for(lambda: raw.reply_at(2))[1] == ON_SOCKET
        assert raw.wait_for(lambda: raw.reply_at(3))[4] == 3


def test_a_socket_run_sent_after_a_page_run_is_served_after_it(service: Service) -> None:
    """The service, asleep, is woken by the page's NUDGE and finds the socket's RUN there
    first: it serves the page's RUN first all the same, or the socket's, signalling a higher
    value, would make the page's a conflict."""
    with RingClient(service) as raw:
        raw.open_ring()
        sid, x, y, wait = raw_session(raw, service)
        x[:] = 4
        wait(1)
        for k in range(1, 41):
            raw.post_at(k, slot_at(k), sid, 1, 2 * k - 1)  # and its NUDGE
            raw.rid += 1
            raw.sock.send(codec.encode_run(raw.rid, codec.Run(sid, 1, 2 * k, None, 0)))
            reply = raw.recv()
            assert (reply.kind, reply.request_id) == (codec.Kind.RUN | codec.REPLY_BIT, raw.rid)
            assert codec.decode_run_reply(reply.body).signal_value == 2 * k
            got = raw.wait_for(lambda k=k: raw.reply_at(k))
            assert (got[1], got[4]) == (ANSWERED, 2 * k - 1)
        assert np.all(y == 5)
