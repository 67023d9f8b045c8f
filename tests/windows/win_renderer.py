"""A Windows renderer, written the way docs/windows.md tells a renderer author: it creates a
named section and two named fences, registers them with the service by name (over HTTP or over
the named pipe), runs FRAMES frames through the add_64x64 model in place and checks every output
against onnxruntime run directly in this process. Prints one JSON line.

    win_renderer.py http URL FRAMES MODEL_ONNX
    win_renderer.py pipe PIPE_NAME FRAMES MODEL_ONNX [--hang-after N]
    win_renderer.py stream PIPE_NAME FRAMES MODEL_ONNX    a streaming session: no message per frame
    win_renderer.py pipe PIPE_NAME FRAMES MODEL_ONNX --unnamed
        an unnamed section and unnamed fences, sent as handles (docs/windows.md, "Handles")
"""

from __future__ import annotations

import json
import os
import sys
import time

import httpx
import numpy as np
import onnxruntime as ort

from fenceline.client import Fence, IpcClient, SharedFrame, View

SHAPE = [1, 3, 64, 64]
NBYTES = 3 * 64 * 64 * 4


def main(argv: list[str]) -> int:
    transport, where, frames, model = argv[0], argv[1], int(argv[2]), argv[3]
    hang_after = int(argv[5]) if len(argv) > 5 and argv[4] == "--hang-after" else 0
    direct = ort.InferenceSession(model, providers=["CPUExecutionProvider"])
    tag = f"{os.getpid()}-{time.monotonic_ns() % 10**9}"
    if "--unnamed" in argv:  # nothing has a name: the pipe client sends handle values
        frame = SharedFrame(2 * NBYTES, named=False)
        ready, done = Fence(named=False), Fence(named=False)
    else:
        frame = SharedFrame(2 * NBYTES, name=f"Local\\game-frame-{tag}")
        ready, done = Fence(name=f"Local\\game-ready-{tag}"), Fence(name=f"Local\\game-done-{tag}")
    image = frame.array(np.float32, SHAPE)
    output = frame.array(np.float32, SHAPE, offset=NBYTES)
    mismatches = 0
    rng = np.random.default_rng(7)
    if transport == "http":
        http = httpx.Client(base_url=where, timeout=60)

        def post(path: str, **body: object) -> dict[str, object]:
            r = http.post(path, json=body)
            r.raise_for_status()
            return dict(r.json())

        mem = post("/v2/interop/memory", handle_type="host_shm", name=frame.name)["id"]
        wait_id = post("/v2/interop/fences", fence_type="host_timeline", name=ready.name)["id"]
        signal_id = post("/v2/interop/fences", fence_type="host_timeline", name=done.name)["id"]
        session = post(
            "/v2/interop/sessions", model="add_64x64",
            inputs={"x": {"memory": mem, "offset_bytes": 0, "datatype": "FP32", "shape": SHAPE}},
            outputs={"y": {"memory": mem, "offset_bytes": NBYTES, "datatype": "FP32", "shape": SHAPE}},
            wait_fence=wait_id, signal_fence=signal_id,
        )["id"]

        def run(n: int) -> int:
            return int(post(f"/v2/interop/sessions/{session}/run", wait_value=n)["signal_value"])
    else:
        client = IpcClient(where)
        mem = client.import_memory(frame)
        streaming = transport == "stream"
        session = client.create_session(
            "add_64x64",
            {"x": View(mem, "FP32", SHAPE)},
            {"y": View(mem, "FP32", SHAPE, offset_bytes=NBYTES)},
            client.import_fence(ready), client.import_fence(done),
            mode="streaming" if streaming else "request", policy="every",
        )["id"]

        def run(n: int) -> int:
            if streaming:  # the service runs frame n on its own once `ready` reaches n
                return n if done.wait(n, 60.0) else -done.value
            return int(client.run(session, n).signal_value)

    t0 = time.perf_counter()
    for n in range(1, frames + 1):
        image[:] = rng.random(SHAPE, dtype=np.float32)  # render frame n
        ready.signal(n)                                   # inputs ready at value n
        if hang_after and n > hang_after:
            print(json.dumps({"hanging": n}), flush=True)
            time.sleep(3600)  # the test kills us here, mid-run
        assert run(n) == n and done.value >= n            # outputs are in `output`
        expected = direct.run(None, {"x": image})[0]
        if not np.array_equal(output, expected):
            mismatches += 1
    elapsed = time.perf_counter() - t0
    if transport == "http":
        # HTTP imports belong to no connection: release them, or they live until the service stops.
        for path in (f"sessions/{session}", f"memory/{mem}", f"fences/{wait_id}", f"fences/{signal_id}"):
            http.delete(f"/v2/interop/{path}").raise_for_status()
    else:
        if transport == "stream":
            stream = client.stop_session(session)["stream"]
            assert stream["frames"] == frames and stream["failed"] == 0, stream
        client.close()  # the service releases everything this connection created
    print(json.dumps({"frames": frames, "mismatches": mismatches, "seconds": round(elapsed, 3)}),
          flush=True)
    frame.close()
    ready.close()
    done.close()
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
