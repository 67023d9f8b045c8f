"""One behaviour, every client: the same small interface over the HTTP client, the Python IPC
client and the C client (libfenceline_client, called through ctypes: the real library, its
real socket code). Objects are shared by name, which every transport can import.

Errors come back as :class:`Failed` with the stable code, whatever the transport; the HTTP
adapter also checks that the status is the one the error table gives that code."""

from __future__ import annotations

import ctypes
import re
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

from fenceline import errors
from fenceline.api.errors import status_of
from fenceline.client import Fence, HttpClient, IpcClient, ServiceError, SharedFrame, View, c_api


class Failed(Exception):
    def __init__(self, code: str, message: str) -> None:
        super().__init__(f"[{code}] {message}")
        self.code = code
        self.message = message


@dataclass(frozen=True)
class Ran:
    signal_value: int


class Transport(Protocol):
    name: str

    def import_memory(self, frame: SharedFrame, access: str = "read_write") -> str: ...

    def import_fence(self, fence: Fence) -> str: ...

    def create_session(self, model: str, inputs: dict[str, View], outputs: dict[str, View],
                       wait_fence: str, signal_fence: str) -> str: ...

    def run(self, session: str, wait_value: int, signal_value: int | None = None,
            timeout_ms: int | None = None) -> Ran: ...

    def release_session(self, session: str) -> None: ...

    def close(self) -> None: ...


def _service_errors(call: Callable[[], Any], http: bool = False) -> Any:
    try:
        return call()
    except ServiceError as e:
        if http:  # the status is the one the service's table gives the code
            assert e.status == status_of(errors.BY_CODE[e.code]("")), (e.code, e.status)
        raise Failed(e.code, e.message) from None


class PythonTransport:
    """HttpClient or IpcClient: the same method names, told apart only where they differ."""

    def __init__(self, name: str, client: HttpClient | IpcClient) -> None:
        self.name = name
        self.client = client
        self.http = isinstance(client, HttpClient)

    def import_memory(self, frame: SharedFrame, access: str = "read_write") -> str:
        assert frame.name is not None
        return str(_service_errors(
            lambda: self.client.import_memory(name=frame.name, access=access), self.http))

    def import_fence(self, fence: Fence) -> str:
        assert fence.name is not None
        return str(_service_errors(lambda: self.client.import_fence(name=fence.name), self.http))

    def create_session(self, model: str, inputs: dict[str, View], outputs: dict[str, View],
                       wait_fence: str, signal_fence: str) -> str:
        info = _service_errors(lambda: self.client.create_session(
            model, inputs, outputs, wait_fence, signal_fence), self.http)
        return str(info["id"])

    def run(self, session: str, wait_value: int, signal_value: int | None = None,
            timeout_ms: int | None = None) -> Ran:
        r = _service_errors(
            lambda: self.client.run(session, wait_value, signal_value, timeout_ms), self.http)
        if self.http:
            assert set(r["timings_us"]) == {"wait", "infer", "total"}
            return Ran(int(r["signal_value"]))
        return Ran(int(r.signal_value))

    def release_session(self, session: str) -> None:
        _service_errors(lambda: self.client.release_session(session), self.http)

    def close(self) -> None:
        self.client.close()


def _api_fields() -> list[str]:
    """The members of struct FlApi in order, read from the installed header, so this table
    cannot drift from the library's."""
    text = (c_api.c_include_dir() / "fenceline" / "fenceline_client.h").read_text()
    body = text[text.index("struct FlApi {"):]
    body = body[: body.index("\n};")]
    return re.findall(r"\(\*(\w+)\)\(", body)


class _Api:
    def __init__(self) -> None:
        lib = ctypes.CDLL(str(Path(c_api.c_library_dir()) / c_api.LIBRARY))
        lib.FlGetApi.restype = ctypes.c_void_p
        lib.FlGetApi.argtypes = [ctypes.c_uint32]
        table = lib.FlGetApi(3)
        assert table, "FlGetApi(3) returned NULL"
        self._lib = lib  # keeps the library loaded while the table is used
        self._slots = {
            name: ctypes.c_void_p.from_address(table + i * ctypes.sizeof(ctypes.c_void_p)).value
            for i, name in enumerate(_api_fields())
        }

    def fn(self, name: str, restype: Any, *argtypes: Any) -> Any:
        return ctypes.CFUNCTYPE(restype, *argtypes)(self._slots[name])


P = ctypes.c_void_p


