"""A RUN whose input fence is signalled late, and a renderer killed while the service waits on its
fence, over the named pipe and over HTTP on Windows: the wait looks for a gone client in the
transport's own way (the pipe has no poll(2)), so a late fence is neither an ``internal`` error
nor a wait that outlives its renderer."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
import threading
import time
from pathlib import Path

import numpy as np
import pytest

from fenceline.client import Fence, HttpClient, IpcClient, SharedFrame, View
from tests.windows.test_service import WinService

SHAPE = [1, 3, 64, 64]
NBYTES = 3 * 64 * 64 * 4


def _client(service: WinService, transport: str) -> HttpClient | IpcClient:
    return IpcClient(service.pipe) if transport == "pipe" else HttpClient(service.url)


@pytest.mark.parametrize("transport", ["pipe", "http"])
@pytest.mark.parametrize("late_s", [0.3, 1.0])
def test_run_succeeds_when_its_input_fence_is_signalled_late(
    service: WinService, unique: str, transport: str, late_s: float
) -> None:
    frame = SharedFrame(2 * NBYTES, name=f"Local\\{unique}-frame")
    ready, done = Fence(name=f"Local\\{unique}-ready"), Fence(name=f"Local\\{unique}-done")
    client = _client(service, transport)
    try:
        mem = client.import_memory(name=frame.name)
        wait_id, signal_id = client.import_fence(name=ready.name), client.import_fence(name=done.name)
        sid = client.create_session(
            "add_64x64", {"x": View(mem, "FP32", SHAPE)},
            {"y": View(mem, "FP32", SHAPE, NBYTES)}, wait_id, signal_id,
        )["id"]
        frame.array(np.float32, SHAPE)[:] = 5
        timer = threading.Timer(late_s, ready.signal, args=(1,))
        timer.start()
        try:
            r = client.run(sid, 1, timeout_ms=20000)
        finally:
            timer.join()
        signal = r["signal_value"] if isinstance(r, dict) else r.signal_value
        assert signal == 1 and done.value == 1
        assert np.all(frame.array(np.float32, SHAPE, NBYTES) == 6)
        if isinstance(client, HttpClient):  # HTTP's objects belong to no connection
            client.release_session(sid)
            client.release_memory(mem)
            client.release_fence(wait_id)
            client.release_fence(signal_id)
    finally:
        client.close()
        frame.close()
        ready.close()
        done.close()
    service.assert_released()


# A renderer in its own process: a session over the test's named objects, then a RUN whose
# input fence nobody signals, until the test kills it.
KILLED_RENDERER = textwrap.dedent("""
    import json, sys
    sys.path.insert(0, sys.argv[1])
    from fenceline.client import HttpClient, IpcClient, View
    transport, where, frame, ready, done, nbytes = sys.argv[2:8]
    c = IpcClient(where) if transport == "pipe" else HttpClient(where)
    mem = c.import_memory(name=frame)
    wait_id, signal_id = c.import_fence(name=ready), c.import_fence(name=done)
    shape = [1, 3, 64, 64]
    sid = c.create_session("add_64x64", {"x": View(mem, "FP32", shape)},
                           {"y": View(mem, "FP32", shape, int(nbytes))}, wait_id, signal_id)["id"]
    print(json.dumps({"session": sid, "memory": mem, "fences": [wait_id, signal_id]}), flush=True)
    c.run(sid, 1, timeout_ms=20000)
    print("ran", flush=True)
""")


@pytest.mark.parametrize("transport", ["pipe", "http"])
def test_a_renderer_killed_while_its_run_waits_is_released_within_a_second(
    service: WinService, unique: str, transport: str
) -> None:
    frame = SharedFrame(2 * NBYTES, name=f"Local\\{unique}-frame")
    ready, done = Fence(name=f"Local\\{unique}-ready"), Fence(name=f"Local\\{unique}-done")
    where = service.pipe if transport == "pipe" else service.url
    child = subprocess.Popen(
        [sys.executable, "-c", KILLED_RENDERER, str(Path(__file__).parents[2]), transport, where,
         str(frame.name), str(ready.name), str(done.name), str(NBYTES)],
        stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
    )
    try:
        assert child.stdout is not None
        # The first JSON line: onnxruntime may print its own notices before it.
        ids = json.loads(next(line for line in child.stdout if line.startswith("{")))
        time.sleep(0.5)  # the RUN is in the service, waiting
        assert child.poll() is None and done.value == 0
    finally:
        child.kill()
        child.communicate(timeout=60)
    y = frame.array(np.float32, SHAPE, NBYTES)
    y[:] = 7
    time.sleep(1.0)
    ready.signal(1)
    time.sleep(0.5)
    try:
        assert done.value == 0 and np.all(y == 7), "the killed renderer's run ran"
    finally:
        if transport == "http":  # HTTP's objects belong to no connection
            with HttpClient(service.url) as http:
                http.release_session(ids["session"])
                http.release_memory(ids["memory"])
                for f in ids["fences"]:
                    http.release_fence(f)
        frame.close()
        ready.close()
        done.close()
    service.assert_released()
