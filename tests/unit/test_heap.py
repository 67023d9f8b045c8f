"""The service's C heap settings (fenceline.runtime.heap), in a process of their own."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

# A worker thread frees a 5 MB block (which raises glibc's thresholds to 5 and 10 MB unless
# they are fixed), then allocates, writes and frees 8 blocks of 1 MB, as a trace's answer does
# with its pieces; prints the RSS (KiB) before and after those 8.
PROBE = """
import json, os, sys, threading
from fenceline.runtime import heap

def rss():
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * (os.sysconf("SC_PAGE_SIZE") // 1024)

fixed = heap.fix_thresholds() if sys.argv[1] == "fix" else None
got = {}

def work():
    big = b"x" * (5 << 20)
    del big
    got["before"] = rss()
    blocks = [bytes([i]) * (1 << 20) for i in range(8)]
    got["with"] = rss()
    del blocks
    got["after"] = rss()

t = threading.Thread(target=work)
t.start()
t.join()
print(json.dumps({"fixed": fixed, **got}))
"""


def probe(mode: str, **env: str) -> dict[str, int]:
    out = subprocess.run([sys.executable, "-c", PROBE, mode], check=True, capture_output=True,
                         text=True, env={**os.environ, **env}).stdout
    got: dict[str, int] = json.loads(out)
    return got


@pytest.mark.skipif(not sys.platform.startswith("linux") or not os.confstr("CS_GNU_LIBC_VERSION"),
                    reason="glibc's malloc only")
def test_freed_blocks_go_back_to_the_system_once_thresholds_are_fixed() -> None:
    got = probe("fix")
    assert got["fixed"] is True
    assert got["with"] - got["before"] >= 7 << 10  # the blocks were resident
    assert got["after"] - got["before"] < 2 << 10, got


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="glibc's malloc only")
def test_thresholds_the_user_set_are_left_alone() -> None:
    assert probe("fix", MALLOC_MMAP_THRESHOLD_="131072")["fixed"] is False
