"""The service's C heap (glibc's malloc), set at start so that what a burst of work allocates
goes back to the system once freed (docs/reliability.md, "Memory").

glibc raises its mmap threshold to the size of each mmapped block it frees (up to 32 MiB) and
its trim threshold to twice that, so one freed 5 MB buffer (a 20,000-frame trace's records)
makes every later block below 5 MB come from a heap, and a thread's heap keep up to 10 MB of
free memory for good: twenty 20,000-frame traces over the HTTP worker threads left ~18 MB. With
both thresholds fixed, a block of 256 KiB or more is mapped on its own and unmapped when freed,
and a heap gives back free memory past 1 MiB at its top; the dynamic raise is off.
"""

from __future__ import annotations

import ctypes
import os
import sys

M_TRIM_THRESHOLD = -1  # mallopt's parameters (malloc.h)
M_MMAP_THRESHOLD = -3
MMAP_THRESHOLD = 256 << 10
TRIM_THRESHOLD = 1 << 20
# Set by the user: glibc read them already, and the service leaves them as they are.
ENVIRONMENT = ("MALLOC_MMAP_THRESHOLD_", "MALLOC_TRIM_THRESHOLD_", "GLIBC_TUNABLES")


def fix_thresholds() -> bool:
    """Fixes glibc's mmap and trim thresholds (MMAP_THRESHOLD, TRIM_THRESHOLD); False where the
    C library is not glibc or the user set them."""
    if not sys.platform.startswith("linux") or any(v in os.environ for v in ENVIRONMENT):
        return False
    try:
        if not os.confstr("CS_GNU_LIBC_VERSION"):
            return False
        mallopt = ctypes.CDLL(None).mallopt
    except (ValueError, OSError, AttributeError):  # not glibc
        return False
    mallopt.argtypes = [ctypes.c_int, ctypes.c_int]
    mallopt.restype = ctypes.c_int
    return bool(mallopt(M_MMAP_THRESHOLD, MMAP_THRESHOLD)) and bool(
        mallopt(M_TRIM_THRESHOLD, TRIM_THRESHOLD))
