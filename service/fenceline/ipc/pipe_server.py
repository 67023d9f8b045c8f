"""The IPC server on Windows: a message-mode named pipe, one per user, the same frames and the
same per-connection ownership as the Unix socket (docs/ipc.md, docs/windows.md).

Security is explicit: every pipe instance carries a DACL that admits only the service's own
user and the configured allowed SIDs, remote clients are rejected, and the first instance is
created with FILE_FLAG_FIRST_PIPE_INSTANCE so nobody can serve the name before us unnoticed.
The peer's identity comes from the pipe (its process id, then that process's token), as
SO_PEERCRED does on Linux.
"""

from __future__ import annotations

import contextlib
import functools
import logging
import threading
from typing import Any

from fenceline import _native
from fenceline.errors import FencelineError, PermissionDenied
from fenceline.interop.handles import close_nt_handles
from fenceline.interop.owners import Caller
from fenceline.ipc.base import Connection as Served
from fenceline.ipc.base import ServerBase
from fenceline.ipc.server import Connection
from fenceline.protocol import codec
from fenceline.runtime.service import Runtime

log = logging.getLogger("fenceline.ipc")

PIPE_PREFIX = "\\\\.\\pipe\\"


def _win() -> Any:
    """The Windows-only part of the native module (absent from the Linux build and stub)."""
    return _native


def default_pipe_name() -> str:
    """``\\\\.\\pipe\\fenceline-<user SID>``: pipe names are machine-wide, so one per user."""
    return f"{PIPE_PREFIX}fenceline-{_win().current_user_sid()}"


def pipe_sddl(allowed_sids: frozenset[str]) -> str:
    """Owner and DACL: full access for each allowed SID, nobody else (no inherited ACEs)."""
    aces = "".join(f"(A;;GA;;;{sid})" for sid in sorted(allowed_sids))
    return f"D:P{aces}"


class PipeConnection(Connection):
    """A Connection whose frames travel over one pipe instance. No fds exist on Windows: a
    request that needs one is answered as on Linux without it; handles take their place
    (docs/windows.md, "Handles")."""

    def __init__(self, server: Any, pipe: Any, number: int, sid: str) -> None:
        super().__init__(server, pipe, number, Caller(None, transport="ipc", sid=sid))

    def _receive(self) -> tuple[bytes | None, list[int], str | None]:
        pipe: Any = self.sock  # the native PipeConnection (Windows-only, absent from the stub)
        got = pipe.recv_frame(codec.MAX_FRAME)
        if got is None:
            return None, [], None
        data, oversized = bytes(got[0]), bool(got[1])
        if oversized:  # read to its end; its head stays, so the refusal carries its request id
            return data, [], f"message over {codec.MAX_FRAME} bytes (docs/ipc.md)"
        return data, [], None if data else "empty message"

    def _send(self, data: bytes) -> bool:
        return bool(self.sock.send(data))

    @staticmethod
    def peer_gone(channel: Any, process: Any = None) -> bool:
        """The pipe's own check (its client end closed, or its process exited): a pipe has no
        poll(2)."""
        return bool(channel.peer_gone())

    def _take_handles(self, wanted: dict[str, tuple[int, str]]) -> dict[str, int]:
        """Duplicates each handle from the pipe's client (identified when it connected) and
        checks its object type; on any failure closes what it already duplicated."""
        pipe: Any = self.sock
        taken: list[int] = []
        try:
            for value, role in wanted.values():
                taken.append(int(pipe.duplicate_from_peer(value, role)))
        except BaseException:
            close_nt_handles(*taken)
            raise
        return dict(zip(wanted, taken, strict=True))


class PipeServer(ServerBase):
    """``allowed_sids``: users whose processes may connect; default the service's own."""

    def __init__(
        self,
        runtime: Runtime,
        name: str | None = None,
        spin_ns: int = 100_000,
        allowed_sids: frozenset[str] | None = None,
    ) -> None:
        super().__init__(runtime, spin_ns)
        self.path = (name or default_pipe_name()).rstrip("\\")
        if not self.path.lower().startswith(PIPE_PREFIX):
            self.path = PIPE_PREFIX + self.path
        self.allowed_sids = allowed_sids or frozenset({_win().current_user_sid()})
        self._listener: Any = None

    def start(self) -> None:
        self._listener = _win().PipeListener(self.path, pipe_sddl(self.allowed_sids))
        self._thread = threading.Thread(target=self._accept, name="fenceline-ipc-accept", daemon=True)
        self._thread.start()
        log.info("IPC pipe listening on %s", self.path)

    def accepting(self) -> bool:
        """False once the pipe cannot take new connections (stopped, or accepting failed): the
        readiness probe answers 503 then."""
        return self._thread is not None and self._thread.is_alive()

    def _accept(self) -> None:
        while True:
            try:
                pipe = self._listener.accept()
            except FencelineError:
                log.exception("accepting on %s failed", self.path)
                return
            if pipe is None:
                return
            try:
                sid, pid = pipe.peer_user_sid(), pipe.peer_pid
            except FencelineError as e:
                self._refuse(pipe, PermissionDenied(f"cannot identify the peer: {e}"))
                continue
            try:
                self._admit(pipe, f"user {sid}", pid, sid in self.allowed_sids,
                            functools.partial(PipeConnection, self, pipe, sid=sid))
            except Exception:  # a thread that cannot start
                log.exception("could not take an IPC connection")

    def _answer_refusal(self, channel: Any, err: FencelineError) -> None:
        request_id = 0
        with contextlib.suppress(FencelineError):
            got = channel.recv_frame(codec.MAX_FRAME)
            if got is not None:
                request_id = codec.peek_request_id(bytes(got[0]))
        channel.send(codec.encode_error(request_id, err))
        channel.close()

    def _wake(self, c: Served) -> None:
        pipe: Any = c.sock
        pipe.shutdown()  # the native pipe's shutdown(): wakes its blocked receive

    def stop(self, timeout: float = 5.0) -> None:
        if self._listener is not None:
            self._listener.close()
        self._stop_connections(timeout)
