"""The IPC wire format (docs/ipc.md): one SOCK_SEQPACKET message is one frame.

Every frame starts with a 16-byte little-endian header::

    u32 magic 0x50494C46 ("FLIP")   u16 version 1   u16 kind   u32 request_id   u32 body_length

Control messages carry UTF-8 JSON bodies with the same fields as the HTTP API; the per-frame
RUN and its reply are fixed binary structs. Replies echo request_id; a successful reply's kind
is the request kind with bit 15 set, a failure is kind ERROR.
"""

from __future__ import annotations

import functools
import json
import struct
from enum import IntEnum
from typing import Any, NamedTuple

from fenceline import _native
from fenceline.errors import BY_IPC_CODE, FencelineError, InvalidRequest

# The numbers are native/common/fenceline_wire.h's, which the C client compiles in too; the
# struct layouts below are checked against its sizes by tests/unit/test_wire_contract.py.
MAGIC = _native.WIRE_MAGIC
VERSION = _native.WIRE_VERSION
HEADER = struct.Struct("<IHHII")
HEADER_SIZE = HEADER.size  # 16
MAX_FRAME = _native.WIRE_MAX_FRAME
MAX_FDS = _native.WIRE_MAX_FDS
REPLY_BIT = _native.WIRE_REPLY_BIT
# A RUN reply's flags: the service's runs on the CPU share its cores with other renderers'
# (docs/ipc.md, "RUN reply"). Set only for a connection whose HELLO named FEATURE_REPLY_FLAGS.
REPLY_CPUS_SHARED = _native.WIRE_REPLY_CPUS_SHARED
# What a client may ask for in HELLO's "features" (docs/ipc.md, "HELLO"); names it does not
# know are left out of the reply, so a client learns which ones this service has.
FEATURE_REPLY_FLAGS: str = _native.WIRE_FEATURE_REPLY_FLAGS
FEATURES = (FEATURE_REPLY_FLAGS,)
MAX_FEATURES = 32


def client_hello(name: str) -> dict[str, Any]:
    """The HELLO fenceline's clients send (the C client writes the same): it names the client
    and asks for the RUN reply's flags. The service's accept loop answers it without Python
    (docs/reliability.md, "Cheap churn")."""
    return {"client": name, "features": [FEATURE_REPLY_FLAGS]}

# session id (16 raw bytes), wait_value, signal_value (0: same as wait), timeout_ms, flags
RUN_BODY = struct.Struct("<16sQQII")
# signal_value, wait_us, infer_us, total_us, flags
RUN_REPLY_BODY = struct.Struct("<QIIII")
ERROR_CODE = struct.Struct("<I")
DEFAULT_TIMEOUT = _native.WIRE_TIMEOUT_DEFAULT
_KINDS = _native.wire_kinds()


class Kind(IntEnum):
    HELLO = _KINDS["HELLO"]
    IMPORT_MEMORY = _KINDS["IMPORT_MEMORY"]
    RELEASE_MEMORY = _KINDS["RELEASE_MEMORY"]
    IMPORT_FENCE = _KINDS["IMPORT_FENCE"]
    RELEASE_FENCE = _KINDS["RELEASE_FENCE"]
    CREATE_SESSION = _KINDS["CREATE_SESSION"]
    RELEASE_SESSION = _KINDS["RELEASE_SESSION"]
    DESCRIBE = _KINDS["DESCRIBE"]
    RUN = _KINDS["RUN"]
    RUN_ASYNC = _KINDS["RUN_ASYNC"]  # RUN's body; replied to with a RUN reply once enqueued
    # Streaming sessions (docs/streaming.md): body {"id": ...}, reply the session description.
    START_SESSION = _KINDS["START_SESSION"]
    PAUSE_SESSION = _KINDS["PAUSE_SESSION"]
    STOP_SESSION = _KINDS["STOP_SESSION"]
    # The run page (docs/ipc.md): one fd, a sealed memfd; body {}. NUDGE: look at the page.
    OPEN_RUN_PAGE = _KINDS["OPEN_RUN_PAGE"]
    NUDGE = _KINDS["NUDGE"]
    ERROR = _KINDS["ERROR"]


