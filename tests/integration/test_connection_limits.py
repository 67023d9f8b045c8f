"""Connection limits (docs/reliability.md, "Connections"): past ``--max-connections-per-user``
or ``--max-connections`` a connection is answered ``resource_exhausted``, naming the limit, and
closed, while the connections served keep running and the service's threads stay bounded."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import threading
import time
from collections import Counter
from pathlib import Path

import pytest

from fenceline.client import IpcClient, ServiceError
from fenceline.protocol import codec
from tests.support.helpers import open_session
from tests.support.metrics import metrics_text, sample
from tests.support.service import Service, running
from tests.support.users import User

ATTEMPTS = 5000
PER_USER = 16
ORT_TRANSIENT_THREADS = 3


def threads(svc: Service) -> int:
    return len(os.listdir(f"/proc/{svc.pid}/task"))


def fds(svc: Service) -> int:
    return len(os.listdir(f"/proc/{svc.pid}/fd"))


def attempt(path: Path) -> tuple[str, str]:
    """One connection and HELLO: ("ok", "") or the error's (code, message)."""
    with socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET) as s:
        s.settimeout(10)
        s.connect(str(path))
        s.send(codec.encode_json(codec.Kind.HELLO, 1, {"client": "flood"}))
        reply = codec.decode(s.recv(codec.MAX_FRAME))
        if reply.kind != codec.Kind.ERROR:
            return "ok", ""
        err = codec.decode_error(reply.body)
        assert reply.request_id == 1, "the refusal answers the request it refuses"
        return err.code, err.message


def refused(svc: Service) -> float:
    return sample(metrics_text(svc), "fenceline_api_errors_total", 0.0,
                  code="resource_exhausted", transport="ipc")


def run_once(c: IpcClient, value: int) -> None:
    s = open_session(c, "add_64x64", [1, 3, 64, 64])
    s.x[:] = value
    s.wait.signal(1)
    assert c.run(s.session_id, 1).signal_value == 1
    assert (s.y == value + 1).all()
    c.release_session(s.session_id)
    s.close()


def test_a_connection_past_the_total_limit_is_refused_and_the_others_keep_running(
    model_repo: Path, tmp_path: Path
) -> None:
    with running(model_repo, tmp_path, "--max-connections", "3") as svc:
        held = [IpcClient(svc.socket) for _ in range(3)]
        try:
            with pytest.raises(ServiceError) as refused:
                IpcClient(svc.socket)
            assert refused.value.code == "resource_exhausted"
            assert "--max-connections 3" in refused.value.message
            for i, c in enumerate(held):
                run_once(c, i)
            held.pop().close()
            deadline = time.monotonic() + 5
            while True:  # the closed connection is forgotten by its own thread, a moment later
                try:
                    held.append(IpcClient(svc.socket))
                    break
                except ServiceError:
                    assert time.monotonic() < deadline
                    time.sleep(0.02)
            run_once(held[-1], 7)
        finally:
            for c in held:
                c.close()


def test_a_flood_of_connections_from_one_user_is_refused_while_another_user_runs(
    model_repo: Path, shared: Path, other_user: User
) -> None:
    with running(model_repo, shared, "--allow-uid", str(other_user.uid),
                 "--max-connections-per-user", str(PER_USER)) as svc:
        quiet = other_user("runs", socket=str(svc.socket), seconds=2.0)
        base, base_fds = threads(svc), fds(svc)
        refused_before = refused(svc)
        held = [IpcClient(svc.socket) for _ in range(PER_USER)]  # this user's share
        codes: Counter[str] = Counter()
        messages: set[str] = set()
        most = [threads(svc)]
        done = threading.Event()

        def flood() -> None:
            try:
                for _ in range(ATTEMPTS):
                    code, message = attempt(svc.socket)
                    codes[code] += 1
                    messages.add(message)
            finally:
                done.set()

        def watch() -> None:
            while not done.is_set():
                most.append(threads(svc))
                time.sleep(0.005)

        workers = [threading.Thread(target=flood), threading.Thread(target=watch)]
        started = time.monotonic()
        for w in workers:
            w.start()
        flooded = other_user("runs", socket=str(svc.socket), seconds=1.5)
        still_flooding = not done.is_set()
        for w in workers:
            w.join(300)
        took = time.monotonic() - started
        for i, c in enumerate(held):  # this user's own connections are untouched
            run_once(c, i)
            c.close()
        deadline = time.monotonic() + 10  # each connection is forgotten by its own thread
        while fds(svc) > base_fds and time.monotonic() < deadline:
            time.sleep(0.05)
        after_fds = fds(svc)
        # Refusals made in native code reach the metrics at most a second later.
        while refused(svc) - refused_before < ATTEMPTS and time.monotonic() < deadline:
            time.sleep(0.1)
        counted = refused(svc) - refused_before
    # The held connections' threads and the other user's: refusals take no thread. Beyond
    # them onnxruntime starts up to three short-lived threads of its own now and then, flood
    # or not (`fenceline bench --flood` shows them in its quiet phase too).
    bound = base + PER_USER + 1 + ORT_TRANSIENT_THREADS
    print(f"\n{ATTEMPTS} attempts in {took:.1f} s: {dict(codes)}; threads: {base} before, at "
          f"most {bound} allowed ({PER_USER} held, the other user's, onnxruntime's "
          f"{ORT_TRANSIENT_THREADS}), at most "
          f"{max(most)} seen during the flood; fds {base_fds} before, {after_fds} after")
    print(f"the other user's renderer (add_64x64, one run at a time): quiet {quiet['runs']} runs "
          f"p50 {quiet['p50_us']:.0f} us p99 {quiet['p99_us']:.0f} us; during the flood"
          f"{'' if still_flooding else ' (partly after it)'} {flooded['runs']} runs p50 "
          f"{flooded['p50_us']:.0f} us p99 {flooded['p99_us']:.0f} us")
    assert codes == Counter({"resource_exhausted": ATTEMPTS})
    assert messages == {
        f"uid {os.geteuid()} already holds {PER_USER} connections, the most one user may "
        f"(--max-connections-per-user {PER_USER}); close one and retry"
    }
    assert max(most) <= bound, max(most)
    assert after_fds <= base_fds, (base_fds, after_fds)  # nothing held or leaked
    assert counted == ATTEMPTS, counted
    assert quiet["wrong"] == 0 and flooded["wrong"] == 0
    assert flooded["runs"] > 0


