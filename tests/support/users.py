"""Another real Unix user, driven from a test: a process of tests/support/as_user.py running as
that user, one JSON command at a time. Creating the user needs root and useradd."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

from tests.support.helpers import ensure_user

ROOT = Path(__file__).resolve().parents[2]


class User:
    """A process running as another user, driven one JSON command at a time."""

    def __init__(self, name: str) -> None:
        pw = ensure_user(name)
        self.uid = pw.pw_uid
        self.name = name
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "tests.support.as_user", str(pw.pw_uid), str(pw.pw_gid)],
            cwd=ROOT, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True,
        )
        self.frame = f"/fenceline-mu-{name}-{os.getpid()}-frame"
        self.fence = f"/fenceline-mu-{name}-{os.getpid()}-fence"

    def __call__(self, op: str, **args: Any) -> dict[str, Any]:
        assert self.proc.stdin is not None and self.proc.stdout is not None
        self.proc.stdin.write(json.dumps({"op": op, **args}) + "\n")
        self.proc.stdin.flush()
        line = self.proc.stdout.readline()
        assert line, f"{self.name}'s process died"
        out: dict[str, Any] = json.loads(line)
        assert out.get("code") != "client_error", out
        return out

    def close(self) -> None:
        assert self.proc.stdin is not None and self.proc.stdout is not None
        self.proc.stdin.close()
        self.proc.wait(30)
        self.proc.stdout.close()
