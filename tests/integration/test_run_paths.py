"""The native runner against its Python reference (docs/ipc.md, "The run path"): the same
scripted frames, sent as raw bytes over the Unix socket to a service started with
``--run-path native`` and to one started with ``--run-path python``, must get the same replies
byte for byte, leave the same fence values and session counters, and count the same metrics.
The native runner's own counters say which engine served each: a runner that served nothing
fails.

What differs by nature is taken out before comparing, and only that: the three timings of a RUN
reply (microseconds measured on each run) and the objects' random ids, each replaced by its order
of first appearance. A change to one path's answer to any frame fails the test at that frame."""

from __future__ import annotations

import contextlib
import os
import re
import socket
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import numpy as np
import pytest

from fenceline.client import Fence, SharedFrame
from fenceline.config import RUN_PATHS
from fenceline.models import build_repository
from fenceline.protocol import codec
from fenceline.protocol.codec import Kind
from tests.support.service import Service, running

SHAPE = [1, 3, 64, 64]
NBYTES = 3 * 64 * 64 * 4
RUN_REPLY = Kind.RUN | codec.REPLY_BIT
TIMINGS = slice(codec.HEADER_SIZE + 8, codec.HEADER_SIZE + 20)  # wait_us, infer_us, total_us
ID = re.compile(rb"[0-9a-f]{32}")


@pytest.fixture(scope="module")
def services(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Service]]:
    repo = build_repository(tmp_path_factory.mktemp("models"), ["add_64x64", "nan_guard_64x64"])
    with contextlib.ExitStack() as stack:
        yield {
            path: stack.enter_context(
                running(repo, tmp_path_factory.mktemp(f"run-path-{path}"), "--run-path", path)
            )
            for path in RUN_PATHS
        }


class Wire:
    """One connection that sends raw frames and keeps every reply."""

    def __init__(self, path: Path) -> None:
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        self.sock.connect(str(path))
        self.sock.settimeout(30)
        self.request_id = 0

    def ask(self, frame: bytes, fds: list[int] | None = None) -> bytes:
        if fds:
            socket.send_fds(self.sock, [frame], fds)
        else:
            self.sock.send(frame)
        return self.sock.recv(codec.MAX_FRAME)

    def next_id(self) -> int:
        self.request_id += 1
        return self.request_id

    def control(self, kind: Kind, body: dict[str, Any], fds: list[int] | None = None) -> bytes:
        return self.ask(codec.encode_json(kind, self.next_id(), body), fds)

    def run(self, session: str, wait: int, signal: int | None = None, timeout_ms: int | None = 5000,
            *, flags: int = 0, kind: Kind = Kind.RUN) -> bytes:
        frame = codec.encode_run(self.next_id(), codec.Run(
            bytes.fromhex(session), wait, signal, timeout_ms, flags))
        return self.ask(frame[:6] + int(kind).to_bytes(2, "little") + frame[8:])

    def close(self) -> None:
        self.sock.close()


def _reply_id(reply: bytes) -> str:
    return str(codec.decode_json(codec.decode(reply).body)["id"])


class Renderer:
    """Frames, fences and sessions of one scripted renderer, on connection ``a``; ``b`` is
    another connection of the same user."""

    def __init__(self, service: Service) -> None:
        self.service = service
        self.a, self.b = Wire(service.socket), Wire(service.socket)
        self.frames = [SharedFrame(2 * NBYTES) for _ in range(3)]
        self.frames.append(SharedFrame(2 * NBYTES, named=True))  # /dev/shm: it can shrink
        self.fences = [Fence() for _ in range(8)]
        self.log: list[tuple[str, bytes, tuple[int, ...]]] = []

    def step(self, label: str, reply: bytes) -> bytes:
        self.log.append((label, reply, tuple(f.value for f in self.fences)))
        return reply

    def memory(self, wire: Wire, frame: SharedFrame) -> str:
        return _reply_id(self.step("import memory", wire.control(
            Kind.IMPORT_MEMORY, {"handle_type": "host_fd", "size_bytes": frame.size},
            [os.dup(frame.fd) if frame.name is None else _shm_fd(frame)])))

    def fence(self, wire: Wire, fence: Fence) -> str:
        return _reply_id(self.step("import fence", wire.control(
            Kind.IMPORT_FENCE, {"fence_type": "host_timeline"}, [os.dup(fence.handle.fd)])))

    def session(self, wire: Wire, model: str, memory: str, wait: str, signal: str,
                **extra: Any) -> str:
        def view(offset: int) -> dict[str, Any]:
            return {"memory": memory, "offset_bytes": offset, "datatype": "FP32", "shape": SHAPE}

        return _reply_id(self.step(f"create session {model}", wire.control(
            Kind.CREATE_SESSION, {"model": model, "inputs": {"x": view(0)},
                                  "outputs": {"y": view(NBYTES)}, "wait_fence": wait,
                                  "signal_fence": signal, **extra})))

    def close(self) -> None:
        self.a.close()
        self.b.close()
        for obj in (*self.frames, *self.fences):
            obj.close()


