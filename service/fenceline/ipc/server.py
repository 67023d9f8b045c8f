"""The IPC server: one thread per connection, so a per-frame RUN goes from socket to model and
back without the event loop. Each connection owns what it creates; closing it (or the renderer
dying) releases everything."""

from __future__ import annotations

import contextlib
import functools
import logging
import os
import select
import socket
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ValidationError

from fenceline import __version__, _native, logs, waiting
from fenceline.errors import (
    BY_IPC_CODE,
    Conflict,
    FencelineError,
    InvalidArgument,
    InvalidRequest,
    PermissionDenied,
    ResourceExhausted,
    Unavailable,
    Unsupported,
)
from fenceline.interop.owners import Caller
from fenceline.ipc import abandon, access
from fenceline.ipc.access import socket_error
from fenceline.ipc.base import Connection as Served
from fenceline.ipc.base import ServerBase
from fenceline.ipc.limits import (
    GREET_S,
    MAX_HELD_REFUSALS,
    REFUSAL_BURST,
    REFUSAL_GRACE_S,
    REFUSALS_PER_S,
    ConnectionLimits,
)
from fenceline.protocol import codec
from fenceline.protocol.codec import Kind
from fenceline.protocol.schemas import FenceImportRequest, MemoryImportRequest, SessionCreateRequest
from fenceline.runtime.service import Runtime
from fenceline.waiting import Cancel

log = logging.getLogger("fenceline.ipc")

IPC_OWNER = "ipc:"  # the owner name of what an IPC connection creates: "ipc:<connection number>"


def default_socket_path() -> Path:
    """$FENCELINE_SOCKET, else $XDG_RUNTIME_DIR/fenceline/fenceline.sock (the service and every
    client agree on it)."""
    explicit = os.environ.get("FENCELINE_SOCKET")
    if explicit:
        return Path(explicit)
    base = os.environ.get("XDG_RUNTIME_DIR") or f"/tmp/fenceline-{os.getuid()}"
    return Path(base) / "fenceline" / "fenceline.sock"


def _parse(model: type[BaseModel], body: bytes) -> Any:
    try:
        return model.model_validate(codec.decode_json(body))
    except ValidationError as e:
        first = e.errors()[0]
        loc = ".".join(str(p) for p in first.get("loc", ()))
        raise InvalidRequest(f"invalid request: {loc or 'body'}: {first.get('msg')}") from None


