"""fenceline._native.Acceptor, the Unix socket's accept loop, on a real listening socket: a
refused peer reads its answer as the reply to its first request; a uid in the refusal table is
refused without reaching Python, and counted; past its burst a uid's refusals wait for their
turn; a silent peer is closed after the grace period; past the most held at once a connection
is closed unanswered; stop() ends the loop and closes what it holds."""

from __future__ import annotations

import os
import socket
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from fenceline import _native
from fenceline.errors import PermissionDenied, ResourceExhausted
from fenceline.protocol import codec

pytestmark = pytest.mark.skipif(_native.PLATFORM != "posix", reason="Unix sockets")

TOO_MANY = codec.encode_error(0, ResourceExhausted("too many"))


@dataclass
class Loop:
    """An Acceptor run by a thread as the IPC server runs it; each peer handed to Python is
    refused with ``answer`` (None: kept open, unanswered)."""

    path: Path
    acceptor: Any
    answer: bytes | None = codec.encode_error(0, PermissionDenied("not you"))
    events: list[tuple[str, Any]] = field(default_factory=list)
    kept: list[socket.socket] = field(default_factory=list)

    def run(self) -> None:
        while (event := self.acceptor.next_event()) is not None:
            self.events.append(event)
            kind, value = event
            if kind == "peer":
                if self.answer is None:
                    self.kept.append(socket.socket(fileno=value[0]))
                else:
                    self.acceptor.refuse(value[0], self.answer)

    def connect(self) -> socket.socket:
        s = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        s.settimeout(5)
        s.connect(str(self.path))
        return s

    def kinds(self) -> list[str]:
        return [k for k, _ in self.events]


def start(tmp_path: Path, **kwargs: Any) -> Iterator[Loop]:
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET)
    listener.bind(str(tmp_path / "s.sock"))
    listener.listen(64)
    settings = {"grace_s": 10.0, "max_pending": 1024, "per_s": 1000.0, "burst": 64, "greet_s": 1.0,
                **kwargs}
    loop = Loop(tmp_path / "s.sock", _native.Acceptor(listener.fileno(), TOO_MANY, **settings))
    thread = threading.Thread(target=loop.run)
    thread.start()
    try:
        yield loop
    finally:
        loop.acceptor.stop()
        thread.join(5)
        assert not thread.is_alive()
        for s in loop.kept:
            s.close()
        listener.close()


@pytest.fixture
def loop(tmp_path: Path) -> Iterator[Loop]:
    yield from start(tmp_path, max_pending=2)


def refusal(s: socket.socket, request_id: int) -> tuple[int, str, str]:
    """Sends a HELLO; the (request id, code, message) of the ERROR that answers it, after
    which the service's end is closed."""
    s.send(codec.encode_json(codec.Kind.HELLO, request_id, {"client": "t"}))
    reply = codec.decode(s.recv(codec.MAX_FRAME))
    assert reply.kind == codec.Kind.ERROR
    err = codec.decode_error(reply.body)
    assert s.recv(codec.MAX_FRAME) == b""  # then the end
    return reply.request_id, err.code, err.message


def test_a_refusal_answers_the_first_request_with_its_id_then_the_end(loop: Loop) -> None:
    with loop.connect() as s:
        assert refusal(s, 42) == (42, "permission_denied", "not you")
    assert loop.kinds() == ["peer"]


def test_a_uid_in_the_table_is_refused_without_reaching_python_and_counted(loop: Loop) -> None:
    loop.acceptor.limit(os.geteuid(), codec.encode_error(0, ResourceExhausted("at the limit")))
    for i in range(20):
        with loop.connect() as s:
            assert refusal(s, i + 1) == (i + 1, "resource_exhausted", "at the limit")
    deadline = time.monotonic() + 5  # reported at most once a second
    while sum(n for k, v in loop.events if k == "refused" for _, _, n in v) < 20:
        assert time.monotonic() < deadline, loop.events
        time.sleep(0.05)
    assert "peer" not in loop.kinds()
    assert {(uid, code) for k, v in loop.events if k == "refused" for uid, code, _ in v} == {
        (os.geteuid(), ResourceExhausted.ipc_code)}
    loop.acceptor.limit(os.geteuid(), None)  # below the limit again: Python decides
    with loop.connect() as s:
        assert refusal(s, 99)[1] == "permission_denied"
    assert loop.kinds()[-1] == "peer"


def test_full_refuses_every_uid_until_cleared(loop: Loop) -> None:
    loop.acceptor.full(codec.encode_error(0, ResourceExhausted("full")))
    with loop.connect() as s:
        assert refusal(s, 1)[2] == "full"
    loop.acceptor.full(None)
    with loop.connect() as s:
        assert refusal(s, 2)[2] == "not you"


def test_a_silent_peer_is_closed_after_the_grace_period(tmp_path: Path) -> None:
    for loop in start(tmp_path, grace_s=0.3):
        s = loop.connect()
        s.settimeout(60)  # a peer never closed fails here
        start_s = time.monotonic()
        with s:
            assert s.recv(codec.MAX_FRAME) == b""
        assert time.monotonic() - start_s >= 0.25  # not before its grace period


def test_past_the_most_held_a_refusal_is_closed_unanswered(loop: Loop) -> None:
    loop.acceptor.limit(os.geteuid(), TOO_MANY)
    socks = [loop.connect() for _ in range(3)]
    third = socks[2]
    with third:
        assert third.recv(codec.MAX_FRAME) == b""  # closed at once, no answer
    assert loop.acceptor.dropped == 1
    assert loop.acceptor.held == 2
    for s in socks[:2]:
        with s:
            assert refusal(s, 1)[1] == "resource_exhausted"


