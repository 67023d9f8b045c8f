"""Abandons a model run whose renderer is gone (docs/reliability.md, "A renderer dies").

A connection's thread is inside the model's run while it runs, so it cannot notice its peer go
before the run ends, and a slow model may take seconds. Each connection therefore runs its
models with an onnxruntime ``RunOptions`` of its own, and one thread of the service sleeps in
``epoll`` on every connection's socket (its hangup) and pidfd (its process's exit): when either
fires, that connection's ``terminate`` flag is set, and onnxruntime ends the run at its next
node (or the next iteration of a Loop), failing it; what the connection had queued is dropped
before it is served. The thread takes no CPU while nobody dies. Linux only: the Windows pipe
watches its peer's process itself (fenceline.ipc.pipe_server's ExitWatch).
"""

from __future__ import annotations

import contextlib
import logging
import select
import threading
from typing import Any

import onnxruntime as ort

log = logging.getLogger("fenceline.ipc")

# What says a socket's peer closed, and a pidfd's process exited: asked of epoll, and asked
# again with poll before a run is abandoned (its fd may have been closed and reused meanwhile).
# Linux's values, the same for epoll and poll (this module is imported on Windows too).
_HANGUP = 0x2000 | 0x10 | 0x8  # EPOLLRDHUP | EPOLLHUP | EPOLLERR
_EXITED = 0x1  # EPOLLIN


def run_options() -> Any:
    """A connection's RunOptions: quiet (a run ended on purpose is no error worth a log line)."""
    options = ort.RunOptions()
    options.log_severity_level = 4
    return options


class Abandoner:
    """Sets a connection's RunOptions' terminate flag once its peer is gone."""

    def __init__(self) -> None:
        self._epoll = select.epoll()
        self._lock = threading.Lock()
        # fd -> (what says it is gone, the connection's RunOptions, all its fds watched)
        self._watched: dict[int, tuple[int, Any, tuple[int, ...]]] = {}
        self._thread = threading.Thread(target=self._loop, name="fenceline-ipc-abandon",
                                        daemon=True)
        self._closed = False

    def start(self) -> None:
        self._thread.start()

    def watch(self, options: Any, sock: int, pidfd: int) -> None:
        """Watches ``sock`` (for its hangup) and ``pidfd`` (-1: none) for ``options``' runs,
        until :meth:`forget`."""
        fds = (sock,) if pidfd < 0 else (sock, pidfd)
        with self._lock:
            if self._closed:
                return
            for fd, mask in zip(fds, (_HANGUP, _EXITED), strict=False):
                self._epoll.register(fd, mask)
                self._watched[fd] = (mask, options, fds)

    def forget(self, sock: int) -> None:
        """Stops watching the connection of ``sock``; before its fds are closed."""
        with self._lock:
            self._drop(sock)

    def _drop(self, fd: int) -> Any:
        """Unregisters ``fd``'s connection (the lock is held); returns its RunOptions, if any."""
        got = self._watched.get(fd)
        if got is None:
            return None
        _, options, fds = got
        for f in fds:
            if self._watched.pop(f, None) is not None:
                with contextlib.suppress(OSError, ValueError):
                    self._epoll.unregister(f)
        return options

    def _loop(self) -> None:
        while True:
            try:
                events = self._epoll.poll()
            except InterruptedError:
                continue
            except (OSError, ValueError):  # closed
                return
            for fd, _ in events:
                with self._lock:
                    got = self._watched.get(fd)
                    options = self._drop(fd) if got is not None and _gone(fd, got[0]) else None
                if options is not None:
                    options.terminate = True

    def close(self) -> None:
        with self._lock:
            self._closed = True
            self._watched.clear()
            self._epoll.close()


def _gone(fd: int, mask: int) -> bool:
    """Whether ``fd`` (watched for ``mask``) says so now, without waiting."""
    p = select.poll()
    p.register(fd, mask)
    return any(ev & mask for _, ev in p.poll(0))
