"""Refused Unix socket connections, answered without a thread each: a flood of connections past
the limits (fenceline.ipc.limits) must not become a flood of threads.

A refused peer gets its answer as the reply to its first request (so the client reads it where
it reads its HELLO reply), then the service's end is shut down for writing and read until the
peer closes: closing a Unix socket with unread data would reset the peer before it read the
answer. Each refusal is held for at most ``GRACE_S``; at most ``MAX_PENDING`` are held at once,
and one past that is closed at once without an answer."""

from __future__ import annotations

import contextlib
import logging
import os
import selectors
import socket
import threading
import time
from collections import deque
from dataclasses import dataclass

from fenceline.errors import FencelineError
from fenceline.protocol import codec

log = logging.getLogger("fenceline.ipc")

GRACE_S = 1.0
MAX_PENDING = 1024


@dataclass
class _Refused:
    conn: socket.socket
    err: FencelineError
    deadline: float
    answered: bool = False


class Refusals:
    """One thread, started with the first refusal, that answers and closes refused connections;
    ``close()`` closes what it still holds."""

    def __init__(self, grace_s: float = GRACE_S, max_pending: int = MAX_PENDING) -> None:
        self.grace_s = grace_s
        self.max_pending = max_pending
        self._incoming: deque[_Refused] = deque()
        self._lock = threading.Lock()
        self._wake_r, self._wake_w = os.pipe2(os.O_NONBLOCK | os.O_CLOEXEC)
        # Made now: a refusal may come when the process has no fd to spare (fd exhaustion).
        self._sel = selectors.DefaultSelector()
        self._sel.register(self._wake_r, selectors.EVENT_READ, None)
        self._thread: threading.Thread | None = None
        self._closed = False
        self.dropped = 0  # refused past max_pending: closed without an answer

    def add(self, conn: socket.socket, err: FencelineError) -> None:
        """Owns ``conn`` from here on."""
        conn.setblocking(False)
        with self._lock:
            if self._closed:
                conn.close()
                return
            self._incoming.append(_Refused(conn, err, time.monotonic() + self.grace_s))
            if self._thread is None:
                self._thread = threading.Thread(
                    target=self._loop, name="fenceline-ipc-refusals", daemon=True)
                self._thread.start()
        with contextlib.suppress(BlockingIOError):
            os.write(self._wake_w, b"x")

    def close(self) -> None:
        with self._lock:
            self._closed = True
            thread = self._thread
        with contextlib.suppress(OSError):
            os.write(self._wake_w, b"x")
        if thread is not None:
            thread.join(5)
        with self._lock:
            while self._incoming:
                self._incoming.popleft().conn.close()
        if thread is None or not thread.is_alive():  # else the fds stay: the loop uses them
            self._sel.close()
            for fd in (self._wake_r, self._wake_w):
                with contextlib.suppress(OSError):
                    os.close(fd)

    def _loop(self) -> None:
        sel = self._sel
        held: dict[int, _Refused] = {}
        try:
            while True:
                with self._lock:
                    if self._closed:
                        break
                    incoming = list(self._incoming)
                    self._incoming.clear()
                for r in incoming:
                    if len(held) >= self.max_pending:
                        self.dropped += 1
                        r.conn.close()
                        continue
                    try:
                        sel.register(r.conn, selectors.EVENT_READ, r)
                    except (OSError, ValueError):
                        r.conn.close()
                        continue
                    held[r.conn.fileno()] = r
                    if not self._step(r):  # a first request already there is answered at once
                        self._drop(sel, held, r)
                now = time.monotonic()
                timeout = min((r.deadline for r in held.values()), default=now + 60) - now
                for key, _ in sel.select(max(0.0, timeout)):
                    if key.data is None:
                        with contextlib.suppress(OSError):
                            while os.read(self._wake_r, 512):
                                pass
                    elif not self._step(key.data):
                        self._drop(sel, held, key.data)
                now = time.monotonic()
                for r in [r for r in held.values() if r.deadline <= now]:
                    self._drop(sel, held, r)
        except Exception:
            log.exception("the IPC refusal thread failed; refused connections are closed unanswered")
        finally:
            for r in list(held.values()):
                self._drop(sel, held, r)

    @staticmethod
    def _drop(sel: selectors.BaseSelector, held: dict[int, _Refused], r: _Refused) -> None:
        with contextlib.suppress(KeyError, ValueError, OSError):
            sel.unregister(r.conn)
        held.pop(r.conn.fileno(), None)
        r.conn.close()

    @staticmethod
    def _step(r: _Refused) -> bool:
        """Reads what the peer sent; answers its first request. False once the peer is done (or
        failed): the connection can be closed."""
        try:
            while True:
                data = r.conn.recv(codec.MAX_FRAME)  # fds sent with it are closed by the kernel
                if not data:
                    return False
                if not r.answered:
                    r.answered = True
                    request_id = 0
                    with contextlib.suppress(FencelineError):
                        request_id = codec.decode(data).request_id
                    r.conn.send(codec.encode_error(request_id, r.err))
                    r.conn.shutdown(socket.SHUT_WR)
        except BlockingIOError:
            return True
        except OSError:
            return False