REQUEST_KINDS = frozenset(k for k in Kind if k not in (Kind.ERROR, Kind.NUDGE))


# NamedTuples rather than dataclasses: they are built on every frame, and cost a third as much.
class Frame(NamedTuple):
    kind: int
    request_id: int
    body: bytes


class Run(NamedTuple):
    session_id: bytes
    wait_value: int
    signal_value: int | None
    timeout_ms: int | None
    flags: int = 0


class RunReply(NamedTuple):
    signal_value: int
    wait_us: int
    infer_us: int
    total_us: int
    flags: int = 0  # REPLY_CPUS_SHARED


def encode(kind: int, request_id: int, body: bytes = b"") -> bytes:
    if len(body) > MAX_FRAME - HEADER_SIZE:
        raise InvalidRequest(f"frame body of {len(body)} bytes exceeds {MAX_FRAME - HEADER_SIZE}")
    return HEADER.pack(MAGIC, VERSION, kind, request_id & 0xFFFFFFFF, len(body)) + body


def decode(data: bytes) -> Frame:
    """Parses one frame; anything malformed raises InvalidRequest."""
    if len(data) >= HEADER_SIZE:
        magic, version, kind, request_id, length = HEADER.unpack_from(data)
        if magic == MAGIC and version == VERSION and length == len(data) - HEADER_SIZE:
            return Frame(kind, request_id, data[HEADER_SIZE:])
    if len(data) < HEADER_SIZE:
        raise InvalidRequest(f"frame of {len(data)} bytes is shorter than the 16-byte header")
    magic, version, kind, request_id, length = HEADER.unpack_from(data)
    if magic != MAGIC:
        raise InvalidRequest(f"bad frame magic 0x{magic:08X}, expected 0x{MAGIC:08X}")
    if version != VERSION:
        raise InvalidRequest(f"protocol version {version} is not supported (this is {VERSION})")
    if length != len(data) - HEADER_SIZE:
        raise InvalidRequest(
            f"body_length {length} does not match the {len(data) - HEADER_SIZE} bytes received"
        )
    return Frame(kind, request_id, data[HEADER_SIZE:])


def peek_request_id(data: bytes) -> int:
    """The request_id of a frame that failed to decode: echoed in the error reply when the
    16 header bytes arrived, else 0."""
    return int(HEADER.unpack_from(data)[3]) if len(data) >= HEADER_SIZE else 0


def encode_json(kind: int, request_id: int, obj: Any) -> bytes:
    return encode(kind, request_id, json.dumps(obj, separators=(",", ":")).encode())


def decode_json(body: bytes) -> dict[str, Any]:
    try:
        obj = json.loads(body.decode("utf-8")) if body else {}
    except (UnicodeDecodeError, ValueError) as e:
        raise InvalidRequest(f"control body is not UTF-8 JSON: {e}") from None
    except RecursionError:
        raise InvalidRequest("control body: JSON nested too deeply") from None
    if not isinstance(obj, dict):
        raise InvalidRequest("control body must be a JSON object")
    return obj


RUN_FRAME = struct.Struct("<IHHII" + RUN_BODY.format[1:])


# Plain ints for the per-frame paths: struct packs, and == compares, an IntEnum member at two
# to three times the cost of an int.
_RUN, _RUN_ASYNC = int(Kind.RUN), int(Kind.RUN_ASYNC)


def run_frame(request_id: int, session_id: bytes, wait_value: int, signal_value: int | None,
              timeout_ms: int | None, flags: int = 0, kind: int = _RUN) -> bytes:
    """A RUN (or RUN_ASYNC) frame, packed in one call: the client's per-frame encoder."""
    return RUN_FRAME.pack(
        MAGIC, VERSION, kind, request_id & 0xFFFFFFFF, RUN_BODY.size, session_id, wait_value,
        signal_value or 0, DEFAULT_TIMEOUT if timeout_ms is None else timeout_ms, flags,
    )


def encode_run(request_id: int, run: Run) -> bytes:
    return run_frame(request_id, *run)


