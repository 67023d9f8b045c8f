"""Runs one Wine command with its stdout and stderr through a pipe, copies what it writes to
this process's stdout, and returns its exit status as soon as *it* exits.

CPython 3.13 under Wine 8 cannot start with a regular file as stdout (see .ci/windows), so its
output must go through a pipe. A plain `wine ... | cat` ends only when every holder of the
pipe's write end has closed it, and the wineserver and Wine's system processes (services.exe,
winedevice.exe, ...) inherit it and live as long as any Wine process of the prefix: another
checkout's lane, or one left running, would hold the lane. Here the pipe is read until the
process we started exits; then what it wrote before exiting is drained without blocking, and
whoever else holds the write end is ignored.

    python3 wrun.py COMMAND [ARGS...]
"""

from __future__ import annotations

import os
import selectors
import subprocess
import sys


def _copy(fd: int, out: int) -> bool:
    """Copies what is readable now; False at end of file or when nothing is left."""
    try:
        data = os.read(fd, 65536)
    except BlockingIOError:
        return False
    if not data:
        return False
    os.write(out, data)
    return True


def main(argv: list[str]) -> int:
    if not argv:
        print("usage: wrun.py COMMAND [ARGS...]", file=sys.stderr)
        return 2
    read_end, write_end = os.pipe()
    with open(os.devnull, "rb") as devnull:
        child = subprocess.Popen(argv, stdin=devnull, stdout=write_end, stderr=write_end)
    os.close(write_end)
    os.set_blocking(read_end, False)
    out = sys.stdout.fileno()
    with selectors.DefaultSelector() as sel:
        sel.register(read_end, selectors.EVENT_READ)
        while child.poll() is None:
            # A short timeout: the child's exit is noticed within 0.2 s even when its output
            # pipe stays open (held by processes it started).
            if sel.select(timeout=0.2) and not _copy(read_end, out):
                # End of file: every writer closed; only the exit is left to wait for.
                child.wait()
                break
    # The child is gone: everything it wrote is in the pipe already.
    while _copy(read_end, out):
        pass
    os.close(read_end)
    return child.returncode if child.returncode >= 0 else 128 - child.returncode


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
