"""fenceline.ipc.refusals on real socket pairs: a refused peer reads its answer as the reply to
its first request, a silent one is closed after the grace period, and past the most held at
once a connection is closed without an answer, all on one thread."""

from __future__ import annotations

import socket
import threading
import time
from collections.abc import Iterator

import pytest

from fenceline import _native
from fenceline.errors import ResourceExhausted
from fenceline.ipc.refusals import Refusals
from fenceline.protocol import codec

pytestmark = pytest.mark.skipif(_native.PLATFORM != "posix", reason="Unix sockets")


@pytest.fixture
def refusals() -> Iterator[Refusals]:
    r = Refusals(grace_s=10, max_pending=2)
    yield r
    r.close()


def pair() -> tuple[socket.socket, socket.socket]:
    ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
    theirs.settimeout(5)
    return ours, theirs


def test_the_refusal_answers_the_first_request_then_the_end(refusals: Refusals) -> None:
    ours, theirs = pair()
    refusals.add(ours, ResourceExhausted("too many"))
    with theirs:
        theirs.send(codec.encode_json(codec.Kind.HELLO, 42, {"client": "t"}))
        reply = codec.decode(theirs.recv(codec.MAX_FRAME))
        assert (reply.kind, reply.request_id) == (codec.Kind.ERROR, 42)
        err = codec.decode_error(reply.body)
        assert (err.code, err.message) == ("resource_exhausted", "too many")
        assert theirs.recv(codec.MAX_FRAME) == b""


def test_a_silent_peer_is_closed_after_the_grace_period() -> None:
    refusals = Refusals(grace_s=0.3)
    ours, theirs = pair()
    start = time.monotonic()
    refusals.add(ours, ResourceExhausted("too many"))
    with theirs:
        assert theirs.recv(codec.MAX_FRAME) == b""
    assert 0.25 <= time.monotonic() - start < 5
    refusals.close()


def test_past_the_most_held_a_refusal_is_closed_unanswered_on_the_same_thread(
    refusals: Refusals
) -> None:
    before = threading.active_count()
    pairs = [pair() for _ in range(3)]
    for ours, _ in pairs:
        refusals.add(ours, ResourceExhausted("too many"))
    assert threading.active_count() == before + 1
    third = pairs[2][1]
    with third:
        assert third.recv(codec.MAX_FRAME) == b""  # closed at once, no answer
    assert refusals.dropped == 1
    for _, theirs in pairs[:2]:
        with theirs:
            theirs.send(codec.encode_json(codec.Kind.HELLO, 1, {}))
            assert codec.decode(theirs.recv(codec.MAX_FRAME)).kind == codec.Kind.ERROR
