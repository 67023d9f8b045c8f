"""The SIGBUS fault guard (docs/reliability.md, "Shrunk memory") in this process: a fault in a
shrunk import becomes a lost import; any other fault still kills."""

from __future__ import annotations

import os
import subprocess
import sys

import numpy as np
import pytest


def test_a_fault_in_a_shrunk_import_becomes_device_lost_in_process() -> None:
    from fenceline import _native
    from fenceline.errors import DeviceLost

    fd = os.memfd_create("unsealable", os.MFD_CLOEXEC)  # no MFD_ALLOW_SEALING
    os.ftruncate(fd, 1 << 16)
    mem = _native.HostMemory.from_fd(os.dup(fd), 0, 0, True)
    assert not mem.sealed and not mem.lost
    faults = _native.mapping_stats()[2]
    os.ftruncate(fd, 0)
    a = mem.array(np.dtype(np.uint8))
    assert int(a[40_000]) == 0  # this read faulted: it now reads a zero page
    a[40_000] = 1  # and writes land in private memory, not in the renderer's
    assert mem.lost and _native.mapping_stats()[2] == faults + 1
    with pytest.raises(DeviceLost, match="shrank"):
        mem.check()
    os.ftruncate(fd, 1 << 16)
    assert os.pread(fd, 1, 40_000) == b"\0"
    del a
    mem.close()
    os.close(fd)


def test_faults_outside_imports_still_kill_the_process() -> None:
    # The guard only absorbs faults in ranges the importer mapped; any other SIGBUS is a bug
    # and must crash as before.
    code = (
        "import mmap, os\n"
        "from fenceline import _native\n"
        "keep = _native.HostMemory.create_memfd('x', 4096)\n"
        "fd = os.memfd_create('y')\n"
        "os.ftruncate(fd, 4096)\n"
        "m = mmap.mmap(fd, 4096)\n"
        "os.ftruncate(fd, 0)\n"
        "print(m[0])\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, timeout=60)
    assert out.returncode == -7, out  # SIGBUS