def test_past_its_burst_a_uids_refusals_wait_for_their_turn(tmp_path: Path) -> None:
    # One answer in 1,000 s after a burst of 2: the next two wait, accepted but unanswered; a
    # burst's worth waits at most, so the fifth is closed at once.
    for loop in start(tmp_path, per_s=0.001, burst=2):
        loop.acceptor.limit(os.geteuid(), TOO_MANY)
        for i in range(2):
            with loop.connect() as s:
                assert refusal(s, i + 1)[1] == "resource_exhausted"
        waiting = [loop.connect() for _ in range(2)]
        for s in waiting:
            s.send(codec.encode_json(codec.Kind.HELLO, 3, {"client": "t"}))
            s.settimeout(0.3)
            with pytest.raises(TimeoutError):
                s.recv(codec.MAX_FRAME)
        assert (loop.acceptor.waiting, loop.acceptor.held) == (2, 0)
        with loop.connect() as fifth:
            assert fifth.recv(codec.MAX_FRAME) == b""
        assert loop.acceptor.dropped == 1
        loop.acceptor.stop()  # closes the waiting unanswered: their HELLO unread, a reset
        for s in waiting:
            s.settimeout(5)
            with s, pytest.raises(ConnectionResetError):
                s.recv(codec.MAX_FRAME)


def test_a_connection_handed_to_python_stays_open_and_stop_ends_the_loop(
    tmp_path: Path
) -> None:
    for loop in start(tmp_path):
        loop.answer = None
        with loop.connect() as s:
            deadline = time.monotonic() + 5
            while not loop.kept:
                assert time.monotonic() < deadline
                time.sleep(0.01)
            s.send(b"ping")
            assert loop.kept[0].recv(16) == b"ping"


def greeted_loop(tmp_path: Path) -> Iterator[Loop]:
    """A loop that greets this uid, with one reply per set of the one feature it knows (the
    reply names the set, as the service's does); peers handed over are kept."""
    for loop in start(tmp_path, greet_s=30.0):
        loop.answer = None
        loop.acceptor.greet(
            [codec.encode_json(codec.Kind.HELLO | codec.REPLY_BIT, 0, {"features": f})
             for f in ([], [codec.FEATURE_REPLY_FLAGS])],
            [codec.FEATURE_REPLY_FLAGS], 3, [os.geteuid()], 16, 64)
        yield loop


def peers(loop: Loop, n: int) -> list[tuple[Any, ...]]:
    deadline = time.monotonic() + 5
    while len(got := [v for k, v in loop.events if k == "peer"]) < n:
        assert time.monotonic() < deadline, loop.events
        time.sleep(0.01)
    return got


@pytest.mark.parametrize(("hello", "features"), [
    ({}, []),
    ({"client": "a"}, []),
    (codec.client_hello("renderer"), [codec.FEATURE_REPLY_FLAGS]),
    ({"features": ["later", codec.FEATURE_REPLY_FLAGS], "client": "b"},
     [codec.FEATURE_REPLY_FLAGS]),
    ({"client": "a", "features": ["unknown"]}, []),
    ({"client": "a", "features": []}, []),
])
def test_a_hello_is_answered_for_the_features_it_asks_and_python_hears_which(
    tmp_path: Path, hello: dict[str, Any], features: list[str]
) -> None:
    # The clients' own HELLO (features included) is answered here; a connection that closes
    # next never reaches Python, one that goes on reaches it with what it was answered for and
    # the client's name, which Python logs.
    for loop in greeted_loop(tmp_path):
        with loop.connect() as s:
            s.send(codec.encode_json(codec.Kind.HELLO, 7, hello))
            reply = codec.decode(s.recv(codec.MAX_FRAME))
        assert (reply.kind, reply.request_id) == (codec.Kind.HELLO | codec.REPLY_BIT, 7)
        assert codec.decode_json(reply.body) == {"features": features}
        with loop.connect() as s:
            s.send(codec.encode_json(codec.Kind.HELLO, 8, hello))
            s.recv(codec.MAX_FRAME)
            s.send(codec.encode_json(codec.Kind.DESCRIBE, 9, {}))
            (_, _, uid, bits, client), = peers(loop, 1)
            assert uid == os.geteuid() and bits == (1 if features else 0)
            assert client == hello.get("client", "?")
            frame = codec.decode(loop.kept[0].recv(codec.MAX_FRAME))  # left queued for Python
            assert (frame.kind, frame.request_id) == (codec.Kind.DESCRIBE, 9)
        assert loop.acceptor.greeted == 2


@pytest.mark.parametrize("body", [
    b'{"client":"a","features":["reply_flags"],"x":1}',  # a field Python refuses
    b'{"client":"a","features":["a","b","c","d"]}',  # more features than Python allows
    b'{"client": "a"}',  # not as the clients write it: Python reads it
    b'{"client":"a","client":"b"}',
    b'{"client":"a","features":"reply_flags"}',
    b'{"client":"\\u00e9"}',
    b'{"client":"a"} ',
])
def test_any_other_hello_goes_to_python_unanswered_and_still_queued(
    tmp_path: Path, body: bytes
) -> None:
    for loop in greeted_loop(tmp_path):
        with loop.connect() as s:
            s.send(codec.encode(codec.Kind.HELLO, 5, body))
            (_, _, _, bits, client), = peers(loop, 1)
            assert bits == 0 and client is None  # Python answers and logs it
            frame = codec.decode(loop.kept[0].recv(codec.MAX_FRAME))
            assert (frame.kind, frame.request_id, frame.body) == (codec.Kind.HELLO, 5, body)
        assert loop.acceptor.greeted == 0
