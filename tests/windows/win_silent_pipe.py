"""A hung, not dead, service on Windows for the C client's deadline test: it serves a named pipe
with the service's own security descriptor, accepts connections and never answers.

    win_silent_pipe.py PIPE_NAME     prints "ready" once it listens; runs until killed
"""

from __future__ import annotations

import sys
from typing import Any

from fenceline import _native
from fenceline.ipc.pipe_server import pipe_sddl


def main(argv: list[str]) -> int:
    native: Any = _native
    listener = native.PipeListener(argv[0], pipe_sddl(frozenset({native.current_user_sid()})))
    print("ready", flush=True)
    held = []
    while True:
        conn = listener.accept()
        if conn is None:
            return 0
        held.append(conn)  # open and never read: the client's requests go unanswered


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
