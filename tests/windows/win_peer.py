"""A second Windows process for the lane's tests: opens or creates named objects by name, the
way a renderer would, and reports on stdout.

    win_peer.py signal FENCE VALUE DELAY_S    open FENCE by name, sleep, signal VALUE
    win_peer.py hold FRAME SIZE FENCE         create FRAME and FENCE, print "ready", wait for stdin
"""

from __future__ import annotations

import sys
import time

import numpy as np

from fenceline import _native


def main(argv: list[str]) -> int:
    if argv[0] == "signal":
        fence = _native.HostFence.open_shm(argv[1])
        time.sleep(float(argv[3]))
        fence.signal(int(argv[2]))
        print("signalled", flush=True)
        return 0
    if argv[0] == "hold":
        frame = _native.HostMemory.create_shm(argv[1], int(argv[2]))
        fence = _native.HostFence.create_shm(argv[3])
        frame.array(np.dtype("u1"))[:4] = [1, 2, 3, 4]
        print("ready", flush=True)
        sys.stdin.readline()
        frame.close()
        fence.close()
        return 0
    raise SystemExit(f"unknown command {argv[0]!r}")


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
