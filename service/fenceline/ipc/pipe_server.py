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
import ctypes
import functools
import itertools
import logging
import sys
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


# -- the peer's exit, for the run in flight ------------------------------------------------
#
# A connection's thread is inside the model's run while it runs, so it cannot look at its peer
# before the run ends. Each pipe connection therefore runs its models with a RunOptions of its
# own, and a thread of the service sleeps in WaitForMultipleObjects on the peers' processes:
# when one exits, its connection's terminate flag is set and onnxruntime ends the run at its
# next node, as fenceline.ipc.abandon does on the Unix socket. One such thread waits on at most
# 63 processes (the 64th handle is its wake-up, set when its set changes); the first starts
# with the pipe, more as connections need them, each kept until the service stops. They take
# no CPU while nobody dies.

_SYNCHRONIZE = 0x00100000
_INFINITE = 0xFFFFFFFF
_WAIT_OBJECT_0 = 0
_PER_THREAD = 63  # MAXIMUM_WAIT_OBJECTS, less the wake-up

_k32: Any = None  # kernel32 (Windows)
if sys.platform == "win32":
    _k32 = ctypes.WinDLL("kernel32", use_last_error=True)
    _k32.OpenProcess.restype = ctypes.c_void_p
    _k32.OpenProcess.argtypes = [ctypes.c_ulong, ctypes.c_int, ctypes.c_ulong]
    _k32.CreateEventW.restype = ctypes.c_void_p
    _k32.CreateEventW.argtypes = [ctypes.c_void_p, ctypes.c_int, ctypes.c_int, ctypes.c_void_p]
    _k32.SetEvent.argtypes = [ctypes.c_void_p]
    _k32.CloseHandle.argtypes = [ctypes.c_void_p]
    _k32.WaitForMultipleObjects.restype = ctypes.c_ulong
    _k32.WaitForMultipleObjects.argtypes = [ctypes.c_ulong, ctypes.POINTER(ctypes.c_void_p),
                                            ctypes.c_int, ctypes.c_ulong]


def _last_error() -> int:
    if sys.platform == "win32":
        return ctypes.get_last_error()
    return 0


class _ExitWaiter:
    """One thread waiting on up to 63 peers' processes."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._wake = _k32.CreateEventW(None, False, False, None)
        if not self._wake:
            raise OSError(_last_error(), "CreateEventW failed")
        self._watched: dict[int, tuple[int, Any]] = {}  # key -> (process handle, RunOptions)
        self._retired: list[int] = []  # handles this thread closes once it no longer waits on them
        self._closed = False
        threading.Thread(target=self._loop, name="fenceline-ipc-exits", daemon=True).start()

    def room(self) -> bool:
        with self._lock:
            return not self._closed and len(self._watched) < _PER_THREAD

    def add(self, key: int, process: int, options: Any) -> None:
        with self._lock:
            self._watched[key] = (process, options)
        _k32.SetEvent(self._wake)

    def remove(self, key: int) -> bool:
        with self._lock:
            got = self._watched.pop(key, None)
            if got is None:
                return False
            self._retired.append(got[0])
        _k32.SetEvent(self._wake)
        return True

    def close(self) -> None:
        with self._lock:
            self._closed = True
        _k32.SetEvent(self._wake)

    def _loop(self) -> None:
        while True:
            with self._lock:
                for h in self._retired:
                    _k32.CloseHandle(h)
                self._retired.clear()
                if self._closed:
                    for h, _ in self._watched.values():
                        _k32.CloseHandle(h)
                    self._watched.clear()
                    _k32.CloseHandle(self._wake)
                    return
                keys = list(self._watched)
                handles = [self._wake, *(self._watched[k][0] for k in keys)]
            array = (ctypes.c_void_p * len(handles))(*handles)
            got = _k32.WaitForMultipleObjects(len(handles), array, False, _INFINITE)
            index = got - _WAIT_OBJECT_0
            if 1 <= index < len(handles):  # that peer's process exited
                options = None
                with self._lock:
                    entry = self._watched.pop(keys[index - 1], None)
                    if entry is not None:
                        self._retired.append(entry[0])
                        options = entry[1]
                if options is not None:
                    options.terminate = True
            elif index != 0:  # WAIT_FAILED: no handle of ours can cause it
                log.error("waiting on IPC peers' processes failed (%d); their runs in flight "
                          "are no longer abandoned at their exit", _last_error())
                return


class ExitWatch:
    """Sets a connection's RunOptions' terminate flag once its peer's process exits."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._keys = itertools.count(1)
        self._waiters: list[_ExitWaiter] = []
        self._where: dict[int, _ExitWaiter] = {}  # key -> the waiter watching it

    def start(self) -> None:
        """Starts the first waiting thread, so that the service's thread count does not move
        with its first connection."""
        with self._lock:
            if not self._waiters:
                self._waiters.append(_ExitWaiter())

    def watch(self, pid: int, options: Any) -> int:
        """Watches process ``pid`` for ``options``' runs until :meth:`forget` of the key this
        returns (0: it cannot be watched; the pipe's peer_gone still ends the connection)."""
        process = _k32.OpenProcess(_SYNCHRONIZE, False, pid)
        if not process:
            log.warning("cannot watch IPC peer pid %d (OpenProcess: %d): its run in flight "
                        "completes after its death", pid, _last_error())
            return 0
        with self._lock:
            waiter = next((w for w in self._waiters if w.room()), None)
            if waiter is None:
                waiter = _ExitWaiter()
                self._waiters.append(waiter)
            key = next(self._keys)
            self._where[key] = waiter
            waiter.add(key, process, options)
        return key

    def forget(self, key: int) -> None:
        with self._lock:
            waiter = self._where.pop(key, None)
        if waiter is not None:
            waiter.remove(key)

    def close(self) -> None:
        with self._lock:
            waiters, self._waiters = self._waiters, []
            self._where.clear()
        for w in waiters:
            w.close()


class PipeConnection(Connection):
    """A Connection whose frames travel over one pipe instance. No fds exist on Windows: a
    request that needs one is answered as on Linux without it; handles take their place
    (docs/windows.md, "Handles")."""

    def __init__(self, server: Any, pipe: Any, number: int, sid: str) -> None:
        super().__init__(server, pipe, number, Caller(None, transport="ipc", sid=sid))
        # The run in flight ends when the peer's process does (the pipe identified it).
        self._exits: ExitWatch = server.exits
        self._exit_key = self._exits.watch(int(pipe.peer_pid), self._run_options)

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

    def close(self) -> None:
        self._exits.forget(self._exit_key)
        super().close()


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
        self.exits = ExitWatch()

    def start(self) -> None:
        self._listener = _win().PipeListener(self.path, pipe_sddl(self.allowed_sids))
        self.exits.start()
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
        self.exits.close()
