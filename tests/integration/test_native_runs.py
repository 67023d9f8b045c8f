"""The run engine (docs/ipc.md, "The run path"): a host session's RUN frames are served without
the interpreter, RUNs sent ahead of their input fence and refusals included. The service runs
in this process (so the test sees that no frame reached the interpreter's decoder); every
renderer is a real client in its own process."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import textwrap
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from fenceline import _native
from fenceline.client import Fence, SharedFrame
from fenceline.errors import FencelineError, NotFound, ResourceExhausted, TimedOut, Unavailable
from fenceline.ipc.server import IpcServer
from fenceline.models import build_repository
from fenceline.protocol import codec
from fenceline.runtime.host_session import HostSession
from fenceline.runtime.models import ModelRepository
from fenceline.runtime.service import Runtime
from fenceline.runtime.table import RuntimeSettings, ViewSpec
from tests.support.waiting import wait_until

pytestmark = pytest.mark.skipif(
    not hasattr(_native, "RunTable"), reason="the native run path is built on POSIX only"
)

# A renderer: a session on MODEL over one frame; then what argv[3] says. Prints JSON lines.
RENDERER = textwrap.dedent("""
    import json, sys, threading, time
    import numpy as np
    sys.path.insert(0, sys.argv[4])
    from tests.support.helpers import open_session
    from fenceline.client import IpcClient
    from fenceline.client.errors import ServiceError
    socket_path, model, plan = sys.argv[1], sys.argv[2], sys.argv[3]
    client = IpcClient(socket_path, name="native-runs-test")
    s = open_session(client, model, [1, 3, 64, 64])
    out = {}
    if plan == "frames":
        for v in range(1, 201):
            s.x[:] = v % 5
            s.wait.signal(v)
            r = client.run(s.session_id, v)
            assert r.signal_value == v and s.signal.value == v, (r, s.signal.value)
            assert np.all(s.y == v % 5 + 1), v
        d = client.describe("session", s.session_id)
        out = {"runs": d["runs"], "last": d["last_signal_value"]}
    elif plan == "late_fence":
        s.x[:] = 2
        threading.Timer(0.2, s.wait.signal, args=(1,)).start()
        r = client.run(s.session_id, 1)
        out = {"signal": r.signal_value, "y": float(s.y.flat[0])}
    elif plan == "pipelined":
        # Three RUNs in flight on one connection, each sent before its input fence is there.
        sent = [client.send_run(s.session_id, v, timeout_ms=20_000) for v in (1, 2, 3)]
        ys = []
        for v, request_id in zip((1, 2, 3), sent):
            s.x[:] = v
            s.wait.signal(v)
            r = client.recv_run_reply(request_id)
            ys.append([r.signal_value, float(s.y.flat[0])])
        try:
            client.run(s.session_id, 9, timeout_ms=150)
        except ServiceError as e:
            out["timeout"] = [e.code, e.message, e.details]
        out["ys"] = ys
    elif plan == "errors":
        s.x[:] = 1
        s.wait.signal(1)
        client.run(s.session_id, 1)
        codes = []
        for wait, signal in ((1, 1), (2, 1)):  # not above the output fence's value 1
            s.wait.signal(2) if wait == 2 and s.wait.value < 2 else None
            try:
                client.run(s.session_id, wait, signal_value=signal)
                codes.append("ok")
            except ServiceError as e:
                codes.append(e.code)
        s.x[:] = float("nan")  # nan_guard fails on NaN: a model error from the native path
        s.wait.signal(3)
        try:
            client.run(s.session_id, 3)
            codes.append("ok")
        except ServiceError as e:
            codes.append(e.code)
            out["message"] = e.message
        s.x[:] = 4  # and the session still runs
        s.wait.signal(4)
        client.run(s.session_id, 4)
        codes.append(float(s.y.flat[0]))
        out["codes"] = codes
    print(json.dumps(out), flush=True)
    s.close()
    client.close()
