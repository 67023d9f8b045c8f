"""A renderer in its own process for tests: opens a session over IPC and streams frames until
killed. Prints one JSON line when it is running."""

from __future__ import annotations

import json
import sys

import numpy as np

from fenceline.client import IpcClient

sys.path.insert(0, __file__.rsplit("/", 1)[0])  # run as a script: its helpers sit beside it
from helpers import open_session  # noqa: E402


def main() -> None:
    socket_path, model, n = sys.argv[1], sys.argv[2], int(sys.argv[3])
    client = IpcClient(socket_path, name="test-renderer")
    s = open_session(client, model, [1, 3, 64, 64])
    print(json.dumps({"session": s.session_id, "memory": s.memory_id}), flush=True)
    v = 0
    while n < 0 or v < n:
        v += 1
        s.x[:] = v % 7
        s.wait.signal(v)
        client.run(s.session_id, v)
        if not np.all(s.y == (v % 7) + 1):
            print(json.dumps({"error": f"wrong output at {v}"}), flush=True)
            sys.exit(1)
    print(json.dumps({"done": v}), flush=True)
    s.close()
    client.close()


if __name__ == "__main__":
    main()