def decode_run(body: bytes) -> Run:
    if len(body) != RUN_BODY.size:
        raise InvalidRequest(f"RUN body is {RUN_BODY.size} bytes, not {len(body)}")
    # Unknown flags are the run engine's to refuse (RunTable.run), as every other refusal.
    sid, wait_value, signal_value, timeout_ms, flags = RUN_BODY.unpack(body)
    return Run(
        sid,
        wait_value,
        signal_value or None,
        None if timeout_ms == DEFAULT_TIMEOUT else timeout_ms,
        flags,
    )


RUN_REPLY_FRAME = struct.Struct("<IHHII" + RUN_REPLY_BODY.format[1:])
_RUN_REPLY = _RUN | REPLY_BIT


def encode_run_reply(request_id: int, reply: RunReply) -> bytes:
    return RUN_REPLY_FRAME.pack(
        MAGIC, VERSION, _RUN_REPLY, request_id & 0xFFFFFFFF, RUN_REPLY_BODY.size,
        reply.signal_value,
        min(reply.wait_us, 0xFFFFFFFF),
        min(reply.infer_us, 0xFFFFFFFF),
        min(reply.total_us, 0xFFFFFFFF),
        reply.flags,
    )


def run_reply_of(data: bytes, request_id: int) -> RunReply | None:
    """A whole received frame that is the RUN reply to ``request_id`` (RUN and RUN_ASYNC alike),
    read in one unpack; None for any other frame, which :func:`decode` then reads and judges:
    the client's per-frame decoder."""
    if len(data) == RUN_REPLY_FRAME.size:
        (magic, version, kind, rid, length, value, wait, infer, total,
         flags) = RUN_REPLY_FRAME.unpack(data)
        if (magic == MAGIC and version == VERSION and kind == _RUN_REPLY
                and rid == request_id & 0xFFFFFFFF and length == RUN_REPLY_BODY.size):
            return RunReply(value, wait, infer, total, flags)
    return None


def decode_run_reply(body: bytes) -> RunReply:
    if len(body) != RUN_REPLY_BODY.size:
        raise InvalidRequest(f"RUN reply body is {RUN_REPLY_BODY.size} bytes, not {len(body)}")
    return RunReply(*RUN_REPLY_BODY.unpack(body))


def encode_error(request_id: int, exc: FencelineError) -> bytes:
    payload = json.dumps({**exc.details, "error": exc.message, "code": exc.code}).encode()
    # Keep the reply inside one frame whatever the message length.
    limit = MAX_FRAME - HEADER_SIZE - ERROR_CODE.size
    if len(payload) > limit:
        short = {**exc.details, "error": exc.message[: limit // 4], "code": exc.code}
        payload = json.dumps(short).encode()
        if len(payload) > limit:
            payload = json.dumps({"error": exc.message[: limit // 2], "code": exc.code}).encode()
    return encode(Kind.ERROR, request_id, ERROR_CODE.pack(exc.ipc_code) + payload)


def decode_error(body: bytes) -> FencelineError:
    """The error a reply of kind ERROR carries, as the service's exception class."""
    if len(body) < ERROR_CODE.size:
        raise InvalidRequest("ERROR body is shorter than its code")
    (code,) = ERROR_CODE.unpack_from(body)
    info = decode_json(body[ERROR_CODE.size :])
    cls = BY_IPC_CODE.get(code, FencelineError)
    details = {k: v for k, v in info.items() if k not in ("error", "code")}
    return cls(str(info.get("error", "unknown error")), details)


@functools.lru_cache(maxsize=4096)  # called per frame by clients with the same few ids
def session_id_bytes(session_id: str) -> bytes:
    """Session ids are 32 hex digits; RUN carries their 16 raw bytes."""
    try:
        raw = bytes.fromhex(session_id)
    except (ValueError, TypeError):
        raw = b""
    if len(raw) != 16:
        raise InvalidRequest(f"session id {session_id!r} is not 32 hex digits")
    return raw


def encode_run_async(request_id: int, run: Run) -> bytes:
    """A RUN that a CUDA session answers as soon as its work is enqueued on the GPU."""
    return run_frame(request_id, *run, kind=_RUN_ASYNC)