def _shm_fd(frame: SharedFrame) -> int:
    assert frame.name is not None
    return os.open(f"/dev/shm/{frame.name.lstrip('/')}", os.O_RDWR)


def script(r: Renderer) -> None:
    """Every kind of answer a RUN can get, in one order. Each step's reply is logged."""
    a, b = r.a, r.b
    f = r.fences
    x = [fr.array(np.float32, SHAPE) for fr in r.frames]
    r.step("hello", a.control(Kind.HELLO, {"client": "run-paths"}))
    mem = [r.memory(a, fr) for fr in r.frames]
    fid = [r.fence(a, fence) for fence in f[:7]]
    add = r.session(a, "add_64x64", mem[0], fid[0], fid[1])
    nan = r.session(a, "nan_guard_64x64", mem[1], fid[2], fid[3])
    shrink = r.session(a, "add_64x64", mem[3], fid[4], fid[5])
    stream = r.session(a, "add_64x64", mem[2], fid[6], r.fence(a, r.fences[7]),
                       mode="streaming", start=False)
    other = r.session(b, "add_64x64", r.memory(b, r.frames[2]), r.fence(b, f[6]), r.fence(b, f[7]))

    # Good runs, the input fence already reached: served natively where a native path exists.
    for v in (1, 2, 3):
        x[0][:] = v
        f[0].signal(v)
        r.step(f"run {v}", a.run(add, v))
    f[0].signal(5)
    r.step("run, explicit signal value", a.run(add, 5, signal=7))
    r.step("RUN_ASYNC on a host session", a.run(add, 5, signal=8, kind=Kind.RUN_ASYNC))
    r.step("run, default timeout", a.run(add, 5, signal=9, timeout_ms=None))
    # Refusals.
    r.step("signal value at the output fence's", a.run(add, 5, signal=9))
    r.step("signal value below the output fence's", a.run(add, 5, signal=4))
    r.step("unknown RUN flags", a.run(add, 5, signal=10, flags=1))
    r.step("timeout over the limit", a.run(add, 5, signal=10, timeout_ms=600_001))
    r.step("unknown session", a.run("0" * 32, 1))
    r.step("another connection's session", a.run(other, 1))
    r.step("a streaming session", a.run(stream, 1))
    run = codec.encode_run(a.next_id(), codec.Run(bytes.fromhex(add), 5, 11, None))
    r.step("RUN with an fd", a.ask(run, [os.dup(r.frames[0].fd)]))
    r.step("RUN body too short", a.ask(run[:-4]))
    r.step("RUN body length lies", a.ask(run[:12] + (36).to_bytes(4, "little") + run[16:]))
    r.step("bad magic", a.ask(b"XXXX" + run[4:]))
    # Fence waits: a timeout, late fences, an abandoned fence.
    r.step("wait times out", a.run(add, 20, timeout_ms=50))
    r.step("timeout 0, not reached", a.run(add, 20, timeout_ms=0))
    for late_s, v in ((0.05, 20), (0.3, 21), (1.0, 22)):
        t = threading.Timer(late_s, f[0].signal, args=(v,))
        t.start()
        r.step(f"input fence {late_s} s late", a.run(add, v, timeout_ms=20_000))
        t.join()
    # Model errors, and the session runs on after one.
    x[1][:] = float("nan")
    f[2].signal(1)
    r.step("model error", a.run(nan, 1))
    x[1][:] = 1
    f[2].signal(2)
    r.step("run after a model error", a.run(nan, 2))
    # Memory that shrank under the session.
    f[4].signal(1)
    r.step("shrinkable memory, whole", a.run(shrink, 1))
    os.truncate(f"/dev/shm/{str(r.frames[3].name).lstrip('/')}", 100)
    f[4].signal(2)
    r.step("shrunk memory", a.run(shrink, 2))
    r.step("an abandoned fence", (f[2].handle.set_status(1), a.run(nan, 3))[1])
    # The counters each path keeps, as DESCRIBE reads them.
    for sid in (add, nan, shrink):
        r.step("describe session", a.control(Kind.DESCRIBE, {"kind": "session", "id": sid}))
    r.step("describe output fence", a.control(Kind.DESCRIBE, {"kind": "fence", "id": fid[1]}))


