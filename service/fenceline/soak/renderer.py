"""One soak renderer: memfd frames and fences (nothing in /dev/shm), runs as fast as it can,
checks every output, prints a count line every second. ``python -m fenceline.soak.renderer SOCKET``."""

from __future__ import annotations

import sys
import time

import numpy as np

from fenceline.client import Fence, IpcClient, SharedFrame, View

SHAPE = [1, 3, 64, 64]
NBYTES = 3 * 64 * 64 * 4


def main() -> int:
    client = IpcClient(sys.argv[1], name="fenceline-soak")
    frame, ready, done = SharedFrame(2 * NBYTES), Fence(), Fence()
    mem = client.import_memory(frame)
    sid = client.create_session(
        "add_64x64", {"x": View(mem, "FP32", SHAPE)}, {"y": View(mem, "FP32", SHAPE, NBYTES)},
        client.import_fence(ready), client.import_fence(done),
    )["id"]
    x, y = frame.array(np.float32, SHAPE), frame.array(np.float32, SHAPE, NBYTES)
    n, bad, last = 0, 0, time.monotonic()
    while True:
        n += 1
        x[0, 0, 0, :8] = n % 1000
        ready.signal(n)
        client.run(sid, n)
        if y[0, 0, 0, 0] != n % 1000 + 1:
            bad += 1
        now = time.monotonic()
        if now - last >= 1.0:
            last = now
            print(f"{n} {bad}", flush=True)


if __name__ == "__main__":
    raise SystemExit(main())