class CTransport:
    """The C client, one FlClient, through its function table."""

    name = "c"

    def __init__(self, socket: Path) -> None:
        api = _Api()
        self._code = api.fn("GetErrorCode", ctypes.c_int, P)
        self._message = api.fn("GetErrorMessage", ctypes.c_char_p, P)
        self._code_name = api.fn("GetErrorCodeName", ctypes.c_char_p, ctypes.c_int)
        self._release_status = api.fn("ReleaseStatus", None, P)
        self._create_client = api.fn("CreateClient", P, ctypes.c_char_p, ctypes.c_char_p,
                                     ctypes.POINTER(P))
        self._release_client = api.fn("ReleaseClient", None, P)
        self._import_memory = api.fn("ImportMemoryName", P, P, ctypes.c_char_p, ctypes.c_uint64,
                                     ctypes.c_uint64, ctypes.c_int, ctypes.POINTER(P))
        self._memory_id = api.fn("GetMemoryImportId", ctypes.c_char_p, P)
        self._import_fence = api.fn("ImportFenceName", P, P, ctypes.c_char_p, ctypes.POINTER(P))
        self._fence_id = api.fn("GetFenceImportId", ctypes.c_char_p, P)
        self._create_session = api.fn("CreateSession", P, P, ctypes.POINTER(_SessionDesc),
                                      ctypes.POINTER(P))
        self._session_id = api.fn("GetSessionId", ctypes.c_char_p, P)
        self._run = api.fn("Run", P, P, ctypes.c_uint64, ctypes.c_uint64, ctypes.c_uint32,
                           ctypes.POINTER(_RunResult))
        self._release_session = api.fn("ReleaseSession", None, P)
        self._release_memory = api.fn("ReleaseMemoryImport", None, P)
        self._release_fence = api.fn("ReleaseFenceImport", None, P)
        self._client = P()
        self._check(self._create_client(str(socket).encode(), b"transport-test",
                                        ctypes.byref(self._client)))
        self._memory: dict[str, P] = {}
        self._fences: dict[str, P] = {}
        self._sessions: dict[str, P] = {}

    def _check(self, status: int | None) -> None:
        if status:
            code = self._code_name(self._code(status)).decode()
            message = self._message(status).decode()
            self._release_status(status)
            raise Failed(code, message)

    def import_memory(self, frame: SharedFrame, access: str = "read_write") -> str:
        assert frame.name is not None
        handle = P()
        self._check(self._import_memory(self._client, str(frame.name).encode(), 0, 0,
                                        0 if access == "read_write" else 1, ctypes.byref(handle)))
        id_ = self._memory_id(handle).decode()
        self._memory[id_] = handle
        return str(id_)

    def import_fence(self, fence: Fence) -> str:
        assert fence.name is not None
        handle = P()
        self._check(self._import_fence(self._client, str(fence.name).encode(),
                                       ctypes.byref(handle)))
        id_ = self._fence_id(handle).decode()
        self._fences[id_] = handle
        return str(id_)

    def create_session(self, model: str, inputs: dict[str, View], outputs: dict[str, View],
                       wait_fence: str, signal_fence: str) -> str:
        keep: list[Any] = []

        def views(specs: dict[str, View]) -> Any:
            arr = (_TensorView * max(1, len(specs)))()
            for i, (name, v) in enumerate(specs.items()):
                shape = (ctypes.c_int64 * len(v.shape))(*v.shape)
                keep.extend((shape, name.encode(), v.datatype.encode()))
                arr[i] = _TensorView(name.encode(), self._memory[v.memory], v.offset_bytes,
                                     v.datatype.encode(), shape, len(v.shape))
            keep.append(arr)
            return arr

        desc = _SessionDesc(model.encode(), views(inputs), len(inputs), views(outputs),
                            len(outputs), self._fences[wait_fence], self._fences[signal_fence])
        handle = P()
        self._check(self._create_session(self._client, ctypes.byref(desc), ctypes.byref(handle)))
        id_ = self._session_id(handle).decode()
        self._sessions[id_] = handle
        return str(id_)

    def run(self, session: str, wait_value: int, signal_value: int | None = None,
            timeout_ms: int | None = None) -> Ran:
        handle = self._sessions.get(session)
        if handle is None:  # an id this client did not create: OpenSession's "not found" path
            raise Failed("not_found", f"no session with id {session!r} on this client")
        out = _RunResult()
        self._check(self._run(handle, wait_value, signal_value or 0,
                              0xFFFFFFFF if timeout_ms is None else timeout_ms,
                              ctypes.byref(out)))
        return Ran(int(out.signal_value))

    def release_session(self, session: str) -> None:
        self._release_session(self._sessions.pop(session))

    def close(self) -> None:
        for s in self._sessions.values():
            self._release_session(s)
        for m in self._memory.values():
            self._release_memory(m)
        for f in self._fences.values():
            self._release_fence(f)
        self._sessions, self._memory, self._fences = {}, {}, {}
        self._release_client(self._client)


class _TensorView(ctypes.Structure):
    _fields_ = [("name", ctypes.c_char_p), ("memory", P), ("offset_bytes", ctypes.c_uint64),
                ("datatype", ctypes.c_char_p), ("shape", ctypes.POINTER(ctypes.c_int64)),
                ("rank", ctypes.c_size_t)]


class _SessionDesc(ctypes.Structure):
    _fields_ = [("model", ctypes.c_char_p), ("inputs", ctypes.POINTER(_TensorView)),
                ("input_count", ctypes.c_size_t), ("outputs", ctypes.POINTER(_TensorView)),
                ("output_count", ctypes.c_size_t), ("wait_fence", P), ("signal_fence", P)]


class _RunResult(ctypes.Structure):
    _fields_ = [("signal_value", ctypes.c_uint64), ("wait_us", ctypes.c_uint32),
                ("infer_us", ctypes.c_uint32), ("total_us", ctypes.c_uint32),
                ("reserved", ctypes.c_uint32)]


TRANSPORTS = ["http", "ipc", "c"]


def open_transport(name: str, url: str, socket: Path) -> Transport:
    if name == "http":
        return PythonTransport("http", HttpClient(url))
    if name == "ipc":
        return PythonTransport("ipc", IpcClient(socket, name="transport-test"))
    return CTransport(socket)
