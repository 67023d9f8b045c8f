"""A renderer killed on the named pipe with RUNs of a slow model queued behind the one in
progress (docs/reliability.md, "Connections: every wait on a renderer is bounded"): the run in
progress is abandoned, what it queued is dropped, never run, and its connection, imports,
session, handles and threads are released.
Its end of the pipe either closes with it or lives on in another process (this one), as the
Unix socket's end does in its own receive queue: then only its process's exit can say it is
gone. Real Windows processes: the service and the renderer (win_peer.py queue)."""

from __future__ import annotations

import ctypes
import os
import subprocess
import sys
import time

import pytest

from fenceline import _native
from fenceline.client import Fence, IpcClient, SharedFrame, View
from tests.support.metrics import metrics_text, total
from tests.windows.kernel import close_handle
from tests.windows.test_service import HERE, WinService, first_json

QUEUED_RUNS = 20
SHAPE = [1, 3, 64, 64]
NBYTES = 3 * 64 * 64 * 4


class _ThreadEntry(ctypes.Structure):  # THREADENTRY32
    _fields_ = [
        ("dwSize", ctypes.c_ulong), ("cntUsage", ctypes.c_ulong), ("th32ThreadID", ctypes.c_ulong),
        ("th32OwnerProcessID", ctypes.c_ulong), ("tpBasePri", ctypes.c_long),
        ("tpDeltaPri", ctypes.c_long), ("dwFlags", ctypes.c_ulong),
    ]


def thread_count(pid: int) -> int:
    """Threads of process ``pid``, from a toolhelp snapshot."""
    k32 = ctypes.WinDLL("kernel32", use_last_error=True)
    k32.CreateToolhelp32Snapshot.restype = ctypes.c_void_p
    snap = k32.CreateToolhelp32Snapshot(0x4, 0)  # TH32CS_SNAPTHREAD
    assert snap and snap != ctypes.c_void_p(-1).value, ctypes.get_last_error()
    try:
        entry = _ThreadEntry()
        entry.dwSize = ctypes.sizeof(entry)
        n = 0
        more = k32.Thread32First(ctypes.c_void_p(snap), ctypes.byref(entry))
        while more:
            n += entry.th32OwnerProcessID == pid
            more = k32.Thread32Next(ctypes.c_void_p(snap), ctypes.byref(entry))
        return n
    finally:
        k32.CloseHandle(ctypes.c_void_p(snap))


def released_after(service: WinService, handles: int, threads: int,
                   timeout_s: float = 60.0) -> dict[str, float]:
    """Seconds until the service held no pipe connection, import or session (``objects``), no
    more kernel handles than ``handles`` and no more threads than ``threads``: each from the
    first look that saw it (a look over HTTP under Wine takes tens of milliseconds). Missing:
    not within ``timeout_s``."""
    start = time.monotonic()
    seen: dict[str, float] = {}

    def objects() -> bool:
        text = metrics_text(service)
        return all(total(text, name) == 0 for name in (
            "fenceline_ipc_open_connections", "fenceline_interop_imported_handles",
            "fenceline_session_active"))

    checks = {"objects": objects, "handles": lambda: service.handle_count() <= handles,
              "threads": lambda: thread_count(service.proc.pid) <= threads}
    while len(seen) < len(checks) and time.monotonic() - start < timeout_s:
        for what, check in checks.items():
            if what not in seen and check():
                seen[what] = round(time.monotonic() - start, 3)
        time.sleep(0.01)
    return seen


@pytest.fixture(scope="module")
def warm(service: WinService) -> WinService:
    """The service once it ran the slow model: its first run's allocations, kept for good, are
    not the killed renderer's."""
    service.baseline_handles()
    with (IpcClient(service.pipe) as client, SharedFrame(2 * NBYTES) as frame,
          Fence() as ready, Fence() as done):
        mem = client.import_memory(frame)
        session = client.create_session(
            "slow_add_64x64", {"x": View(mem, "FP32", SHAPE)},
            {"y": View(mem, "FP32", SHAPE, offset_bytes=NBYTES)},
            client.import_fence(ready), client.import_fence(done))["id"]
        ready.signal(1)
        started = time.perf_counter()
        assert client.run(session, 1).signal_value == 1
        print(f"\none run of slow_add_64x64 over the pipe: {time.perf_counter() - started:.3f} s")
    return service


@pytest.mark.parametrize("end", ["closed", "held"])
def test_a_renderer_killed_with_runs_queued_is_released_and_its_queued_runs_never_run(
    warm: WinService, end: str
) -> None:
    service = warm
    handles, threads = service.settled_handles(), thread_count(service.proc.pid)
    args = [str(HERE / "win_peer.py"), "queue", service.pipe, str(QUEUED_RUNS)]
    if end == "held":  # its end of the pipe, duplicated into this process: it never closes
        args.append(str(os.getpid()))
    proc = subprocess.Popen([sys.executable, *args], stdin=subprocess.DEVNULL,
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    held = 0
    try:
        ready = first_json(proc)
        assert ready["sent"] == QUEUED_RUNS, ready
        held = int(ready["end"])
        assert (held != 0) == (end == "held"), ready
        # Its output fence: the value is the last run the service executed (run n signals n).
        done = _native.HostFence.open_shm(ready["done"])
        try:
            assert done.wait(1, 120 * 10**9, 0) == _native.WAIT_REACHED  # the first one ran
            during = (service.handle_count(), thread_count(service.proc.pid))
            proc.kill()  # TerminateProcess, while the service runs the second
            proc.wait(60)
            at_death = int(done.value)
            released = released_after(service, handles, threads)
            time.sleep(2.0)  # a queued run served after the release would show by now
            executed = int(done.value)
        finally:
            done.close()
    finally:
        if proc.poll() is None:
            proc.kill()
        proc.communicate(timeout=60)
        if held:
            close_handle(held)
    print(f"\nend {end}: released after TerminateProcess (s): {released}; runs executed "
          f"{at_death} at its death, {executed} in all of {QUEUED_RUNS}; handles {handles} -> "
          f"{during[0]} -> {service.handle_count()}, threads {threads} -> {during[1]} -> "
          f"{thread_count(service.proc.pid)}")
    # The run in progress at its death may finish; nothing queued behind it runs.
    assert executed <= at_death + 1 < QUEUED_RUNS, (at_death, executed)
    assert len(released) == 3, f"not released within 60 s: only {released}"
    service.assert_released(handles)
