"""What the Unix socket server (ipc/server.py) and the Windows pipe server (ipc/pipe_server.py)
share: the set of live connections, admission (the allow-list, shutdown, the connection limits
of fenceline.ipc.limits), refusing a peer with an ERROR frame, forgetting a closed connection
and stopping. Each transport only moves bytes:
it accepts and identifies a peer, answers a refusal over its own kind of channel and wakes a
connection's blocked receive at stop."""

from __future__ import annotations

import itertools
import logging
import threading
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, Protocol

from fenceline.errors import FencelineError, PermissionDenied, ResourceExhausted, Unavailable
from fenceline.interop.owners import Caller
from fenceline.ipc.limits import ConnectionLimits
from fenceline.runtime.service import Runtime

if TYPE_CHECKING:
    from fenceline.ipc.abandon import Abandoner

log = logging.getLogger("fenceline.ipc")


class Connection(Protocol):
    """What the server needs of a connection (ipc/server.py's Connection): its channel, its
    peer ("uid 1000": what the per-user limit counts), its thread, and close(), which releases
    what it owns."""

    sock: Any
    peer: str
    caller: Caller
    thread: threading.Thread

    def close(self) -> None: ...


class ServerBase:
    def __init__(
        self, runtime: Runtime, spin_ns: int, limits: ConnectionLimits | None = None,
    ) -> None:
        self.runtime = runtime
        self.spin_ns = spin_ns
        self.limits = limits or ConnectionLimits()
        self._connections: set[Connection] = set()
        self._per_peer: dict[str, int] = {}  # connections held by each peer (user)
        self._lock = threading.Lock()
        self._numbers = itertools.count(1)
        self._thread: threading.Thread | None = None
        # Ends the model run of a connection whose peer is gone (fenceline.ipc.abandon): the
        # Unix socket's; None where a transport has none.
        self.abandoner: Abandoner | None = None

    # -- what a transport provides ----------------------------------------------------------

    def _answer_refusal(self, channel: Any, err: FencelineError) -> None:
        """Answers the peer's first request on ``channel`` with ``err``, then closes it. Runs on
        its own thread: a peer that never writes must not hold up accepting."""
        raise NotImplementedError

    def _wake(self, c: Connection) -> None:
        """Ends ``c``'s blocked receive, so that its thread closes the connection."""
        raise NotImplementedError

    def accepting(self) -> bool:
        """False while the transport cannot take new connections."""
        raise NotImplementedError

    def unready(self) -> str | None:
        """Why the readiness probe answers 503 for IPC (None: it does not)."""
        if self.accepting():
            return None
        return ("IPC accepts no connections: the service is stopping or out of file "
                "descriptors")

    def _counted(self, c: Connection) -> None:
        """Called with the lock held each time a connection of ``c``'s peer was admitted or
        forgotten: a transport that refuses without asking (the Unix socket's native accept
        loop, fenceline.ipc.server) learns which limits are reached. Nothing by default."""

    # -- shared -----------------------------------------------------------------------------

    def _admit(
        self, channel: Any, peer: str, pid: int, allowed: bool,
        connection: Callable[[int], Connection], elsewhere: tuple[int, int] = (0, 0),
    ) -> FencelineError | None:
        """Serves an accepted, identified peer (``peer``: "uid 1000", "user S-1-5-..."), or
        refuses it when it is not ``allowed``, the service is shutting down or a limit is
        reached: then returns the error it answered. ``elsewhere``: the peer's connections and
        all connections held by the transport itself (the accept loop's greetings), counted
        with the served ones."""
        if not allowed:
            log.warning("refused IPC peer pid %d %s: not on the allow-list", pid, peer)
            self.runtime.metrics.errors.labels("ipc", PermissionDenied.code).inc()
            denied = PermissionDenied(f"{peer} may not use this service")
            self._refuse(channel, denied)
            return denied
        if self.runtime.closing.is_set():
            closing = Unavailable("the service is shutting down")
            self._refuse(channel, closing)
            return closing
        # Only the accept thread admits, so the counts can only fall between this check and the
        # connection's entry below.
        with self._lock:
            over = self.limits.refusal(peer, len(self._connections) + elsewhere[1],
                                       self._per_peer.get(peer, 0) + elsewhere[0])
        if over is not None:
            log.warning("refused IPC peer pid %d %s: %s", pid, peer, over)
            self.runtime.metrics.errors.labels("ipc", ResourceExhausted.code).inc()
            exhausted = ResourceExhausted(over)
            self._refuse(channel, exhausted)
            return exhausted
        c = connection(next(self._numbers))
        with self._lock:
            self._connections.add(c)
            self._per_peer[c.peer] = self._per_peer.get(c.peer, 0) + 1
            self._counted(c)
        self.runtime.metrics.ipc_connections.inc()
        self.runtime.metrics.ipc_connections_total.inc()
        try:
            c.thread.start()
        except BaseException:
            c.close()
            raise
        return None

    def _refuse(self, channel: Any, err: FencelineError) -> None:
        threading.Thread(
            target=self._answer_refusal, args=(channel, err), name="fenceline-ipc-refuse",
            daemon=True,
        ).start()

    def forget(self, c: Connection) -> bool:
        """True the first time: the caller releases what ``c`` owns, exactly once."""
        with self._lock:
            if c in self._connections:
                self._connections.remove(c)
                left = self._per_peer.pop(c.peer) - 1
                if left:
                    self._per_peer[c.peer] = left
                self._counted(c)
                return True
            return False

    def _stop_connections(self, timeout: float) -> None:
        if self._thread is not None:
            self._thread.join(timeout)
        with self._lock:
            conns = list(self._connections)
        for c in conns:
            self._wake(c)
        for c in conns:
            c.thread.join(timeout)
