"""A renderer in its own process, for the status page tests.

It shares one memfd frame and two memfd fences over the IPC socket, creates an ``add_64x64``
session, prints ``{"session": ..., "wait_fence": ..., "signal_fence": ...}`` on one line, then
per frame writes the input, signals the input fence and runs, paced at ``--fps``. It stops by
itself after ``--frames`` frames or ``--seconds``, whichever comes first, then holds its objects
until stdin closes (or ``--seconds`` pass), so a test can look at them.

    python tests/support/status_renderer.py SOCKET [--fps 30] [--frames N] [--seconds 60]
"""

from __future__ import annotations

import argparse
import json
import select
import sys
import time

import numpy as np

from fenceline.client import Fence, IpcClient, SharedFrame, View

SHAPE = [1, 3, 64, 64]
NBYTES = int(np.prod(SHAPE)) * 4


def main() -> int:
    p = argparse.ArgumentParser()
    p.add_argument("socket")
    p.add_argument("--fps", type=float, default=30.0)
    p.add_argument("--frames", type=int, default=10**9)
    p.add_argument("--seconds", type=float, default=60.0)
    args = p.parse_args()
    deadline = time.monotonic() + args.seconds
    with (
        IpcClient(args.socket, name="status-test-renderer") as client,
        SharedFrame(2 * NBYTES) as frame,
        Fence() as ready,
        Fence() as done,
    ):
        memory = client.import_memory(frame)
        wait_fence = client.import_fence(ready)
        signal_fence = client.import_fence(done)
        session = client.create_session(
            "add_64x64",
            {"x": View(memory, "FP32", SHAPE, 0)},
            {"y": View(memory, "FP32", SHAPE, NBYTES)},
            wait_fence,
            signal_fence,
        )
        print(json.dumps({"session": session["id"], "wait_fence": wait_fence,
                          "signal_fence": signal_fence}), flush=True)  # fmt: skip
        x = frame.array(np.float32, SHAPE)
        y = frame.array(np.float32, SHAPE, NBYTES)
        period = 1.0 / args.fps
        next_frame = time.monotonic()
        n = 0
        while n < args.frames and time.monotonic() < deadline:
            n += 1
            x.fill(n)
            ready.signal(n)
            reply = client.run(session["id"], n)
            if reply.signal_value != n or not done.wait(n, 5.0) or y[0, 0, 0, 0] != n + 1:
                print(f"frame {n}: wrong output", file=sys.stderr, flush=True)
                return 1
            next_frame += period
            time.sleep(max(0.0, next_frame - time.monotonic()))
        while time.monotonic() < deadline:
            left = max(0.0, deadline - time.monotonic())
            readable, _, _ = select.select([sys.stdin], [], [], left)
            if readable and not sys.stdin.buffer.read1(1):
                break
    return 0


if __name__ == "__main__":
    sys.exit(main())
