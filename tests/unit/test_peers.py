"""The uid behind a TCP connection of this host, as the HTTP import check reads it."""

from __future__ import annotations

import os
import socket
import time
from collections.abc import Iterator
from contextlib import contextmanager

import pytest

from fenceline.api.peers import connection_uid


@contextmanager
def connection(family: socket.AddressFamily, listen: str, connect: str
               ) -> Iterator[tuple[socket.socket, socket.socket]]:  # fmt: skip
    srv = socket.socket(family)
    try:
        srv.bind((listen, 0))
    except OSError as e:
        srv.close()
        pytest.skip(f"cannot listen on {listen}: {e}")
    srv.listen()
    port = srv.getsockname()[1]
    client = socket.create_connection((connect, port))
    server_end, _ = srv.accept()
    srv.close()
    try:
        yield client, server_end
    finally:
        client.close()
        server_end.close()


@pytest.mark.parametrize(("family", "listen", "connect"), [
    (socket.AF_INET, "127.0.0.1", "127.0.0.1"),
    (socket.AF_INET6, "::1", "::1"),
    (socket.AF_INET6, "::", "127.0.0.1"),  # dual stack: the server sees ::ffff:127.0.0.1
])  # fmt: skip
def test_the_client_end_of_a_local_connection_gives_its_uid(
    family: socket.AddressFamily, listen: str, connect: str
) -> None:
    with connection(family, listen, connect) as (_, server_end):
        # What the service knows: the peer's address and its own, as ASGI passes them.
        peer, own = server_end.getpeername()[:2], server_end.getsockname()[:2]
        assert connection_uid(peer, own) == os.geteuid()


def test_unknown_and_malformed_ends_have_no_uid() -> None:
    assert connection_uid(("testclient", 50000), ("testserver", 80)) is None
    assert connection_uid(None, ("127.0.0.1", 80)) is None
    assert connection_uid(("127.0.0.1", 1), ("::1", 80)) is None
    assert connection_uid(("10.255.255.1", 40000), ("10.255.255.2", 8000)) is None


def test_a_closed_connection_is_never_taken_for_root() -> None:
    """Closing sockets (TIME_WAIT) are listed with uid 0: a lookup must not return them."""
    with connection(socket.AF_INET, "127.0.0.1", "127.0.0.1") as (client, server_end):
        peer, own = server_end.getpeername()[:2], server_end.getsockname()[:2]
        client.shutdown(socket.SHUT_RDWR)
        client.close()
        server_end.close()
        deadline = time.monotonic() + 5
        while time.monotonic() < deadline and connection_uid(peer, own) is not None:
            time.sleep(0.05)  # the client end leaves ESTABLISHED as the FINs go through
        assert connection_uid(peer, own) is None
