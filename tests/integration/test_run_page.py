"""The run page (docs/ipc.md, "The run page"): a RUN and its reply in shared memory beside the
Unix socket. A raw client here speaks it by hand against a real service, so that the tests see
what travels where; the Python and C clients use it on their own (every run test exercises it).
"""

from __future__ import annotations

import fcntl
import mmap
import os
import socket
import struct
import time
from collections.abc import Callable

import numpy as np
import pytest

from fenceline import _native
from fenceline.client import Fence, IpcClient, ServiceError, SharedFrame, UsageError, View
from fenceline.client.views import session_body
from fenceline.protocol import codec
from tests.integration.test_interop_ipc import diff
from tests.support.helpers import open_session
from tests.support.service import Service
from tests.support.waiting import wait_until

pytestmark = pytest.mark.skipif(
    not hasattr(_native, "RunPage"), reason="the run page needs a Unix socket and memfd seals")

# The layout of native/common/run_page.h (host order: little-endian here).
REQUEST = struct.Struct("<IIII16sQQ")  # seq, kind, request_id, timeout_ms, session, wait, signal
REPLY = struct.Struct("<IIIIQII")  # seq, status, request_id, wait_us, signal, infer_us, total_us
REPLY_AT, SERVICE_SLEEPING_AT, CLIENT_SLEEPING_AT = 64, 128, 192
REPLY_FLAGS_AT = 96  # the reply's flags (FL_WIRE_REPLY_*), after its total_us
ANSWERED, ON_SOCKET = 0, 1


def sealed_page(size: int = 4096, seals: int = 0) -> int:
    fd = os.memfd_create("test-run-page", os.MFD_ALLOW_SEALING)
    os.ftruncate(fd, size)
    if seals:
        fcntl.fcntl(fd, fcntl.F_ADD_SEALS, seals)
    return fd


def shrink_sealed(size: int = 4096) -> int:
    return sealed_page(size, fcntl.F_SEAL_SHRINK)


class RawPageClient:
    """A client that speaks the socket and the page by hand."""

    def __init__(self, service: Service) -> None:
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        self.sock.connect(str(service.socket))
        self.sock.settimeout(10)
        self.rid = 100
        self.seq = 0
        self.page: mmap.mmap | None = None
        self.keep: tuple[object, ...] = ()  # what a raw session's objects live in

    def call(self, kind: int, body: dict[str, object], fds: list[int] | None = None
             ) -> codec.Frame:
        self.rid += 1
        socket.send_fds(self.sock, [codec.encode_json(kind, self.rid, body)], fds or [])
        return self.recv()

    def recv(self) -> codec.Frame:
        while True:
            frame = codec.decode(self.sock.recv(codec.MAX_FRAME))
            if frame.kind != codec.Kind.NUDGE:
                return frame

    def open_page(self) -> codec.Frame:
        fd = shrink_sealed()
        try:
            reply = self.call(codec.Kind.OPEN_RUN_PAGE, {}, [fd])
            if reply.kind != codec.Kind.ERROR:
                self.page = mmap.mmap(fd, 4096)
            return reply
        finally:
            os.close(fd)

    def post(self, session: bytes, wait: int, signal: int = 0, kind: int = codec.Kind.RUN) -> int:
        assert self.page is not None
        self.seq += 1
        self.rid += 1
        struct.pack_into("<IIIQ", self.page, 4, kind, self.rid, 0xFFFFFFFF, 0)  # seq last
        self.page[16:32] = session
        struct.pack_into("<QQ", self.page, 32, wait, signal)
        # One 4-byte store (struct.pack_into zeroes its bytes first: the service would see a
        # request_seq of 0 in between, a new RUN to it). Python has no fence between that store
        # and a load of service_sleeping: a NUDGE every time (one too many is dropped).
        memoryview(self.page).cast("I")[0] = self.seq
        self.sock.send(codec.encode(codec.Kind.NUDGE, 0))
        return self.rid

    def reply(self, timeout_s: float = 10) -> tuple[int, ...]:
        """The page's reply to the last RUN posted, waited for by polling."""
        assert self.page is not None
        end = time.monotonic() + timeout_s
        while time.monotonic() < end:
            got = REPLY.unpack_from(self.page, REPLY_AT)
            if got[0] == self.seq:
                return got
            time.sleep(0.0005)
        raise AssertionError("no reply on the run page")

    def close(self) -> None:
        if self.page is not None:
            self.page.close()
        self.sock.close()

    def __enter__(self) -> RawPageClient:
        return self

    def __exit__(self, *_: object) -> None:
        self.close()