def test_the_service_raises_its_soft_fd_limit_for_the_connections_it_admits(
    model_repo: Path, tmp_path: Path
) -> None:
    """Started with the 1,024 fds many desktops give a process (below what 256 connections,
    1,024 held refusals and their imports need), the service raises its soft limit towards
    ``FD_LIMIT``, within its hard limit, and says so in its log."""
    import resource

    from fenceline.ipc.limits import FD_LIMIT

    hard = resource.getrlimit(resource.RLIMIT_NOFILE)[1]
    if hard != resource.RLIM_INFINITY and hard <= 1024:
        pytest.skip(f"this machine's hard fd limit is {hard}: nothing to raise to")
    want = FD_LIMIT if hard == resource.RLIM_INFINITY else min(FD_LIMIT, hard)
    with running(model_repo, tmp_path, "--log-level", "info", fd_limits=(1024, hard)) as svc:
        with open(f"/proc/{svc.pid}/limits") as f:
            line = next(x for x in f if x.startswith("Max open files"))
        assert int(line.split()[3]) == want, line
        assert f"open fds: soft limit raised from 1024 to {want}" in svc.log_text()


def test_a_connection_that_says_hello_and_closes_never_reaches_python(service: Service) -> None:
    # docs/reliability.md, "Cheap churn": the accept loop answers the HELLO (the clients' own,
    # features included), and a connection that closes next is closed there, with no thread
    # and no interpreter time of the service.
    text = metrics_text(service)
    admitted = sample(text, "fenceline_ipc_connections_total", 0.0)
    log_before = service.log_text().count("hello from churn")
    proc = subprocess.run(
        [sys.executable, "-m", "fenceline.soak.hostile", "churn", str(service.socket),
         "--runs", "300"], capture_output=True, text=True, timeout=300, check=True)
    result = json.loads(proc.stdout.splitlines()[-1])
    print(f"\nchurn: {result}")
    assert result["answers"] == {"ok": 300}, result
    assert sample(metrics_text(service), "fenceline_ipc_connections_total", 0.0) == admitted
    assert service.log_text().count("hello from churn") == log_before
    # Paced as refusals are: 64 at once, then 250 a second (a lower bound: load only adds).
    assert result["seconds"] >= (300 - 64) / 250 * 0.9, result
    # A HELLO the loop does not read as plain goes to Python, which answers it as before.
    with socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET) as s:
        s.settimeout(10)
        s.connect(str(service.socket))
        s.send(codec.encode_json(codec.Kind.HELLO, 5, {"client": "x", "extra": 1}))
        reply = codec.decode(s.recv(codec.MAX_FRAME))
        assert reply.kind == codec.Kind.ERROR and reply.request_id == 5
        assert codec.decode_error(reply.body).code == "invalid_request"
    # The clients' own HELLO asks for the reply's flags: answered by the loop all the same (the
    # churner above says it), and a connection that goes on is served by Python from its next
    # frame with the features it was answered for.
    with IpcClient(service.socket) as c:
        assert c.server["features"] == [codec.FEATURE_REPLY_FLAGS]
        run_once(c, 3)