class Connection:
    def __init__(self, server: ServerBase, sock: socket.socket, number: int, caller: Caller,
                 greeted: list[str] | None = None, client: str | None = None) -> None:
        """``greeted`` and ``client``: the features the accept loop's answer to the HELLO gave
        and the client's name it named, for a connection greeted there (IpcServer.start)."""
        self.server = server
        self.sock = sock
        self.owner = f"{IPC_OWNER}{number}"
        # Who connected, as the transport identified it: the accept loop's SO_PEERCRED uid, or
        # the Windows pipe client's SID (fenceline.ipc.pipe_server).
        self.caller = caller
        self.peer = caller.user
        self.runtime = server.runtime
        self._spin = _native.ReceiveSpin(server.spin_ns)  # serve_loop's receive wait
        # The process that connected, watched beside the socket: its end of the socket may
        # outlive it (docs/reliability.md, "A renderer dies"). The Windows pipe watches its own.
        self._process = (
            _native.PeerProcess(sock.fileno()) if isinstance(sock, socket.socket) else None)
        self._pidfd = -1 if self._process is None else self._process.pidfd
        self._send_timeout_ms = server.limits.send_timeout_ms
        # The client's run page, once it sent one (docs/ipc.md, "The run page").
        self._page: Any = None
        # Its HELLO asked for the RUN reply's flags (docs/ipc.md, "HELLO"): a client that did
        # not reads the reply's last word as reserved, 0.
        self._reply_flags = codec.FEATURE_REPLY_FLAGS in (greeted or ())
        self._greeted_client = client
        # A long fence wait ends early when the renderer dies: nobody reads the channel
        # meanwhile, so the wait itself asks the transport whether its peer is gone. (A function
        # of the channel, not a bound method: the connection must not reach itself, or it and
        # its channel's handles would wait for the cycle collector.)
        # The model runs of this connection, abandoned once the renderer is gone
        # (fenceline.ipc.abandon on the Unix socket, the pipe's ExitWatch on Windows).
        self._run_options = abandon.run_options()
        self._cancel = Cancel(
            server.runtime.closing, functools.partial(self.peer_gone, sock, self._process),
            self._run_options)
        self.thread = threading.Thread(target=self._serve, name=f"fenceline-{self.owner}", daemon=True)
        self._handlers: dict[int, Callable[[bytes, list[int]], Any]] = {
            Kind.HELLO: self._hello,
            Kind.IMPORT_MEMORY: self._import_memory,
            Kind.RELEASE_MEMORY: lambda b, f: self.runtime.release_memory(self.owner, self._id(b)),
            Kind.IMPORT_FENCE: self._import_fence,
            Kind.RELEASE_FENCE: lambda b, f: self.runtime.release_fence(self.owner, self._id(b)),
            Kind.CREATE_SESSION: self._create_session,
            Kind.RELEASE_SESSION: self._release_session,
            Kind.DESCRIBE: self._describe,
            Kind.START_SESSION: lambda b, f: self.runtime.start_session(self.owner, self._id(b)),
            Kind.PAUSE_SESSION: lambda b, f: self.runtime.pause_session(self.owner, self._id(b)),
            Kind.STOP_SESSION: self._stop_session,
            Kind.OPEN_RUN_PAGE: self._open_run_page,
        }

    # -- loop -----------------------------------------------------------------------------

    def _serve(self) -> None:
        logs.owner.set(self.owner)  # this thread's context: every record it logs names the client
        logs.peer.set(self.peer)
        if self._greeted_client is not None:  # its HELLO, answered by the accept loop
            self._log_hello(self._greeted_client)
        metrics = self.runtime.metrics
        # The Unix socket's frames are received, and a host session's RUNs served, in native
        # code (docs/ipc.md, "The run path"); the Windows pipe receives here and hands each
        # frame to the same runner first.
        table = self.runtime.runs
        loop = isinstance(self.sock, socket.socket)
        fd = self.sock.fileno() if loop else -1
        try:
            if self._process is not None and self._process.exited():
                return  # gone before it was served: what it queued is purged at close
            if self.server.abandoner is not None:
                self.server.abandoner.watch(self._run_options, fd, self._pidfd)
            while True:
                failure: object = None
                try:
                    if loop:
                        # A RUN the engine refuses is answered there too (self._refusal).
                        data, fds, problem = table.serve_loop(
                            fd, self.owner, waiting.gate().native, self._spin, self._refusal,
                            self._pidfd, self._send_timeout_ms, self._page, self._reply_flags,
                            self._run_options, self._cancel)
                    else:
                        data, fds, problem = self._receive()
                        if data is not None and self._gone():
                            # As serve_loop on the socket: what a renderer left queued when it
                            # died is dropped, not run.
                            break
                        if data and problem is None and not fds:
                            sent, failure = table.serve_bytes(
                                data, self.owner, self._reply_flags, waiting.gate().native,
                                self._cancel, self._send, self._run_options)
                            if sent is not None:
                                if not sent:
                                    break
                                continue
                except (OSError, FencelineError):
                    break
                if data is None:
                    if loop and not (self._gone() or self.runtime.closing.is_set()):
                        # Neither the peer's end nor its exit: a reply it did not take in time
                        # (the Unix socket's send deadline; the pipe has none).
                        self._log_send_timeout()
                    break
                # A run that failed in native code, received in Python (the pipe's: the
                # socket's loop answers its own).
                if isinstance(failure, FencelineError):
                    if not self._send(self._refusal(codec.peek_request_id(data), failure)):
                        break
                    continue
                request_id = 0
                reply: bytes
                try:
                    try:
                        if problem is not None:  # too long, too many fds (closed) or empty
                            raise InvalidRequest(problem)
                        frame = codec.decode(data)
                    except FencelineError:
                        # The frame is refused whole: the fds that came with it are ours to close.
                        self._close_fds(fds)
                        request_id = codec.peek_request_id(data)
                        raise
                    request_id = frame.request_id
                    if frame.kind in (Kind.RUN, Kind.RUN_ASYNC):
                        self._close_fds(fds)
                        if fds:
                            raise InvalidRequest("RUN carries no fds")
                        reply = self._run(frame)
                    else:
                        reply = self._control(frame, fds)
                except FencelineError as e:
                    reply = self._refusal(request_id, e)
                except Exception:
                    log.exception(
                        "unexpected error on %s", self.owner, extra={"request_id": request_id}
                    )
                    metrics.errors.labels("ipc", "internal").inc()
                    internal = FencelineError("internal error; see the service log")
                    reply = codec.encode_error(request_id, internal)
                if not self._send(reply):
                    break
        finally:
            self.close()

    def _receive(self) -> tuple[bytes | None, list[int], str | None]:
        """One frame, its fds and why it is refused (None: it is not); (None, [], None) once the
        peer is gone. The Windows pipe's (fenceline.ipc.pipe_server): the Unix socket is
        received by RunTable.serve_loop."""
        raise NotImplementedError

    @staticmethod
    def peer_gone(channel: Any, process: Any = None) -> bool:
        """True once the renderer at the other end of ``channel`` closed it or its ``process``
        (a ``_native.PeerProcess``) exited; never blocks. Each transport has its own way to see
        it: the Windows pipe's is fenceline.ipc.pipe_server's."""
        return _hung_up(channel) or (process is not None and process.exited())

    def _send(self, data: bytes) -> bool:
        """False when the peer is gone, or did not take the message within the send timeout:
        the connection then closes."""
        try:
            _native.send_message(self.sock.fileno(), data, self._send_timeout_ms, self._pidfd)
            return True
        except TimeoutError:
            self._log_send_timeout()
            return False
        except OSError:
            return False

    def _refusal(self, request_id: int, e: FencelineError) -> bytes:
        """The error reply to a request that failed with ``e``, counted. A run ended because
        its renderer is gone (fenceline.ipc.abandon) is answered as a fence wait cut short for
        that reason is: ``unavailable``, not a model error.

        Made here, never in a local of the receive loop: an exception raised there holds the
        loop's frame in its traceback, so a local that kept it would make a cycle, and the
        frames of the failed request (a refused session's views of the renderer's memory,
        the Windows pipe's connection) would stay until the cycle collector ran, after the
        connection closed."""
        if self._run_options.terminate:
            e = Unavailable("the client went away while its run ran; the run was abandoned")
        self.runtime.metrics.errors.labels("ipc", e.code).inc()
        return codec.encode_error(request_id, e)

    def _log_send_timeout(self) -> None:
        log.warning("%s: a reply was not taken within %d ms (--ipc-send-timeout-s); closing the "
                    "connection", self.owner, self._send_timeout_ms)

    def _gone(self) -> bool:
        """True once the peer closed its end or its process exited."""
        return self.peer_gone(self.sock, self._process)

    @staticmethod
    def _close_fds(fds: list[int]) -> None:
        for f in fds:
            with contextlib.suppress(OSError):
                os.close(f)

    def _control(self, frame: codec.Frame, fds: list[int]) -> bytes:
        handler = self._handlers.get(frame.kind)
        logs.request_id.set(str(frame.request_id))
        try:
            if handler is None:
                raise InvalidRequest(f"unknown message kind 0x{frame.kind:04x}")
            result = handler(frame.body, fds)  # a handler takes the fds it uses off the list
        finally:
            self._close_fds(fds)
        return codec.encode_json(frame.kind | codec.REPLY_BIT, frame.request_id, result or {})

    def _run(self, frame: codec.Frame) -> bytes:
        """A RUN that the engine's own reading of the frame left to Python, through the same
        entry."""
        run = codec.decode_run(frame.body)
        r = self.runtime.run(
            self.owner, run.session_id.hex(), run.wait_value, run.signal_value, run.timeout_ms,
            asynchronous=frame.kind == Kind.RUN_ASYNC, cancel=self._cancel, flags=run.flags,
        )
        return codec.encode_run_reply(frame.request_id, codec.RunReply(
            r.signal_value, r.wait_ns // 1000, r.infer_ns // 1000, r.total_ns // 1000,
            codec.REPLY_CPUS_SHARED if self._reply_flags and _native.cpus_shared() else 0))

    # -- control handlers -----------------------------------------------------------------

    @staticmethod
    def _id(body: bytes) -> str:
        obj = codec.decode_json(body)
        if not isinstance(obj.get("id"), str):
            raise InvalidRequest("this message needs {\"id\": \"...\"}")
        return str(obj["id"])

    @staticmethod
    def _one_fd(fds: list[int], what: str) -> int | None:
        if len(fds) > 1:
            raise InvalidRequest(f"{what} takes at most one fd, got {len(fds)}")
        return fds.pop() if fds else None

    def _hello(self, body: bytes, fds: list[int]) -> dict[str, Any]:
        hello = codec.decode_json(body)
        unknown = sorted(set(hello) - {"client", "features"})
        if unknown:
            raise InvalidRequest(f"invalid request: HELLO has no field {unknown[0]!r}")
        if not isinstance(hello.get("client", ""), str):
            raise InvalidRequest("invalid request: HELLO's client is a string")
        asked = hello.get("features", [])
        if (not isinstance(asked, list) or len(asked) > codec.MAX_FEATURES
                or not all(isinstance(f, str) for f in asked)):
            raise InvalidRequest(
                "invalid request: HELLO's features is a list of at most "
                f"{codec.MAX_FEATURES} names, e.g. [\"{codec.FEATURE_REPLY_FLAGS}\"]")
        features = known_features(asked)
        self._reply_flags = codec.FEATURE_REPLY_FLAGS in features
        self._log_hello(str(hello.get("client", "?")))
        return hello_reply(self.runtime, features)

    def _log_hello(self, client: str) -> None:
        """The connection's line (docs/ipc.md, "HELLO is optional"), whoever answered it."""
        log.info("%s: hello from %s", self.owner, client[:64])

    def _take_handles(self, wanted: dict[str, tuple[int, str]]) -> dict[str, int]:
        """The handles a request names in the renderer's process, duplicated into this one and
        owned by the caller: only the Windows pipe can (fenceline.ipc.pipe_server)."""
        if wanted:
            raise Unsupported(
                "handle values are duplicated from the renderer only over the Windows named "
                "pipe; over this socket send the object as an fd (host_fd) or by name"
            )
        return {}

    def _with_handles(
        self, roles: dict[str, tuple[int, str]], fd: int | None
    ) -> dict[str, int]:
        try:
            return self._take_handles(roles)
        except BaseException:
            self._close_fds([] if fd is None else [fd])
            raise

    def _import_memory(self, body: bytes, fds: list[int]) -> dict[str, Any]:
        req = _parse(MemoryImportRequest, body)
        roles = req.handle_roles()
        fd = self._one_fd(fds, "IMPORT_MEMORY")
        if fd is not None and req.handle_type == "host_shm":
            os.close(fd)
            raise InvalidRequest("host_shm memory is opened by name; send no fd")
        # From here the runtime owns the fd and the duplicated handles, also when it raises.
        return self.runtime.import_memory(
            self.owner, req.handle_type, name=req.name, fd=fd, size_bytes=req.size_bytes,
            offset_bytes=req.offset_bytes, access=req.access, caller=self.caller,
            **self._with_handles(roles, fd), **req.gpu_fields(),
        )

    def _import_fence(self, body: bytes, fds: list[int]) -> dict[str, Any]:
        req = _parse(FenceImportRequest, body)
        roles = req.handle_roles()
        fd = self._one_fd(fds, "IMPORT_FENCE")
        return self.runtime.import_fence(
            self.owner, req.fence_type, name=req.name, fd=fd, device_uuid=req.device_uuid,
            adapter_luid=req.adapter_luid, current_value=req.current_value, caller=self.caller,
            **self._with_handles(roles, fd),
        )

    def _create_session(self, body: bytes, fds: list[int]) -> dict[str, Any]:
        req = _parse(SessionCreateRequest, body)
        return self.runtime.create_session(
            self.owner, req.model, req.input_specs(), req.output_specs(), req.wait_fence,
            req.signal_fence, mode=req.mode, policy=req.policy, spin_us=req.spin_us,
            start=req.start, transport="ipc",
        )

    def _open_run_page(self, body: bytes, fds: list[int]) -> dict[str, Any]:
        """The client's run page: RUNs posted there are served beside the socket's, as many in
        flight as the slots the client asked for and the service serves (answered)."""
        if not isinstance(self.sock, socket.socket):
            raise Unsupported("the run page needs the Unix socket")
        if self._page is not None:
            raise Conflict("this connection has its run page already")
        fd = self._one_fd(fds, "OPEN_RUN_PAGE")
        if fd is None:
            raise InvalidArgument("OPEN_RUN_PAGE carries the page's memfd")
        try:
            asked = codec.decode_json(body).get("slots", 1)
            if type(asked) is not int or not 1 <= asked <= 0xFFFFFFFF:
                raise InvalidArgument("OPEN_RUN_PAGE's slots is an integer, 1 or more")
            self._page = _native.RunPage(fd, asked)
        finally:
            os.close(fd)
        answer: dict[str, Any] = {"size": _native.RUN_PAGE_SIZE}
        if self._page.slots > 1:  # a client that asked for none reads what it always read
            answer["slots"] = self._page.slots
        return answer

    def _release_session(self, body: bytes, fds: list[int]) -> None:
        self.runtime.release_session(self.owner, self._id(body))

    def _stop_session(self, body: bytes, fds: list[int]) -> dict[str, Any]:
        return self.runtime.stop_session(self.owner, self._id(body))

    def _describe(self, body: bytes, fds: list[int]) -> dict[str, Any]:
        obj = codec.decode_json(body)
        if obj.get("kind") == "model":
            # Models are named, not owned: any client may read their metadata, as over HTTP.
            return self.runtime.models.get(str(obj.get("id", "")), obj.get("version")).metadata()
        if obj.get("kind") == "models":
            # The names a client may choose from (the OBS filter's model list); the id is unused.
            return {"models": self.runtime.models.names()}
        kind, id_ = obj.get("kind"), self._id(body)
        describe = {
            "memory": self.runtime.describe_memory,
            "fence": self.runtime.describe_fence,
            "session": self.runtime.describe_session,
        }.get(str(kind))
        if describe is None:
            raise InvalidRequest("DESCRIBE kind is memory, fence, session, model or models")
        return describe(self.owner, id_)

    # -- lifetime -------------------------------------------------------------------------

    def close(self) -> None:
        if self.server.forget(self):
            self._handlers.clear()  # they refer back to this connection
            self._page = None  # unmapped: no serve_loop runs any more
            if self.server.abandoner is not None and isinstance(self.sock, socket.socket):
                with contextlib.suppress(OSError, ValueError):  # before its fds close
                    self.server.abandoner.forget(self.sock.fileno())
            try:
                self.runtime.release_owner(self.owner)
            finally:
                if isinstance(self.sock, socket.socket):
                    # What the peer left queued goes now, fds included, whoever else holds
                    # the socket: a queued message may carry the peer's own end.
                    with contextlib.suppress(OSError, ValueError):
                        _native.purge_messages(self.sock.fileno())
                with contextlib.suppress(OSError):
                    self.sock.close()
                if self._process is not None:
                    self._process.close()
                self.runtime.metrics.ipc_connections.dec()


