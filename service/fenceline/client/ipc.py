"""The IPC client: the per-frame fast path (docs/ipc.md).

One thread per client: share a client between threads only under your own lock, or open one
per thread. That thread may keep several RUNs in flight (``send_run``, then ``recv_run_reply``
in the order they were sent); every other request waits for its own reply. ``close()`` is
safe twice; the service then releases everything this client created.
"""

from __future__ import annotations

import itertools
import socket
import struct
from pathlib import Path
from typing import TYPE_CHECKING, Any, NoReturn

from fenceline import _native, waiting
from fenceline.client.errors import ClientError, ServiceError, UsageError
from fenceline.client.frames import Fence, SharedFrame
from fenceline.client.views import View, session_body, timeout_ms_of
from fenceline.errors import FencelineError
from fenceline.protocol import codec
from fenceline.protocol.codec import Kind

if TYPE_CHECKING:
    from fenceline.client.session import Session

__all__ = ["IpcClient", "View", "session_body"]

_KIND_RUN = int(Kind.RUN)
_RUN_VALUES = "a RUN's fence values are 0..2**64-1 and its timeout_ms 0..2**32-1"


def _bad_session_id(session_id: object) -> NoReturn:
    raise UsageError(f"session id {session_id!r} is not 32 hex digits") from None


def _name_or_handle(name: str | None, handle: int | None) -> dict[str, Any]:
    if (name is None) == (handle is None):
        raise UsageError("give exactly one of name and handle")
    return {"name": name} if handle is None else {"handle": handle}