""")

ROOT = Path(__file__).parents[2]


@pytest.fixture(scope="module")
def repo(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return build_repository(tmp_path_factory.mktemp("models"), ["add_64x64", "nan_guard_64x64"])


@pytest.fixture
def served(repo: Path, tmp_path: Path) -> Iterator[tuple[Runtime, IpcServer, list[str]]]:
    """A runtime and its IPC server in this process; the list names each RUN that reached
    Runtime.run, the engine's entry for callers in Python (a RUN frame the native loop left to
    the interpreter would)."""
    runtime = Runtime(ModelRepository.from_sources(repo, {}))
    python_runs: list[str] = []
    run = runtime.run

    def counted(owner: str, session_id: str, *args: Any, **kwargs: Any) -> Any:
        python_runs.append(session_id)
        return run(owner, session_id, *args, **kwargs)

    runtime.run = counted  # type: ignore[method-assign]
    server = IpcServer(runtime, tmp_path / "fl.sock")
    server.start()
    try:
        yield runtime, server, python_runs
    finally:
        server.stop()
        runtime.close()


def _renderer(server: IpcServer, model: str, plan: str) -> dict[str, Any]:
    proc = subprocess.run(
        [sys.executable, "-c", RENDERER, str(server.path), model, plan, str(ROOT)],
        capture_output=True, text=True, timeout=120,
    )
    assert proc.returncode == 0, proc.stderr
    return dict(json.loads(proc.stdout.splitlines()[-1]))


def test_frames_are_served_natively_and_counted(
    served: tuple[Runtime, IpcServer, list[str]],
) -> None:
    runtime, server, python_runs = served
    got = _renderer(server, "add_64x64", "frames")
    assert got == {"runs": 200, "last": 200}  # the session's counters, read over DESCRIBE
    assert python_runs == []  # not one frame went through the interpreter's run path
    assert ("add_64x64", "ipc", 200) in runtime.metrics.run_store.runs()
    assert len(runtime.runs) == 0  # the renderer left: its session is gone here too


def test_a_fence_not_yet_reached_is_waited_for_natively(
    served: tuple[Runtime, IpcServer, list[str]],
) -> None:
    runtime, server, python_runs = served
    got = _renderer(server, "add_64x64", "late_fence")
    assert got == {"signal": 1, "y": 3.0}
    assert python_runs == []
    counts = runtime.runs.counts()
    assert (counts["answered"], counts["waited"], counts["failed"]) == (1, 1, 0), counts


def test_runs_in_flight_ahead_of_their_fences_wait_natively_and_time_out_as_python_does(
    served: tuple[Runtime, IpcServer, list[str]],
) -> None:
    runtime, server, python_runs = served
    got = _renderer(server, "add_64x64", "pipelined")
    assert got["ys"] == [[1, 2.0], [2, 3.0], [3, 4.0]]
    code, message, details = got["timeout"]
    assert code == "timed_out"
    assert message == ("fence did not reach 9 within 150 ms (it is at 3); nothing ran and "
                       "nothing was signalled (not queued): send the run again once the input "
                       "is ready")
    assert details == {"queued": False, "wait_value": 9, "signal_value": 9}
    assert python_runs == []
    counts = runtime.runs.counts()
    assert (counts["answered"], counts["failed"]) == (3, 1), counts
    # The one that timed out waited here; the others did unless their fence came first.
    assert 1 <= counts["waited"] <= 4, counts


def test_failed_runs_are_answered_by_the_engine(
    served: tuple[Runtime, IpcServer, list[str]],
) -> None:
    runtime, server, python_runs = served
    got = _renderer(server, "nan_guard_64x64", "errors")
    assert python_runs == []  # the two conflicts and the model error came from the engine
    assert got["codes"] == ["conflict", "conflict", "model_error", 5.0]
    assert got["message"].startswith("model 'nan_guard_64x64' failed: ")
    errors = {s.labels["code"]: s.value for m in runtime.metrics.registry.collect()
              if m.name == "fenceline_api_errors" for s in m.samples if s.name.endswith("_total")}
    assert errors.get("model_error") == 1.0 and errors.get("conflict") == 2.0


NBYTES = 3 * 64 * 64 * 4


def _native_session(runtime: Runtime, owner: str, frame: SharedFrame, a: Fence,
                    b: Fence) -> str:
    """A session of ``owner`` over ``frame`` (input, then output) between ``a`` and ``b``:
    the runtime hands it to its run engine (``runtime.runs``)."""
    mem = runtime.import_memory(owner, "host_fd", fd=os.dup(frame.fd))["id"]
    fa = runtime.import_fence(owner, "host_timeline", fd=os.dup(a.fd))["id"]
    fb = runtime.import_fence(owner, "host_timeline", fd=os.dup(b.fd))["id"]
    sid = str(runtime.create_session(
        owner, "add_64x64", {"x": ViewSpec(mem, 0, "FP32", [1, 3, 64, 64])},
        {"y": ViewSpec(mem, NBYTES, "FP32", [1, 3, 64, 64])}, fa, fb, transport="ipc")["id"])
    assert isinstance(runtime.session(owner, sid), HostSession)
    return sid


def test_the_table_serves_only_its_owner_and_answers_unavailable_once_stopping(
        repo: Path) -> None:
    runtime = Runtime(ModelRepository.from_sources(repo, {}))
    table = runtime.runs
    ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
    try:
        with ours, theirs, SharedFrame(2 * NBYTES) as f, Fence() as a, Fence() as b:
            owner = "ipc:7"
            sid = _native_session(runtime, owner, f, a, b)
            assert len(table) == 1

            # The loop serves RUNs, refusals included (each answered there with the ERROR the
            # transport's `refuse` makes of it), and hands back the first frame that is no
            # RUN: a HELLO sent after each RUN ends the loop once the RUN was answered.
            hello = codec.encode_json(codec.Kind.HELLO, 99, {})
            gate, spin = _native.SpinGate(0), _native.ReceiveSpin(0)
            refusals: list[tuple[int, object]] = []

            def refuse(request_id: int, failure: object) -> bytes:
                refusals.append((request_id, failure))
                assert isinstance(failure, FencelineError)
                return codec.encode_error(request_id, failure)

            def served(value: int, who: str = owner) -> object:
                a.signal(value)
                frame = codec.encode_run(value, codec.Run(bytes.fromhex(sid), value, None, None, 0))
                theirs.send(frame)
                theirs.send(hello)
                data, fds, problem = table.serve_loop(ours.fileno(), who, gate, spin, refuse)
                assert (data, fds, problem) == (hello, [], None)
                if not refusals:
                    return None
                [(request_id, failure)] = refusals
                refusals.clear()
                assert request_id == value
                error = codec.decode(theirs.recv(codec.MAX_FRAME))  # sent by the loop itself
                assert (error.kind, error.request_id) == (codec.Kind.ERROR, value)
                assert codec.decode_error(error.body).message == str(failure)
                return failure

            refused = served(1, "ipc:8")  # another connection's session: not found, as any
            assert isinstance(refused, NotFound)
            assert refused.message == f"no session with id {sid!r}" and b.value == 0
            assert served(2) is None
            reply = codec.decode(theirs.recv(codec.MAX_FRAME))
            assert reply.request_id == 2 and codec.decode_run_reply(reply.body).signal_value == 2
            assert b.value == 2
            # Counted once its reply was sent, before the loop went on to the next frame: the
            # session's counters, its recent runs (the status page's) and the metrics.
            session = runtime.session(owner, sid)
            assert (session.runs, session.last_signal_value) == (1, 2)
            assert [r.signal_value for _, r in session.recent] == [2]
            assert ("add_64x64", "ipc", 1) in runtime.metrics.run_store.runs()
            # The service's one shutdown flag: from now on its RUNs are answered unavailable,
            # here, and nothing runs.
            runtime.closing.set()
            a.signal(3)
            frame = codec.encode_run(3, codec.Run(bytes.fromhex(sid), 3, None, None, 0))
            theirs.send(frame)
            theirs.send(hello)
            assert table.serve_loop(ours.fileno(), owner, gate, spin, refuse)[0] == hello
            [(_, failure)] = refusals
            assert isinstance(failure, Unavailable)
            assert failure.message == "the service is shutting down" and b.value == 2
    finally:
        runtime.close()
    assert len(table) == 0


def test_a_frame_received_in_python_is_served_by_the_same_runner(repo: Path) -> None:
    """serve_bytes: the entry of a transport that receives in Python (the Windows pipe)."""
    runtime = Runtime(ModelRepository.from_sources(repo, {}))
    table = runtime.runs
    try:
        with SharedFrame(2 * NBYTES) as f, Fence() as a, Fence() as b:
            owner = "pipe:3"
            sid = _native_session(runtime, owner, f, a, b)
            gate = _native.SpinGate(1)
            replies: list[tuple[bytes, int]] = []

            def send(reply: bytes) -> bool:  # the transport's: counted, not yet in the metrics
                replies.append((reply, runtime.describe_session(owner, sid)["runs"],
                                len(runtime.metrics.run_store.runs())))
                return True

            late = codec.encode_run(4, codec.Run(bytes.fromhex(sid), 1, None, 30))
            sent, failure = table.serve_bytes(late, owner, False, gate, None, send)  # not in time
            assert sent is None and isinstance(failure, TimedOut)
            assert failure.details == {"queued": False, "wait_value": 1, "signal_value": 1}
            frame = codec.encode_run(5, codec.Run(bytes.fromhex(sid), 1, None, None))
            a.signal(1)
            sent, failure = table.serve_bytes(frame, "pipe:4", False, gate, None, send)
            assert sent is None and isinstance(failure, NotFound)  # not its session
            assert b.value == 0 and replies == []
            assert table.serve_bytes(frame, owner, False, gate, None, send) == (True, None)
            [(reply, runs_then, series_then)] = replies
            got = codec.decode(reply)
            assert got.request_id == 5 and codec.decode_run_reply(got.body).signal_value == 1
            # The session's counters before the reply (whoever has it finds the run counted),
            # the metrics after it, as on the socket.
            assert (runs_then, series_then) == (1, 0)
            assert b.value == 1 and runtime.describe_session(owner, sid)["runs"] == 1
            assert ("add_64x64", "ipc", 1) in runtime.metrics.run_store.runs()
    finally:
        runtime.close()
    assert len(table) == 0


def test_a_run_from_python_enters_the_same_engine_with_every_refusal(repo: Path) -> None:
    """Runtime.run (HTTP's, and any caller in Python) is the engine's entry too: its runs and
    its refusals (another client's session, the in-flight quota, the shutdown) are the engine's,
    counted there."""
    runtime = Runtime(ModelRepository.from_sources(repo, {}),
                      settings=RuntimeSettings(max_inflight_runs_per_owner=1))
    try:
        with SharedFrame(2 * NBYTES) as f, Fence() as a, Fence() as b:
            sid = _native_session(runtime, "http", f, a, b)
            a.signal(1)
            assert runtime.run("http", sid, 1).signal_value == 1 and b.value == 1
            assert runtime.runs.counts()["answered"] == 1
            with pytest.raises(NotFound):
                runtime.run("ipc:1", sid, 2)
            with pytest.raises(NotFound, match="no session with id 'not-an-id'"):
                runtime.run("http", "not-an-id", 2)
            # One run in flight, waiting for its fence: a second one of the client is refused.
            late = threading.Thread(target=runtime.run, args=("http", sid, 2))
            late.start()
            wait_until(lambda: runtime.runs.counts()["waited"] == 1, what="the run waiting")
            with pytest.raises(ResourceExhausted, match="at most 1 runs in flight per client"):
                runtime.run("http", sid, 3)
            a.signal(2)
            late.join()
            assert b.value == 2
            runtime.closing.set()
            a.signal(3)
            with pytest.raises(Unavailable, match="the service is shutting down"):
                runtime.run("http", sid, 3)
            assert b.value == 2
            assert runtime.runs.counts() == {"answered": 2, "failed": 4, "waited": 1}
    finally:
        runtime.close()
    assert len(runtime.runs) == 0
