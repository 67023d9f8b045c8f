"""uvicorn's h11 protocol with a deadline on each request's head (request line and headers).

uvicorn drops idle keep-alive connections but waits forever for a head that trickles in a byte
at a time, so a few hundred such "slowloris" connections hold sockets and fds for good. Here
each connection must finish a request head within ``timeout_s`` of opening, or of the previous
response; otherwise it is closed. Bodies are not timed here: a route reads its body itself.
"""

from __future__ import annotations

import asyncio
import logging

import h11
from uvicorn.protocols.http.h11_impl import H11Protocol

log = logging.getLogger("fenceline.http")


def header_timeout_protocol(timeout_s: float) -> type[H11Protocol]:
    """An ``H11Protocol`` class for ``uvicorn.Config(http=...)`` with this head deadline."""

    class HeadDeadlineProtocol(H11Protocol):
        _head_timer: asyncio.TimerHandle | None = None

        def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
            super().connection_made(transport)
            self._await_head()

        def connection_lost(self, exc: Exception | None) -> None:
            self._head_done()
            super().connection_lost(exc)

        def handle_events(self) -> None:
            super().handle_events()
            if self.conn.their_state is not h11.IDLE:  # the head is in (or the request failed)
                self._head_done()

        def on_response_complete(self) -> None:
            super().on_response_complete()
            if self.conn.their_state is h11.IDLE and not self.transport.is_closing():
                self._await_head()  # keep-alive: the next request's head gets its own deadline

        def _await_head(self) -> None:
            if self._head_timer is None:
                self._head_timer = self.loop.call_later(timeout_s, self._head_too_slow)

        def _head_done(self) -> None:
            if self._head_timer is not None:
                self._head_timer.cancel()
                self._head_timer = None

        def _head_too_slow(self) -> None:
            self._head_timer = None
            if self.conn.their_state is h11.IDLE and not self.transport.is_closing():
                log.info("closed an HTTP connection from %s: no request head within %g s",
                         self.client[0] if self.client else "?", timeout_s)
                self.transport.close()

    return HeadDeadlineProtocol