def expect_error(frame: codec.Frame, code: str) -> str:
    assert frame.kind == codec.Kind.ERROR, frame
    err = codec.decode_error(frame.body)
    assert err.code == code, err
    return err.message


def test_a_run_posted_on_the_page_is_answered_there_with_no_frame_on_the_socket(
        service: Service) -> None:
    with IpcClient(service.socket) as setup:
        s = open_session(setup, "add_64x64", [1, 3, 64, 64])
        with RawPageClient(service) as raw:
            assert codec.decode_json(raw.open_page().body) == {"size": 4096}
            # The session belongs to `setup`'s connection: the page's owner is another, so the
            # service answers "not found" on the socket and says so on the page.
            raw.post(bytes.fromhex(s.session_id), 1)
            assert raw.reply()[1] == ON_SOCKET
            expect_error(raw.recv(), "not_found")

    with RawPageClient(service) as raw:
        assert raw.open_page().kind == codec.Kind.OPEN_RUN_PAGE | codec.REPLY_BIT
        sid, x, y, wait = raw_session(raw, service)
        for v in range(1, 51):
            x[:] = v
            wait(v)
            rid = raw.post(sid, v)
            seq, status, request_id, _, signalled, _, total_us = raw.reply()
            assert (seq, status, request_id, signalled) == (raw.seq, ANSWERED, rid, v)
            assert total_us >= 0 and np.all(y == v + 1)
        # Nothing came on the socket for any of those fifty frames.
        raw.sock.setblocking(False)
        with pytest.raises(BlockingIOError):
            while True:
                assert codec.decode(raw.sock.recv(codec.MAX_FRAME)).kind == codec.Kind.NUDGE


def raw_session(raw: RawPageClient, service: Service
                ) -> tuple[bytes, np.ndarray, np.ndarray, Callable[[int], None]]:
    """A 64x64 add session made over raw's own connection: its id, input, output, and a way to
    signal its input fence."""
    nbytes = 3 * 64 * 64 * 4
    frame, ready, done = SharedFrame(2 * nbytes), Fence(), Fence()
    raw.keep = (frame, ready, done)
    mem = raw.call(codec.Kind.IMPORT_MEMORY, {"size_bytes": 0, "offset_bytes": 0,
                                              "access": "read_write", "handle_type": "host_fd"},
                   [frame.fd])
    wid = raw.call(codec.Kind.IMPORT_FENCE, {"fence_type": "host_timeline"}, [ready.fd])
    did = raw.call(codec.Kind.IMPORT_FENCE, {"fence_type": "host_timeline"}, [done.fd])
    mid, wait_id, done_id = (codec.decode_json(f.body)["id"] for f in (mem, wid, did))
    shape = [1, 3, 64, 64]
    made = raw.call(codec.Kind.CREATE_SESSION, session_body(
        "add_64x64", {"x": View(mid, "FP32", shape)}, {"y": View(mid, "FP32", shape, nbytes)},
        wait_id, done_id))
    sid = codec.decode_json(made.body)["id"]
    return (bytes.fromhex(sid), frame.array(np.float32, shape),
            frame.array(np.float32, shape, nbytes), ready.signal)


def test_a_page_run_the_engine_refuses_is_answered_on_the_socket(
        service: Service) -> None:
    with RawPageClient(service) as raw:
        raw.open_page()
        sid, x, y, wait = raw_session(raw, service)
        x[:] = 3
        raw.post(sid, 1)  # the input fence is not there yet: the engine waits for it
        wait(1)
        assert raw.reply()[1] == ANSWERED and np.all(y == 4)  # and answers on the page
        raw.post(sid, 1)  # not above the output fence's value: an error, on the socket
        assert raw.reply()[1] == ON_SOCKET
        assert "not above" in expect_error(raw.recv(), "conflict")
        for garbage in (b"\xff" * 16, os.urandom(16)):
            raw.post(garbage, 7)
            assert raw.reply()[1] == ON_SOCKET
            expect_error(raw.recv(), "not_found")
        raw.post(sid, 2, kind=0x7777)  # a kind that is no RUN
        assert raw.reply()[1] == ON_SOCKET
        expect_error(raw.recv(), "invalid_request")
        wait(2)
        raw.post(sid, 2)
        assert raw.reply()[1] == ANSWERED and np.all(y == 4)