def normalized(log: list[tuple[str, bytes, tuple[int, ...]]]) -> list[tuple[str, bytes, tuple[int, ...]]]:
    ids: dict[bytes, bytes] = {}

    def rename(m: re.Match[bytes]) -> bytes:
        return ids.setdefault(m.group(0), b"<id%d>" % len(ids))

    out = []
    for label, reply, fences in log:
        if _kind(reply) == RUN_REPLY:
            reply = reply[:TIMINGS.start] + bytes(12) + reply[TIMINGS.stop:]
        out.append((label, ID.sub(rename, reply), fences))
    return out


def _kind(reply: bytes) -> int:
    return int.from_bytes(reply[6:8], "little") if len(reply) >= codec.HEADER_SIZE else -1


COUNTED = re.compile(r"^(fenceline_\w+?(_total|_count))(\{[^}]*\})? (\S+)$")


def counted_metrics(service: Service) -> dict[str, float]:
    """Every counter and every histogram's count of the service's own metrics (not the HTTP
    requests that read them)."""
    out = {}
    for line in httpx.get(service.url + "/metrics").text.splitlines():
        m = COUNTED.match(line)
        if m and not m.group(1).startswith("fenceline_http"):
            out[m.group(1) + (m.group(3) or "")] = float(m.group(4))
    return out


def played(service: Service) -> tuple[list[tuple[str, bytes, tuple[int, ...]]], dict[str, float]]:
    r = Renderer(service)
    try:
        script(r)
    finally:
        r.close()
    return normalized(r.log), counted_metrics(service)


ENGINE = "fenceline_native_runs_total"


def engine_counts(metrics: dict[str, float]) -> dict[str, float]:
    """The native runner's counts (taken out of ``metrics``), by outcome."""
    return {key.split('"')[1]: metrics.pop(key) for key in list(metrics) if key.startswith(ENGINE)}


def test_both_run_paths_answer_every_scripted_frame_alike(services: dict[str, Service]) -> None:
    native_log, native_metrics = played(services["native"])
    python_log, python_metrics = played(services["python"])
    assert [label for label, _, _ in native_log] == [label for label, _, _ in python_log]
    for n, p in zip(native_log, python_log, strict=True):
        assert n == p, f"the run paths answer {n[0]!r} differently"
    native_engine, python_engine = engine_counts(native_metrics), engine_counts(python_metrics)
    assert native_metrics == python_metrics
    # Which engine served them: every run that ran or failed in its wait or its model, the
    # late and timed-out ones included, and the refusals of a session it holds (signal values
    # at and below the output fence's, a timeout over the limit), natively on one service, in
    # Python on the other; the other refusals (flags, sessions not its own) went back to Python.
    replies = sum(1 for _, reply, _ in native_log if _kind(reply) == RUN_REPLY)
    assert native_engine == {"answered": replies, "failed": 8, "handed_back": 4, "waited": 6}
    assert python_engine == {"answered": 0, "failed": 0, "handed_back": 4 + replies + 8,
                             "waited": 0}
    # The script reached what it meant to: each kind of answer at least once.
    codes = {codec.decode_error(reply[codec.HEADER_SIZE:]).code for _, reply, _ in native_log
             if _kind(reply) == Kind.ERROR}
    assert codes == {"conflict", "invalid_argument", "invalid_request", "not_found", "timed_out",
                     "model_error", "device_lost"}, codes
