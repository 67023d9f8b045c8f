"""A second Windows process for the lane's tests: opens or creates named objects by name, the
way a renderer would, and reports on stdout.

    win_peer.py signal FENCE VALUE DELAY_S    open FENCE by name, sleep, signal VALUE
    win_peer.py hold FRAME SIZE FENCE         create FRAME and FENCE, print "ready", wait for stdin
    win_peer.py queue PIPE RUNS [HOLDER_PID]
        a session of slow_add_64x64 over PIPE, its input ready, RUNS RUNs sent at once without
        reading a reply; prints {"sent": RUNS, "done": NAME of its output fence (run n signals
        n), "end": the handle in HOLDER_PID} and sleeps until killed. With HOLDER_PID, its end of
        the pipe is duplicated into that process first, so the pipe outlives it.
"""

from __future__ import annotations

import ctypes
import json
import os
import sys
import time

import numpy as np

from fenceline import _native
from fenceline.client import Fence, IpcClient, SharedFrame, View

SLOW_SHAPE = [1, 3, 64, 64]
SLOW_BYTES = 3 * 64 * 64 * 4


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
    if argv[0] == "queue":
        queue(argv[1], int(argv[2]), int(argv[3]) if len(argv) > 3 else 0)
    raise SystemExit(f"unknown command {argv[0]!r}")


def queue(pipe: str, runs: int, holder_pid: int) -> None:
    client = IpcClient(pipe, name="queued-runs")
    tag = f"{os.getpid()}-{time.monotonic_ns() % 10**9}"
    frame = SharedFrame(2 * SLOW_BYTES, name=f"Local\\queued-frame-{tag}")
    ready, done = Fence(name=f"Local\\queued-ready-{tag}"), Fence(name=f"Local\\queued-done-{tag}")
    mem = client.import_memory(frame)
    session = client.create_session(
        "slow_add_64x64", {"x": View(mem, "FP32", SLOW_SHAPE)},
        {"y": View(mem, "FP32", SLOW_SHAPE, offset_bytes=SLOW_BYTES)},
        client.import_fence(ready), client.import_fence(done),
    )["id"]
    end = hand_over_pipe_end(client.server_pid, holder_pid) if holder_pid else 0
    ready.signal(1)
    for n in range(1, runs + 1):
        client.send_run(session, 1, n, 10_000)  # on the pipe: sent, its reply never read
    print(json.dumps({"sent": runs, "done": done.name, "end": end}), flush=True)
    while True:
        time.sleep(60)


def hand_over_pipe_end(server_pid: int, holder_pid: int) -> int:
    """Duplicates this process's client end of the pipe served by ``server_pid`` into process
    ``holder_pid``; returns the handle's value there. The end is found among this process's
    handles: the one a GetNamedPipeServerProcessId names ``server_pid`` for."""
    k32 = ctypes.WinDLL("kernel32", use_last_error=True)
    k32.OpenProcess.restype = ctypes.c_void_p
    k32.GetCurrentProcess.restype = ctypes.c_void_p
    k32.GetFileType.argtypes = [ctypes.c_void_p]
    k32.GetNamedPipeServerProcessId.argtypes = [ctypes.c_void_p, ctypes.POINTER(ctypes.c_ulong)]
    k32.DuplicateHandle.argtypes = [ctypes.c_void_p, ctypes.c_void_p, ctypes.c_void_p,
                                    ctypes.POINTER(ctypes.c_void_p), ctypes.c_ulong,
                                    ctypes.c_int, ctypes.c_ulong]
    pid = ctypes.c_ulong()
    ends = [h for h in range(4, 1 << 16, 4)
            if k32.GetFileType(ctypes.c_void_p(h)) == 3  # FILE_TYPE_PIPE
            and k32.GetNamedPipeServerProcessId(ctypes.c_void_p(h), ctypes.byref(pid))
            and pid.value == server_pid]
    if len(ends) != 1:
        raise SystemExit(f"found {len(ends)} ends of the service's pipe")
    holder = k32.OpenProcess(0x0040, False, holder_pid)  # PROCESS_DUP_HANDLE
    if not holder:
        raise SystemExit(f"OpenProcess({holder_pid}) failed: {ctypes.get_last_error()}")
    out = ctypes.c_void_p()
    ok = k32.DuplicateHandle(k32.GetCurrentProcess(), ctypes.c_void_p(ends[0]), holder,
                             ctypes.byref(out), 0, False, 2)  # DUPLICATE_SAME_ACCESS
    k32.CloseHandle(ctypes.c_void_p(holder))
    if not ok:
        raise SystemExit(f"DuplicateHandle failed: {ctypes.get_last_error()}")
    return int(out.value or 0)


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