class IpcClient:
    def __init__(
        self, path: str | Path | None = None, *, max_spin_ns: int = 100_000, name: str = "python"
    ) -> None:
        self.path: Path | str
        # Windows: the service's named pipe (fenceline.ipc.pipe_server) instead of the socket.
        self._pipe: Any = None
        if _native.PLATFORM == "win32":
            from fenceline.ipc.pipe_server import default_pipe_name

            self.path = str(path) if path is not None else default_pipe_name()
            try:
                self._pipe = getattr(_native, "PipeConnection").connect(self.path)  # noqa: B009
            except FencelineError as e:
                raise ClientError(f"cannot connect to the fenceline pipe {self.path}: {e}") from None
        else:
            from fenceline.ipc.server import default_socket_path

            self.path = Path(path) if path is not None else default_socket_path()
            self._sock = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET)
            try:
                self._sock.connect(str(self.path))
            except OSError as e:
                self._sock.close()
                raise ClientError(f"cannot connect to the fenceline socket {self.path}: {e}") from None
        self._ids = itertools.count(1)
        # The socket's sends and receives, each one native call (docs/ipc.md, "The Python
        # client"); a pipe's are the pipe's own.
        self._end: Any = None
        if self._pipe is None:
            self._end = _native.ClientSocket(self._sock.fileno(), max_spin_ns, codec.RunReply)
        # The run page (docs/ipc.md): None until the first run() asks the service for one.
        self._page: bool | None = None if self._end is not None else False
        self._in_flight = 0  # RUNs sent on the socket whose replies are still to be read
        self._closed = False
        try:
            # It reads the RUN reply's flags: while they say the service's cores are shared,
            # it neither naps nor stays runnable (docs/fences.md).
            self.server = self._call(Kind.HELLO, codec.client_hello(name))
        except BaseException:
            self.close()
            raise

    # -- transport ------------------------------------------------------------------------

    def _exchange(self, frame: bytes, request_id: int, fds: list[int] | None = None) -> codec.Frame:
        self._send(frame, fds)
        return self._receive(request_id)

    def _send(self, frame: bytes, fds: list[int] | None = None) -> None:
        if self._closed:
            raise UsageError("the client is closed")
        if self._pipe is not None:
            if fds:
                raise ClientError("Windows has no fd passing: share frames and fences by name")
            if not self._pipe.send(frame):
                self._raise_refusal()
                raise ClientError("IPC transport failed: the service closed the pipe")
            return
        try:
            if fds:
                socket.send_fds(self._sock, [frame], fds)
            else:
                self._end.send(frame)
        except OSError as e:
            self._send_failed(e)

    def _send_failed(self, e: Exception) -> NoReturn:
        """A send that failed: the service's refusal when it left one, else the transport's
        failure."""
        self._raise_refusal()
        raise ClientError(f"IPC transport failed: {e}") from None

    def _receive(self, request_id: int) -> codec.Frame:
        return self._reply(self._receive_frame(request_id, False), request_id)  # type: ignore[arg-type]

    def _receive_frame(self, request_id: int, run_reply: bool = True) -> codec.RunReply | bytes:
        """The next frame the service sent: (with ``run_reply``) the reply to the RUN
        ``request_id``, read natively, or any other frame's bytes."""
        if self._closed:
            raise UsageError("the client is closed")
        got: object
        try:
            if self._pipe is not None:
                got = self._pipe.recv(codec.MAX_FRAME)
            else:
                got = self._end.receive(request_id & 0xFFFFFFFF, waiting.gate().native, run_reply)
        except (OSError, FencelineError) as e:
            raise ClientError(f"IPC transport failed: {e}") from None
        return self._received(got)

    @staticmethod
    def _received(got: object) -> codec.RunReply | bytes:
        """What a native receive returned: a frame, or the transport's failure raised."""
        if got.__class__ is codec.RunReply or got.__class__ is bytes:
            return got
        if got is None:
            raise ClientError("the service closed the connection")
        raise ClientError(f"bad reply from the service: {got}")

    def _reply(self, data: bytes, request_id: int) -> codec.Frame:
        """The frame ``data`` as the reply to ``request_id``; raises the service's error."""
        try:
            reply = codec.decode(data)
        except FencelineError as e:
            raise ClientError(f"bad reply from the service: {e}") from None
        if reply.kind == Kind.ERROR and reply.request_id in (0, request_id):
            # request_id 0: the connection itself was refused (peer not allowed, shutting down)
            err = codec.decode_error(reply.body)
            raise ServiceError(err.message, err.code, details=err.details)
        if reply.request_id != request_id:
            raise ClientError(f"reply {reply.request_id} does not answer request {request_id}")
        return reply

    def _raise_refusal(self) -> None:
        """The service may have refused the connection with an ERROR before closing it."""
        if self._pipe is not None:
            return
        try:
            data = self._sock.recv(codec.MAX_FRAME, socket.MSG_DONTWAIT)
            reply = codec.decode(data)
        except (OSError, FencelineError):
            return
        if reply.kind == Kind.ERROR:
            err = codec.decode_error(reply.body)
            raise ServiceError(err.message, err.code, details=err.details)

    def _call(self, kind: Kind, body: dict[str, Any], fds: list[int] | None = None) -> Any:
        rid = next(self._ids)
        reply = self._exchange(codec.encode_json(kind, rid, body), rid, fds)
        return codec.decode_json(reply.body)

    # -- objects --------------------------------------------------------------------------

    def import_memory(
        self,
        frame: SharedFrame | None = None,
        *,
        name: str | None = None,
        size_bytes: int = 0,
        offset_bytes: int = 0,
        access: str = "read_write",
    ) -> str:
        """Registers a frame (by name when it has one, else by fd, or on Windows by handle) or a
        named object; returns its id."""
        body: dict[str, Any] = {"size_bytes": size_bytes, "offset_bytes": offset_bytes, "access": access}
        fds: list[int] = []
        if frame is not None and frame.name is None and self._pipe is not None:
            body["handle_type"] = "host_shm"
            body["handle"] = int(frame.handle.handle)  # the service duplicates it from us
        elif frame is not None and frame.name is None:
            body["handle_type"] = "host_fd"
            fds = [frame.fd]
        else:
            body["handle_type"] = "host_shm"
            body["name"] = name if frame is None else frame.name
        return str(self._call(Kind.IMPORT_MEMORY, body, fds)["id"])

    def import_fence(self, fence: Fence | None = None, *, name: str | None = None) -> str:
        body: dict[str, Any] = {"fence_type": "host_timeline"}
        fds: list[int] = []
        if fence is not None and fence.name is None and self._pipe is not None:
            body["handle"] = int(fence.handle.handle)
            body["wake_handle"] = int(fence.handle.wake_handle)
        elif fence is not None and fence.name is None:
            fds = [fence.fd]
        else:
            body["name"] = name if fence is None else fence.name
        return str(self._call(Kind.IMPORT_FENCE, body, fds)["id"])

    def import_gpu_memory(
        self,
        fd: int,
        allocation_size: int,
        *,
        device_uuid: str,
        dedicated: bool = False,
        offset_bytes: int = 0,
        size_bytes: int = 0,
        access: str = "read_write",
    ) -> str:
        """Registers Vulkan memory exported as an OPAQUE_FD (docs/gpu.md). The service gets its
        own copy of the fd; the caller still owns ``fd`` and should close it afterwards."""
        body = {
            "handle_type": "opaque_fd", "allocation_size_bytes": allocation_size,
            "dedicated": dedicated, "device_uuid": device_uuid, "offset_bytes": offset_bytes,
            "size_bytes": size_bytes, "access": access,
        }
        return str(self._call(Kind.IMPORT_MEMORY, body, [fd])["id"])

    def import_gpu_fence(self, fd: int, *, device_uuid: str) -> str:
        """Registers a Vulkan timeline semaphore exported as an OPAQUE_FD; the caller keeps
        ``fd``."""
        body = {"fence_type": "vk_timeline_opaque_fd", "device_uuid": device_uuid}
        return str(self._call(Kind.IMPORT_FENCE, body, [fd])["id"])

    def import_cuda_ipc(
        self, handle: bytes, size_bytes: int, *, device_id: int = 0, access: str = "read_write"
    ) -> str:
        """Registers another process's CUDA allocation by its 64-byte cudaIpcMemHandle_t."""
        body = {
            "handle_type": "cuda_ipc", "ipc_handle": bytes(handle).hex(), "size_bytes": size_bytes,
            "device_id": device_id, "access": access,
        }
        return str(self._call(Kind.IMPORT_MEMORY, body)["id"])

    def import_d3d12_memory(
        self,
        kind: str,
        name: str | None,
        allocation_size: int,
        *,
        adapter_luid: int,
        handle: int | None = None,
        offset_bytes: int = 0,
        size_bytes: int = 0,
        access: str = "read_write",
    ) -> str:
        """Registers a D3D12 heap or committed resource (``kind`` d3d12_heap, d3d12_resource) by
        the name given to CreateSharedHandle, or by the NT handle it returned (``handle``, with
        ``name`` None: the service duplicates it from this process; the caller keeps its own)
        (docs/windows.md); only Windows services accept it."""
        body = {
            "handle_type": kind, "allocation_size_bytes": allocation_size,
            "adapter_luid": adapter_luid, "offset_bytes": offset_bytes, "size_bytes": size_bytes,
            "access": access, **_name_or_handle(name, handle),
        }
        return str(self._call(Kind.IMPORT_MEMORY, body)["id"])

    def import_d3d12_fence(
        self, name: str | None = None, *, adapter_luid: int, handle: int | None = None,
        current_value: int = 0,
    ) -> str:
        """Registers a shared ID3D12Fence by the name given to CreateSharedHandle, or by the NT
        handle it returned (duplicated by the service; the caller keeps its own).
        ``current_value``: the fence's GetCompletedValue() now; the service signals only values
        above it."""
        body = {"fence_type": "d3d12_fence", "adapter_luid": adapter_luid,
                "current_value": current_value, **_name_or_handle(name, handle)}
        return str(self._call(Kind.IMPORT_FENCE, body)["id"])

    def create_session(
        self,
        model: str,
        inputs: dict[str, View],
        outputs: dict[str, View],
        wait_fence: str,
        signal_fence: str,
        *,
        mode: str = "request",
        policy: str = "latest",
        spin_us: int | None = None,
        start: bool = True,
    ) -> dict[str, Any]:
        """A session; with ``mode="streaming"`` the service runs each new value of
        ``wait_fence`` by itself and signals ``signal_fence`` with it (docs/streaming.md)."""
        body = session_body(model, inputs, outputs, wait_fence, signal_fence, mode=mode,
                            policy=policy, spin_us=spin_us, start=start)
        return dict(self._call(Kind.CREATE_SESSION, body))

    def session(
        self,
        model: str,
        inputs: dict[str, View],
        outputs: dict[str, View],
        wait_fence: str,
        signal_fence: str,
        **options: Any,
    ) -> Session:
        """:meth:`create_session` as a :class:`~fenceline.client.Session` object, with ``run``,
        ``run_async`` and ``close`` (which releases it on the service)."""
        from fenceline.client.session import Session

        return Session(self, self.create_session(model, inputs, outputs, wait_fence, signal_fence,
                                                 **options))

    def model_metadata(self, name: str, version: str | None = None) -> dict[str, Any]:
        """The model's KServe metadata: ``inputs`` and ``outputs`` with name, datatype, shape
        (-1 for a free dimension); :meth:`Layout.of <fenceline.client.Layout.of>` takes it."""
        body: dict[str, Any] = {"kind": "model", "id": name}
        if version is not None:
            body["version"] = version
        return dict(self._call(Kind.DESCRIBE, body))

    def run(
        self,
        session_id: str,
        wait_value: int,
        signal_value: int | None = None,
        timeout_ms: int | None = None,
        *,
        timeout_s: float | None = None,
    ) -> codec.RunReply:
        """Waits for the input fence, runs, signals; returns what the service signalled.
        ``timeout_s``: the longest fence wait (``timeout_ms``, the older spelling)."""
        # A renderer's per-frame call: one Python step around one native call. Each further
        # step costs microseconds here, since the model's run has just left this core's caches
        # cold (a 720p frame on two CPUs: 15 us for five more calls).
        if timeout_s is not None:
            timeout_ms = timeout_ms_of(timeout_s, timeout_ms)
        if self._page is None and not self._closed:
            self._page = self._open_page()
        # One RUN at a time through the run page, which takes the socket for a reply worth
        # sleeping for (docs/ipc.md, "The run page").
        if not self._page or self._in_flight or self._closed:
            return self.recv_run_reply(self.send_run(session_id, wait_value, signal_value,
                                                     timeout_ms))
        try:
            sid = codec.session_id_bytes(session_id)  # cached: the same few ids every frame
        except (FencelineError, TypeError):
            _bad_session_id(session_id)
        rid = next(self._ids)
        try:
            got = self._end.run_page(
                _KIND_RUN, rid & 0xFFFFFFFF, sid, wait_value, signal_value or 0,
                codec.DEFAULT_TIMEOUT if timeout_ms is None else timeout_ms,
                waiting.gate().native)
        except (OSError, FencelineError) as e:
            self._send_failed(e)
        except TypeError:
            raise UsageError(_RUN_VALUES) from None
        if got.__class__ is codec.RunReply:
            return got
        return self._run_reply(self._received(got), rid)

    def _open_page(self) -> bool:
        """Hands the service a run page with a slot for each RUN in flight it may carry; False
        where it takes none (an older service)."""
        try:
            fd = self._end.make_page()
        except FencelineError:
            return False
        taken, slots = False, 1
        try:
            answer = self._call(Kind.OPEN_RUN_PAGE, {"slots": _native.RUN_PAGE_SLOTS}, [fd])
            taken = True
            slots = answer.get("slots", 1)  # an older service: one RUN at a time
        except ServiceError:
            pass
        finally:
            self._end.keep_page(taken, slots if type(slots) is int and slots > 0 else 1)
        return taken

    def send_run(
        self,
        session_id: str,
        wait_value: int,
        signal_value: int | None = None,
        timeout_ms: int | None = None,
    ) -> int:
        """Sends a RUN and returns at once with its request id; collect the reply with
        :meth:`recv_run_reply`. Several RUNs may be in flight on one connection (frames in
        flight on their own sessions): the service answers them in the order they were sent,
        so collect the replies in that order. While the run page has a free slot and no RUN
        of this connection is in flight on the socket, the RUN is posted on the page and its
        reply read there (docs/ipc.md, "The run page"); else it goes on the socket."""
        return self._send_run(Kind.RUN, session_id, wait_value, signal_value, timeout_ms)

    def run_async(
        self, session_id: str, wait_value: int, signal_value: int | None = None
    ) -> codec.RunReply:
        """A CUDA session replies once the wait, the model and the signal are enqueued on the
        GPU; the renderer then waits for the output semaphore itself."""
        return self.recv_run_reply(self.send_run_async(session_id, wait_value, signal_value))

    def send_run_async(
        self, session_id: str, wait_value: int, signal_value: int | None = None
    ) -> int:
        """Sends a RUN_ASYNC and returns at once with its request id, so the renderer can submit
        its own GPU work while the service enqueues; collect the reply with
        :meth:`recv_run_reply`, later if need be: as with :meth:`send_run`, replies come in the
        order the runs were sent."""
        return self._send_run(Kind.RUN_ASYNC, session_id, wait_value, signal_value, None)

    def _send_run(self, kind: Kind, session_id: str, wait_value: int, signal_value: int | None,
                  timeout_ms: int | None) -> int:
        try:
            sid = codec.session_id_bytes(session_id)
        except (FencelineError, TypeError):
            _bad_session_id(session_id)
        if self._end is None or self._closed:
            rid = next(self._ids)
            self._send(codec.run_frame(rid, sid, wait_value, signal_value, timeout_ms, kind=kind))
            return rid
        if self._page is None and not self._in_flight:
            self._page = self._open_page()
        rid = next(self._ids)
        try:
            self._end.send_run(kind, rid & 0xFFFFFFFF, sid, wait_value, signal_value or 0,
                               codec.DEFAULT_TIMEOUT if timeout_ms is None else timeout_ms)
        except OSError as e:
            self._send_failed(e)
        except TypeError:
            raise UsageError(_RUN_VALUES) from None
        self._in_flight += 1
        return rid

    def recv_run_reply(self, request_id: int) -> codec.RunReply:
        self._in_flight = max(0, self._in_flight - 1)
        return self._run_reply(self._receive_frame(request_id), request_id)

    def _run_reply(self, got: codec.RunReply | bytes, request_id: int) -> codec.RunReply:
        if got.__class__ is codec.RunReply:
            return got
        # Anything else (an error, a pipe's frame) goes the general way.
        data: bytes = got  # type: ignore[assignment]
        reply = codec.run_reply_of(data, request_id)
        return reply if reply is not None else codec.decode_run_reply(
            self._reply(data, request_id).body)

    def describe(self, kind: str, id: str) -> dict[str, Any]:
        return dict(self._call(Kind.DESCRIBE, {"kind": kind, "id": id}))

    def start_session(self, id: str) -> dict[str, Any]:
        """Starts or resumes a streaming session; returns its description."""
        return dict(self._call(Kind.START_SESSION, {"id": id}))

    def pause_session(self, id: str) -> dict[str, Any]:
        """Returns once the service has signalled the frame in flight and stopped waiting."""
        return dict(self._call(Kind.PAUSE_SESSION, {"id": id}))

    def stop_session(self, id: str) -> dict[str, Any]:
        """Stops and releases a streaming session; returns its final description."""
        return dict(self._call(Kind.STOP_SESSION, {"id": id}))

    @property
    def server_pid(self) -> int:
        """The service's process id, from the socket's peer credentials (or the pipe's)."""
        if self._pipe is not None:
            return int(self._pipe.peer_pid)
        creds = self._sock.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, struct.calcsize("3i"))
        return int(struct.unpack("3i", creds)[0])

    @property
    def waits(self) -> dict[str, int]:
        """How this connection's waits for the service went, counted since it opened
        (docs/ipc.md, "The Python client's side"): ``spun`` first, ``napped`` (``nap_missed``:
        of those, the ones whose spin ran out before the answer came), ``blocked`` at once;
        ``stayed`` runnable first (``stayed_answered``: the answer came meanwhile). A reply that
        was there at once took no wait. Empty over the Windows pipe, whose waits are its own."""
        return {} if self._end is None else dict(self._end.waits)

    @property
    def run_page_counts(self) -> dict[str, int]:
        """How this connection's RUNs used the run page: ``posted`` there, and ``answered``
        there (the others' replies, refusals and failures, came on the socket). Empty without
        a page's transport (the Windows pipe)."""
        return {} if self._end is None else dict(self._end.page_counts)

    def release_memory(self, id: str) -> None:
        self._call(Kind.RELEASE_MEMORY, {"id": id})

    def release_fence(self, id: str) -> None:
        self._call(Kind.RELEASE_FENCE, {"id": id})

    def release_session(self, id: str) -> None:
        self._call(Kind.RELEASE_SESSION, {"id": id})

    @property
    def closed(self) -> bool:
        return self._closed

    def close(self) -> None:
        """Safe twice; the service then releases everything this client created."""
        if not self._closed:
            self._closed = True
            if self._pipe is not None:
                self._pipe.close()
            else:
                self._sock.close()

    def __enter__(self) -> IpcClient:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

