"""uvicorn's h11 protocol with deadlines on the slow parts of a request a client controls.

uvicorn drops idle keep-alive connections but waits forever for a head that trickles in a byte
at a time, or for a body that stops halfway, so a few hundred such "slowloris" connections
hold sockets and fds for good. Here a connection must finish each request head within
``head_timeout_s`` of opening, or of the previous response, and a body may not pause for
longer than ``body_idle_s``; otherwise the connection is closed.
"""

from __future__ import annotations

import asyncio
import logging

import h11
from uvicorn.protocols.http.h11_impl import H11Protocol

log = logging.getLogger("fenceline.http")


def deadline_protocol(head_timeout_s: float, body_idle_s: float) -> type[H11Protocol]:
    """An ``H11Protocol`` class for ``uvicorn.Config(http=...)`` with these deadlines."""

    class DeadlineProtocol(H11Protocol):
        _head_timer: asyncio.TimerHandle | None = None
        _body_timer: asyncio.TimerHandle | None = None

        def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
            super().connection_made(transport)
            self._await_head()

        def connection_lost(self, exc: Exception | None) -> None:
            self._head_done()
            self._body_done()
            super().connection_lost(exc)

        def data_received(self, data: bytes) -> None:
            super().data_received(data)
            if self.conn.their_state is h11.SEND_BODY:
                self._await_body()  # any bytes restart the body's clock

        def handle_events(self) -> None:
            super().handle_events()
            state = self.conn.their_state
            if state is not h11.IDLE:  # the head is in (or the request failed)
                self._head_done()
            if state is h11.SEND_BODY:
                if self._body_timer is None:
                    self._await_body()
            else:
                self._body_done()

        def on_response_complete(self) -> None:
            super().on_response_complete()
            if self.conn.their_state is h11.IDLE and not self.transport.is_closing():
                self._await_head()  # keep-alive: the next request's head gets its own deadline

        def _await_head(self) -> None:
            if self._head_timer is None:
                self._head_timer = self.loop.call_later(head_timeout_s, self._head_too_slow)

        def _head_done(self) -> None:
            if self._head_timer is not None:
                self._head_timer.cancel()
                self._head_timer = None

        def _await_body(self) -> None:
            self._body_done()
            self._body_timer = self.loop.call_later(body_idle_s, self._body_too_slow)

        def _body_done(self) -> None:
            if self._body_timer is not None:
                self._body_timer.cancel()
                self._body_timer = None

        def _close(self, why: str) -> None:
            log.info("closed an HTTP connection from %s: %s",
                     self.client[0] if self.client else "?", why)  # fmt: skip
            self.transport.close()

        def _head_too_slow(self) -> None:
            self._head_timer = None
            if self.conn.their_state is h11.IDLE and not self.transport.is_closing():
                self._close(f"no request head within {head_timeout_s:g} s")

        def _body_too_slow(self) -> None:
            self._body_timer = None
            if self.conn.their_state is not h11.SEND_BODY or self.transport.is_closing():
                return
            if self.flow.read_paused:  # the service is not reading: the client is not to blame
                self._await_body()
                return
            self._close(f"its request body paused for over {body_idle_s:g} s")

    return DeadlineProtocol