def known_features(asked: list[str]) -> list[str]:
    """The features a HELLO asked for that the service knows, in the service's order: what
    its reply names and the connection keeps."""
    return [f for f in codec.FEATURES if f in asked]


def features_of(bits: int) -> list[str]:
    """The features whose bits are set (bit i: codec.FEATURES[i]), as the accept loop names
    those a HELLO it answered asked for."""
    return [f for i, f in enumerate(codec.FEATURES) if bits >> i & 1]


def hello_reply(runtime: Runtime, features: list[str]) -> dict[str, Any]:
    """What a HELLO that asked for ``features`` (those the service knows) is answered, here
    and by the accept loop (IpcServer.start: one reply for each set of features)."""
    return {
        "server": "fenceline",
        "version": __version__,
        "protocol": codec.VERSION,
        "features": features,
        "capabilities": runtime.capabilities(),
    }


def _hung_up(sock: socket.socket) -> bool:
    """True once the peer closed its end of a Unix socket (or died: the kernel closed it)."""
    try:
        p = select.poll()
        p.register(sock.fileno(), select.POLLHUP)
        return any(ev & (select.POLLHUP | select.POLLERR) for _, ev in p.poll(0))
    except (OSError, ValueError):  # closed meanwhile
        return True


class IpcServer(ServerBase):
    """``allow_uids``: peers whose uid may connect (SO_PEERCRED) besides the service's own.

    The socket file's mode only keeps other users out early; the peer's uid is the real check.
    With no other uid allowed the socket is 0600 in a 0700 directory; with others it is 0666 in
    a directory they can traverse (0711 when the service creates it), and :meth:`start` fails
    when an allowed user could not reach it.

    Connections are accepted by a native loop (``_native.Acceptor``) on the accept thread with
    the GIL released: it refuses by itself the peers that the refusal table names (a uid at
    its limit or not allowed, everyone while the total is reached), which this server keeps
    in step with its counts (:meth:`_counted`); every other connection comes here to be
    admitted or refused (docs/reliability.md, "Connections")."""

    def __init__(
        self,
        runtime: Runtime,
        path: Path | None = None,
        spin_ns: int = 100_000,
        allow_uids: frozenset[int] | None = None,
        limits: ConnectionLimits | None = None,
    ) -> None:
        super().__init__(runtime, spin_ns, limits)
        self.path = Path(path) if path is not None else default_socket_path()
        # The service's own user always may connect: --allow-uid adds users, it replaces nobody.
        self.allow_uids = frozenset({os.geteuid(), *(allow_uids or ())})
        self._sock: socket.socket | None = None
        self._acceptor: Any = None  # _native.Acceptor, made by start()
        self.abandoner = abandon.Abandoner()
        self._reasons: dict[int, str] = {}  # why the table refuses a uid (-1: everyone)

    def start(self) -> None:
        try:
            self._listen()
        except OSError as e:
            raise InvalidArgument(socket_error(self.path, e)) from None
        assert self._sock is not None
        self._acceptor = _native.Acceptor(
            self._sock.fileno(),
            codec.encode_error(
                0, ResourceExhausted("the service is out of file descriptors; retry later")),
            grace_s=REFUSAL_GRACE_S, max_pending=MAX_HELD_REFUSALS, per_s=REFUSALS_PER_S,
            burst=REFUSAL_BURST, greet_s=GREET_S)
        # A connection that says HELLO and closes costs no thread and no interpreter time: the
        # loop answers a HELLO that asks for features (bit i: codec.FEATURES[i]) with its reply.
        replies = [
            codec.encode_json(Kind.HELLO | codec.REPLY_BIT, 0, hello_reply(
                self.runtime, features_of(bits)))
            for bits in range(1 << len(codec.FEATURES))]
        self._acceptor.greet(replies, list(codec.FEATURES), codec.MAX_FEATURES,
                             sorted(self.allow_uids), self.limits.max_per_user,
                             self.limits.max_connections)
        self._thread = threading.Thread(target=self._accept, name="fenceline-ipc-accept", daemon=True)
        self._thread.start()
        if self.abandoner is not None:
            self.abandoner.start()
        log.info("IPC socket listening on %s", self.path)

    def _listen(self) -> None:
        others = self.allow_uids - {os.geteuid()}
        access.check_socket_path(self.path, others)  # the directory, a stale or live socket
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        old = os.umask(0o177)
        try:
            sock.bind(str(self.path))
            os.chmod(self.path, access.SHARED_SOCKET if others else access.PRIVATE_SOCKET)
            sock.listen(64)
        except BaseException:
            sock.close()
            raise
        finally:
            os.umask(old)
        self._sock = sock

    def accepting(self) -> bool:
        """False while the socket cannot take new connections (stopped, or the process is out
        of file descriptors): the readiness probe answers 503 then."""
        return (self._acceptor is not None and self._acceptor.accepting
                and self._thread is not None and self._thread.is_alive())

    def _accept(self) -> None:
        acceptor = self._acceptor
        short = False  # out of fds: said once, until it accepts again
        while True:
            try:
                event = acceptor.next_event()
            except OSError as e:
                log.error("IPC accept failed, no new connections: %s", e)
                return
            if event is None:  # stopped
                return
            kind, value = event
            if kind == "peer":
                self._take(*value)
            elif kind == "refused":
                self._refused_here(value)
            elif kind == "out_of_fds":
                if not short:
                    log.warning("IPC cannot accept connections: %s; retrying", value)
                    short = True
                self.runtime.metrics.errors.labels("ipc", ResourceExhausted.code).inc()
            elif kind == "accepting" and short:
                log.info("IPC accepts connections again")
                short = False

    def _take(self, fd: int, pid: int, uid: int, greeted: int, client: str | None) -> None:
        """A connection the refusal table did not refuse: admitted, or refused here.
        ``greeted`` and ``client``: the features (bits of codec.FEATURES) the accept loop's
        answer to its HELLO gave and the client's name it named (None: no HELLO answered)."""
        try:
            conn = socket.socket(fileno=fd)
        except OSError:
            os.close(fd)
            return
        try:
            allowed = uid in self.allow_uids
            if not allowed:
                logs.peer.set(f"uid {uid}")
            refused = self._admit(conn, f"uid {uid}", pid, allowed,
                                  lambda number: Connection(
                                      self, conn, number, Caller(uid, transport="ipc"),
                                      features_of(greeted), client),
                                  self._acceptor.greeting(uid))
            if isinstance(refused, PermissionDenied):  # for good: the allow-list is fixed
                with self._lock:
                    self._reasons[uid] = refused.message
                    self._acceptor.limit(uid, codec.encode_error(0, refused))
        except Exception:  # a thread that cannot start, a peer gone before its pidfd was taken
            log.exception("could not take an IPC connection")
            with contextlib.suppress(OSError):
                conn.close()

    def _counted(self, c: Served) -> None:
        """Keeps the native refusal table in step with the counts (the lock is held)."""
        uid = c.caller.uid
        if uid is None or self._acceptor is None:
            return
        held = self._per_peer.get(c.peer, 0)
        self._acceptor.admitted(uid, held, len(self._connections))
        over = self.limits.over_peer(c.peer, held)
        self._table(uid, over)
        self._table(-1, self.limits.over_total(len(self._connections)))

    def _table(self, uid: int, over: str | None) -> None:
        if self._reasons.get(uid) == over:
            return
        frame = None if over is None else codec.encode_error(0, ResourceExhausted(over))
        if uid < 0:
            self._acceptor.full(frame)
        else:
            self._acceptor.limit(uid, frame)
        if over is None:
            self._reasons.pop(uid, None)
        else:
            self._reasons[uid] = over

    def _refused_here(self, refused: list[tuple[int, int, int]]) -> None:
        """Counts and logs, once a second at most, what the native loop refused by itself."""
        for uid, code, n in refused:
            error = BY_IPC_CODE.get(code, FencelineError)
            self.runtime.metrics.errors.labels("ipc", error.code).inc(n)
            with self._lock:
                reason = (self._reasons.get(uid) if error is PermissionDenied
                          else self._reasons.get(-1) or self._reasons.get(uid)) or error.code
            log.warning("refused %d IPC connection(s) of uid %d since the last report: %s",
                        n, uid, reason)

    def _refuse(self, channel: Any, err: FencelineError) -> None:
        # Answered by the native loop, as the refusals it makes itself.
        self._acceptor.refuse(channel.detach(), codec.encode_error(0, err))

    def _wake(self, c: Served) -> None:
        with contextlib.suppress(OSError):
            c.sock.shutdown(socket.SHUT_RDWR)

    def stop(self, timeout: float = 5.0) -> None:
        if self._acceptor is not None:
            self._acceptor.stop()  # what it holds is closed, nothing more is accepted
        if self._thread is not None:
            self._thread.join(timeout)
        if self._sock is not None:
            with contextlib.suppress(OSError):
                self._sock.shutdown(socket.SHUT_RDWR)
            self._sock.close()
            self._sock = None
            with contextlib.suppress(OSError):
                self.path.unlink()
        self._stop_connections(timeout)
        if self.abandoner is not None:
            self.abandoner.close()
