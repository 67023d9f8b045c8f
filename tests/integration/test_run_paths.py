"""Every kind of answer a RUN frame can get from the run engine (docs/ipc.md, "The run path"):
scripted frames, sent as raw bytes over the Unix socket, each answered as the script expects
(a reply, or an error of its stable code), leaving the fence values and session counters it
should. The engine's own counters say that it served each run and each refusal: an engine
that served nothing, or left a refusal to another body, fails."""

from __future__ import annotations

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
def service(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Service]:
    repo = build_repository(tmp_path_factory.mktemp("models"), ["add_64x64", "nan_guard_64x64"])
    with running(repo, tmp_path_factory.mktemp("service")) as svc:
        yield svc


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
    return r.log, counted_metrics(service)


ENGINE = "fenceline_native_runs_total"


def engine_counts(metrics: dict[str, float]) -> dict[str, float]:
    """The run engine's counts, by outcome."""
    return {key.split('"')[1]: value for key, value in metrics.items() if key.startswith(ENGINE)}


RAN = "ran"
# What each RUN of the script is answered: a reply (RAN) or an error's code.
EXPECTED = {
    "run 1": RAN, "run 2": RAN, "run 3": RAN,
    "run, explicit signal value": RAN,
    "RUN_ASYNC on a host session": RAN,
    "run, default timeout": RAN,
    "signal value at the output fence's": "conflict",
    "signal value below the output fence's": "conflict",
    "unknown RUN flags": "invalid_request",
    "timeout over the limit": "invalid_argument",
    "unknown session": "not_found",
    "another connection's session": "not_found",
    "a streaming session": "conflict",
    "RUN with an fd": "invalid_request",
    "RUN body too short": "invalid_request",
    "RUN body length lies": "invalid_request",
    "bad magic": "invalid_request",
    "wait times out": "timed_out",
    "timeout 0, not reached": "timed_out",
    "input fence 0.05 s late": RAN,
    "input fence 0.3 s late": RAN,
    "input fence 1.0 s late": RAN,
    "model error": "model_error",
    "run after a model error": RAN,
    "shrinkable memory, whole": RAN,
    "shrunk memory": "device_lost",
    "an abandoned fence": "device_lost",
}
# Frames the engine cannot read as a RUN (an fd with it, a malformed frame): the transport's
# decoder refuses them, and they never enter the engine.
UNREAD = {"RUN with an fd", "RUN body too short", "RUN body length lies", "bad magic"}


def _answer(reply: bytes) -> str:
    if _kind(reply) == RUN_REPLY:
        return RAN
    assert _kind(reply) == Kind.ERROR, reply
    return codec.decode_error(reply[codec.HEADER_SIZE:]).code


def test_every_scripted_frame_gets_its_answer_from_the_engine(service: Service) -> None:
    log, metrics = played(service)
    answers = {label: _answer(reply) for label, reply, _ in log if label in EXPECTED}
    assert answers == EXPECTED
    # What the runs left: the output fences' values and the sessions' counters (DESCRIBE).
    described = [codec.decode_json(codec.decode(reply).body) for label, reply, _ in log
                 if label == "describe session"]
    assert [(d["runs"], d["last_signal_value"]) for d in described] == [(9, 22), (1, 2), (1, 1)]
    assert codec.decode_json(codec.decode(log[-1][1]).body)["value"] == 22
    # Which engine served them: every run and every refusal of a RUN it could read, the late
    # and timed-out ones waited for in it.
    ran = sum(1 for answer in EXPECTED.values() if answer == RAN)
    refused = len(EXPECTED) - ran - len(UNREAD)
    assert engine_counts(metrics) == {"answered": ran, "failed": refused, "waited": 6}
    runs = {k: v for k, v in metrics.items()
            if k.startswith("fenceline_session_runs_total{")}
    assert runs == {'fenceline_session_runs_total{model="add_64x64",transport="ipc"}': 10.0,
                    'fenceline_session_runs_total{model="nan_guard_64x64",transport="ipc"}': 1.0}