@pytest.mark.parametrize("make, why", [
    (lambda: sealed_page(), "sealed against shrinking"),
    (lambda: shrink_sealed(1024), "must hold 4096 bytes"),
    (None, "carries the page's memfd"),
])
def test_a_page_that_could_shrink_or_is_too_small_is_refused(
        service: Service, make: Callable[[], int] | None, why: str) -> None:
    with RawPageClient(service) as raw:
        fds = [make()] if make is not None else []
        try:
            assert why in expect_error(raw.call(codec.Kind.OPEN_RUN_PAGE, {}, fds),
                                       "invalid_argument")
        finally:
            for fd in fds:
                os.close(fd)
        assert raw.open_page().kind == codec.Kind.OPEN_RUN_PAGE | codec.REPLY_BIT
        expect_error(raw.call(codec.Kind.OPEN_RUN_PAGE, {}, [shrink_sealed()]), "conflict")


def test_nudges_are_read_and_dropped_and_leave_nothing_behind(service: Service) -> None:
    fds_before, _ = service.settled()
    with RawPageClient(service) as raw:
        raw.open_page()
        for _ in range(2000):
            raw.sock.send(codec.encode(codec.Kind.NUDGE, 0))
        socket.send_fds(raw.sock, [codec.encode(codec.Kind.NUDGE, 0)], [shrink_sealed()])
        hello = raw.call(codec.Kind.HELLO, {"client": "nudger"})
        assert hello.kind == codec.Kind.HELLO | codec.REPLY_BIT and hello.request_id == raw.rid
    wait_until(lambda: sorted(service.fds()) == fds_before,
               what=lambda: diff(service.fds(), fds_before))


def test_the_python_client_runs_on_the_page_one_at_a_time_and_pipelined(
        service: Service) -> None:
    with IpcClient(service.socket) as c:
        s = open_session(c, "add_64x64", [1, 3, 64, 64])
        for v in range(1, 21):
            s.x[:] = v
            s.wait.signal(v)
            assert c.run(s.session_id, v).signal_value == v and np.all(s.y == v + 1)
        assert c._end.has_page
        # Pipelined RUNs take the page's slots, answered in order (test_run_page_ring.py);
        # run() then uses the page again.
        posted = c.run_page_counts["posted"]
        s.wait.signal(22)
        first, second = c.send_run(s.session_id, 21), c.send_run(s.session_id, 22)
        assert c.recv_run_reply(first).signal_value == 21
        assert c.recv_run_reply(second).signal_value == 22
        assert c.run_page_counts["posted"] == posted + 2
        s.wait.signal(23)
        assert c.run(s.session_id, 23).signal_value == 23


def test_the_python_client_refuses_a_malformed_session_id_and_keeps_running(
        service: Service) -> None:
    """A malformed id is the caller's mistake, told before anything is sent; many well-formed
    ids on one connection each reach the service as they are, and the session still runs."""
    with IpcClient(service.socket) as c:
        s = open_session(c, "add_64x64", [1, 3, 64, 64])
        for bad in ("xyz", s.session_id[:-2], 12, None, [s.session_id]):
            with pytest.raises(UsageError, match="32 hex digits"):
                c.run(bad, 1)  # type: ignore[arg-type]
            with pytest.raises(UsageError, match="32 hex digits"):
                c.send_run(bad, 1)  # type: ignore[arg-type]
        for k in range(100):
            with pytest.raises(ServiceError) as e:
                c.run(f"{k:032x}", 1, timeout_s=0.1)
            assert e.value.code == "not_found"
        for v in range(1, 4):
            s.x[:] = 10 * v
            s.wait.signal(v)
            assert c.run(s.session_id, v).signal_value == v and np.all(s.y == 10 * v + 1)
