"""Hostile renderers: what a buggy or malicious local process can do to the service over IPC
(docs/reliability.md). Each is a real separate process, used by the tests and by
``fenceline soak --hostile``::

    python -m fenceline.soak.hostile MODE SOCKET [--runs N]

Modes:

- ``shrink-memfd`` / ``shrink-shm``: a frame the service cannot seal (a memfd created without
  ``MFD_ALLOW_SEALING``, or a ``/dev/shm`` object) is shrunk to 0 and grown back over and over
  while the service runs the model on it.
- ``shrink-fence``: a wait fence page is shrunk while the service waits on it, and a signal
  fence page before the service signals it.
- ``bad-headers``: frames with a bad magic, version or length, a short header, an empty frame
  and an oversized one, each carrying two fds.
- ``die-waiting``: a RUN on a fence that is never signalled, then sleep until killed.
- ``die-before-reply``: a RUN, the fence signalled, and SIGKILL of itself before the reply.
- ``own-end-send-blocked``: RUNs without reading a reply until the service's send blocks (its
  output fence stops advancing), then a frame carrying its own end of the connection
  (SCM_RIGHTS), then sleep until killed: the socket cannot hang up while that end waits in the
  service's receive queue, so only the process's exit (or the send timeout) ends the connection.
- ``own-end-fence-wait``: the same frame while the service waits on a fence that is never
  signalled (600 s timeout), then sleep until killed.
- ``own-end-queued`` / ``own-end-queued-page``: 20 RUNs of ``slow_add_64x64`` (about half a
  second each) sent at once, then the same frame, then sleep until killed: the runs not yet
  served wait in the service's receive queue (``-page``: with the connection's run page open,
  the first ones posted in its slots, a full ring, and the rest on the socket behind them).
  Its ready line names its output fence's fd (``done_fd``), so that a test can read through
  ``/proc/PID/fd`` how many runs the service executed.
- ``hoard``: connections (``--runs`` of them) that each import small memfd frames until the
  service refuses one, then sleep until killed: every import its quotas allow, held. Its
  ready line says how many it holds and the refusal's code and message.
- ``churn``: ``--runs`` connections one after another, each connecting, saying the HELLO
  fenceline's clients say (``codec.client_hello``), reading the answer and closing, below the
  per-user limit: what each was answered, and how long they took.

Each prints one JSON line when it is set up (``{"ready": ...}``) and one with what it saw at the
end; ``die-*`` never reach the end. Everything it shares is named ``fenceline-hostile-<pid>``, so
the soak can see in the service's ``/proc`` entries when all of it has been released.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import mmap
import os
import secrets
import signal
import socket
import struct
import threading
import time
from collections import Counter
from collections.abc import Iterator
from typing import Any, cast

from fenceline import _native
from fenceline.client import Fence, IpcClient, ServiceError, SharedFrame, View
from fenceline.protocol import codec

TAG = f"fenceline-hostile-{os.getpid()}"
SMALL = [1, 3, 64, 64]  # add_64x64
LARGE = [1, 3, 720, 1280]  # add_720p: a run long enough to be shrunk under


def _nbytes(shape: list[int]) -> int:
    n = 4
    for d in shape:
        n *= d
    return n


class RawFrame:
    """Shared memory the service cannot seal: a memfd without MFD_ALLOW_SEALING, or a /dev/shm
    object. Never mapped here: this renderer only shrinks it."""

    def __init__(self, size: int, *, shm: bool) -> None:
        self.size = size
        self.name: str | None = None
        if shm:
            self.name = f"/{TAG}-{secrets.token_hex(4)}"
            self.fd = os.open(f"/dev/shm{self.name}", os.O_RDWR | os.O_CREAT | os.O_EXCL, 0o600)
        else:
            self.fd = os.memfd_create(TAG, os.MFD_CLOEXEC)
        os.ftruncate(self.fd, size)

    def close(self) -> None:
        os.close(self.fd)
        if self.name is not None:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(f"/dev/shm{self.name}")


def _raw_fence() -> int:
    """An unsealable memfd holding a valid host_timeline page at value 0 (docs/fences.md)."""
    fd = os.memfd_create(TAG, os.MFD_CLOEXEC)
    os.ftruncate(fd, 4096)
    with mmap.mmap(fd, 4096) as page:
        page[0:8] = struct.pack("<IHH", 0x46544C46, 1, 0)
    return fd


class TaggedFrame:
    """A sealable memfd frame named with TAG: what a well-behaved renderer shares."""

    name = None

    def __init__(self, size: int) -> None:
        self.handle = _native.HostMemory.create_memfd(TAG, size)

    @property
    def fd(self) -> int:
        return int(self.handle.fd)


class TaggedFence:
    """A sealable memfd host_timeline fence named with TAG."""

    name = None

    def __init__(self) -> None:
        self.handle = _native.HostFence.create_memfd(TAG)

    @property
    def fd(self) -> int:
        return int(self.handle.fd)


def _import(client: IpcClient, frame: RawFrame | TaggedFrame) -> str:
    # IpcClient.import_memory and import_fence take anything with .name and .fd.
    return client.import_memory(cast(SharedFrame, frame))


def _fence(client: IpcClient, fence: TaggedFence | FdOnly) -> str:
    return client.import_fence(cast(Fence, fence))


@contextlib.contextmanager
def _shrinking(fd: int, size: int) -> Iterator[None]:
    """Shrinks the object to 0 and grows it back as fast as it can, until the block ends."""
    stop = threading.Event()

    def loop() -> None:
        while not stop.is_set():
            os.ftruncate(fd, 0)
            os.ftruncate(fd, size)
            # Full size most of the time: the service's fstat before a run then passes, and the
            # next shrink lands inside the run itself.
            time.sleep(0.001)

    t = threading.Thread(target=loop, daemon=True)
    t.start()
    try:
        yield
    finally:
        stop.set()
        t.join()


def shrink(sock: str, runs: int, *, shm: bool) -> dict[str, Any]:
    """Runs until the service reports that a run faulted on shrunk memory ("shrank"), or
    ``runs`` runs. Every failed run must be device_lost."""
    nbytes = _nbytes(LARGE)
    frame = RawFrame(2 * nbytes, shm=shm)
    codes: Counter[str] = Counter()
    guarded = False
    n = 0
    try:
        with IpcClient(sock, name="hostile-shrink") as c:
            ready, done = TaggedFence(), TaggedFence()
            mem = _import(c, frame)
            sid = c.create_session(
                "add_720p", {"x": View(mem, "FP32", LARGE)},
                {"y": View(mem, "FP32", LARGE, nbytes)}, _fence(c, ready), _fence(c, done),
            )["id"]
            print(json.dumps({"ready": sid}), flush=True)
            with _shrinking(frame.fd, frame.size):
                while n < runs and not guarded:
                    n += 1
                    ready.handle.signal(n)
                    try:
                        c.run(sid, n, timeout_ms=10_000)
                        codes["ok"] += 1
                    except ServiceError as e:
                        codes[e.code] += 1
                        guarded = guarded or (e.code == "device_lost" and "shrank" in e.message)
    finally:
        frame.close()
    return {"runs": n, "codes": dict(codes), "guarded": guarded}


def shrink_fence(sock: str) -> dict[str, Any]:
    """A wait fence shrunk during the wait, a signal fence shrunk before the signal."""
    nbytes = _nbytes(SMALL)
    out: dict[str, Any] = {}
    with IpcClient(sock, name="hostile-fence") as c:
        frame, good_in, good_out = TaggedFrame(2 * nbytes), TaggedFence(), TaggedFence()
        mem = _import(c, frame)
        views = ({"x": View(mem, "FP32", SMALL)}, {"y": View(mem, "FP32", SMALL, nbytes)})
        bad_wait, bad_signal = _raw_fence(), _raw_fence()
        try:
            waits = c.create_session(
                "add_64x64", *views, _fence(c, FdOnly(bad_wait)), _fence(c, good_out),
            )["id"]
            signals = c.create_session(
                "add_64x64", *views, _fence(c, good_in), _fence(c, FdOnly(bad_signal)),
            )["id"]
            print(json.dumps({"ready": [waits, signals]}), flush=True)
            threading.Timer(0.3, os.ftruncate, (bad_wait, 0)).start()
            out["wait"] = _code(lambda: c.run(waits, 1, timeout_ms=10_000))
            os.ftruncate(bad_signal, 0)
            good_in.handle.signal(1)
            out["signal"] = _code(lambda: c.run(signals, 1, timeout_ms=10_000))
        finally:
            os.close(bad_wait)
            os.close(bad_signal)
    return out


class FdOnly:
    """Anything IpcClient.import_fence can send: an fd and no name."""

    name = None

    def __init__(self, fd: int) -> None:
        self.fd = fd


def _code(fn: Any) -> str:
    try:
        fn()
        return "ok"
    except ServiceError as e:
        return e.code


def bad_header_frames() -> list[tuple[str, bytes]]:
    good = codec.encode_json(codec.Kind.HELLO, 0, {})
    oversized = codec.HEADER.pack(codec.MAGIC, codec.VERSION, codec.Kind.HELLO, 0, codec.MAX_FRAME)
    return [
        ("magic", b"XXXX" + good[4:]),
        ("version", good[:4] + struct.pack("<H", 99) + good[6:]),
        ("length", good[:12] + struct.pack("<I", 999) + good[16:]),
        ("short", good[:10]),
        ("empty", b""),
        ("oversized", oversized + bytes(codec.MAX_FRAME)),
    ]


def with_request_id(data: bytes, request_id: int) -> bytes:
    if len(data) < codec.HEADER_SIZE:
        return data
    return data[:8] + struct.pack("<I", request_id) + data[12:]


def bad_headers(sock: str, rounds: int) -> dict[str, Any]:
    """Sends every bad frame ``rounds`` times with two fds attached; checks each answer."""
    wrong: list[str] = []
    sent = 0
    frame = TaggedFrame(1 << 20)
    s = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET)
    s.connect(sock)
    s.settimeout(10)
    print(json.dumps({"ready": True}), flush=True)
    try:
        for r in range(rounds):
            for i, (what, data) in enumerate(bad_header_frames()):
                request_id = 1000 * r + i + 1
                data = with_request_id(data, request_id)
                socket.send_fds(s, [data], [frame.fd, frame.fd])
                sent += 1
                reply = codec.decode(s.recv(codec.MAX_FRAME))
                err = codec.decode_error(reply.body) if reply.kind == codec.Kind.ERROR else None
                expected_id = request_id if len(data) >= codec.HEADER_SIZE else 0
                if err is None or err.code != "invalid_request" or reply.request_id != expected_id:
                    wrong.append(f"{what}: {reply.kind:#x} {reply.request_id} {err and err.code}")
        s.send(codec.encode_json(codec.Kind.HELLO, 7, {"client": "hostile"}))
        alive = codec.decode(s.recv(codec.MAX_FRAME)).kind == codec.Kind.HELLO | codec.REPLY_BIT
    finally:
        s.close()
    return {"frames": sent, "wrong": wrong[:10], "connection_usable": alive}


def _session(c: IpcClient, model: str, shape: list[int]) -> tuple[str, TaggedFence]:
    nbytes = _nbytes(shape)
    frame, ready, done = TaggedFrame(2 * nbytes), TaggedFence(), TaggedFence()
    mem = _import(c, frame)
    sid = c.create_session(
        model, {"x": View(mem, "FP32", shape)}, {"y": View(mem, "FP32", shape, nbytes)},
        _fence(c, ready), _fence(c, done),
    )["id"]
    return sid, ready


def die_waiting(sock: str) -> None:
    c = IpcClient(sock, name="hostile-waiter")
    sid, _ = _session(c, "add_64x64", SMALL)
    c.send_run(sid, 1, timeout_ms=600_000)  # the longest wait the service allows
    print(json.dumps({"ready": sid}), flush=True)
    while True:
        time.sleep(60)


def die_before_reply(sock: str) -> None:
    c = IpcClient(sock, name="hostile-runner")
    sid, ready = _session(c, "add_720p", LARGE)
    print(json.dumps({"ready": sid}), flush=True)
    c.send_run(sid, 1, timeout_ms=10_000)
    ready.handle.signal(1)
    os.kill(os.getpid(), signal.SIGKILL)


QUEUED_RUNS = 20  # own-end-queued: RUNs queued behind the one in progress


def own_end(sock: str, state: str) -> None:
    c = IpcClient(sock, name="hostile-own-end")
    queued = state.startswith("queued")
    if state == "queued-page":
        c._page = c._open_page()
        if not c._page:
            raise SystemExit("the service took no run page")
    nbytes = _nbytes(SMALL)
    frame, ready, done = TaggedFrame(2 * nbytes), TaggedFence(), TaggedFence()
    mem = _import(c, frame)
    sid = c.create_session(
        "slow_add_64x64" if queued else "add_64x64", {"x": View(mem, "FP32", SMALL)},
        {"y": View(mem, "FP32", SMALL, nbytes)}, _fence(c, ready), _fence(c, done),
    )["id"]
    raw = c._sock  # the client's own end: RUNs go raw, without waiting for replies
    key = codec.session_id_bytes(sid)
    served = 0
    if queued:
        ready.handle.signal(1)
        for n in range(1, QUEUED_RUNS + 1):
            if state == "queued-page":  # the page's slots while one is free, then the socket
                c.send_run(sid, 1, n, 10_000)
            else:
                raw.send(codec.encode_run(n, codec.Run(key, 1, n, 10_000)))
        if state == "queued-page" and c.run_page_counts["posted"] != _native.RUN_PAGE_SLOTS:
            raise SystemExit(f"the run page's ring took {c.run_page_counts}")
    elif state == "send-blocked":
        ready.handle.signal(1)
        sent, batch = 0, 32
        while True:
            for _ in range(batch):
                sent += 1
                raw.send(codec.encode_run(sent, codec.Run(key, 1, sent, 10_000)))
            # Stalled: the service stopped serving because its replies are not read.
            last, since = -1, time.monotonic()
            while (value := int(done.handle.value)) < sent:
                if value != last:
                    last, since = value, time.monotonic()
                elif time.monotonic() - since > 0.3:
                    break
                time.sleep(0.01)
            if value < sent:
                served = value
                break
    else:
        c.send_run(sid, 1, timeout_ms=600_000)  # the longest wait the service allows
    hello = codec.encode_json(codec.Kind.HELLO, 0xFFFF, {"client": "own end"})
    socket.send_fds(raw, [hello], [raw.fileno()])
    print(json.dumps({"ready": sid, "served": served, "done_fd": done.fd}), flush=True)
    while True:
        time.sleep(60)


def hoard(sock: str, connections: int) -> None:
    clients: list[IpcClient] = []
    frame = TaggedFrame(4096)  # one object imported again and again: each import is an fd
    held, refusal = 0, {"code": "", "message": ""}
    for _ in range(connections):
        try:
            c = IpcClient(sock, name="hostile-hoard")
        except ServiceError as e:  # refused: a connection limit
            refusal = {"code": e.code, "message": e.message}
            break
        clients.append(c)
        while True:
            try:
                _import(c, frame)
                held += 1
            except ServiceError as e:
                refusal = {"code": e.code, "message": e.message}
                break
        if "per client" not in refusal["message"]:
            break  # a bound beyond this connection's: more connections get no more
    print(json.dumps({"ready": True, "imports": held, "connections": len(clients), **refusal}),
          flush=True)
    while True:
        time.sleep(60)


def churn(sock: str, rounds: int) -> dict[str, Any]:
    answers: Counter[str] = Counter()
    print(json.dumps({"ready": True}), flush=True)
    start = time.monotonic()
    for n in range(rounds):
        try:
            with socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET) as s:
                s.settimeout(30)
                s.connect(sock)
                s.send(codec.encode_json(codec.Kind.HELLO, n + 1, codec.client_hello("churn")))
                reply = codec.decode(s.recv(codec.MAX_FRAME))
        except OSError as e:
            answers[f"closed: {type(e).__name__}"] += 1
            continue
        if reply.kind == codec.Kind.ERROR:
            answers[codec.decode_error(reply.body).code] += 1
        elif reply.request_id != n + 1 or reply.kind != codec.Kind.HELLO | codec.REPLY_BIT:
            answers["wrong reply"] += 1
        else:
            answers["ok" if codec.decode_json(reply.body).get("server") == "fenceline"
                    else "wrong reply"] += 1
    return {"rounds": rounds, "answers": dict(answers),
            "seconds": round(time.monotonic() - start, 3)}


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m fenceline.soak.hostile")
    p.add_argument("mode", choices=["shrink-memfd", "shrink-shm", "shrink-fence", "bad-headers",
                                    "die-waiting", "die-before-reply", "own-end-send-blocked",
                                    "own-end-fence-wait", "own-end-queued",
                                    "own-end-queued-page", "hoard", "churn"])
    p.add_argument("socket")
    p.add_argument("--runs", type=int, default=300,
                   help="shrink: most runs; bad-headers, churn: rounds; hoard: connections")
    a = p.parse_args(argv)
    result: dict[str, Any] | None = None
    if a.mode in ("shrink-memfd", "shrink-shm"):
        result = shrink(a.socket, a.runs, shm=a.mode == "shrink-shm")
    elif a.mode == "shrink-fence":
        result = shrink_fence(a.socket)
    elif a.mode == "bad-headers":
        result = bad_headers(a.socket, a.runs)
    elif a.mode == "die-waiting":
        die_waiting(a.socket)
    elif a.mode == "churn":
        result = churn(a.socket, a.runs)
    elif a.mode == "hoard":
        hoard(a.socket, a.runs)
    elif a.mode.startswith("own-end-"):
        own_end(a.socket, a.mode.removeprefix("own-end-"))
    else:
        die_before_reply(a.socket)
    print(json.dumps(result), flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
