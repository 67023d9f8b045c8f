"""Runs as another Unix user: ``python -m tests.support.as_user UID GID`` (started as root) imports what
it needs, drops to UID/GID for good, then obeys one JSON command per stdin line and answers one
JSON line each. Imports happen first because the checkout may not be readable by that user.

Commands: ``hold`` (create a named frame with a marker and a named fence, keep them until
exit), ``ipc`` (connect and HELLO), ``ipc_import`` (memory or fence by name, or a memfd by fd),
``http`` (one request: method, url, json, headers), ``trace`` (``fenceline trace``'s credential
and request: whether it found a token, what the service answered), ``runs`` (a renderer running add_64x64 for
``seconds``: its runs, wrong outputs and latency percentiles)."""

from __future__ import annotations

import contextlib
import encodings.idna  # noqa: F401  (httpx asks for it on first use)
import json
import os
import sys
import time
from pathlib import Path
from typing import Any

import httpx
import numpy as np

import fenceline.ipc.server  # noqa: F401  (IpcClient imports it lazily)
from fenceline.cli.trace import credential, fetch_trace
from fenceline.client import Fence, IpcClient, ServiceError, SharedFrame
from fenceline.errors import FencelineError
from fenceline.trace import Limits
from tests.support.helpers import open_session

MARKER = 0x5EC12E7


def main() -> int:
    uid, gid = int(sys.argv[1]), int(sys.argv[2])
    # httpx loads its TLS bundle and transport modules on first use: use it once, while the
    # checkout is still readable (a closed port; the error is expected).
    http = httpx.Client(timeout=30)
    with contextlib.suppress(httpx.HTTPError):
        http.get("http://127.0.0.1:1/")
    os.setgroups([])
    os.setgid(gid)
    os.setuid(uid)
    held: list[Any] = []
    for line in sys.stdin:
        cmd = json.loads(line)
        try:
            out = run(cmd, held, http)
        except ServiceError as e:
            out = {"code": e.code, "message": e.message}
        except Exception as e:  # the test reads it; a crash here is a test failure
            out = {"code": "client_error", "message": f"{type(e).__name__}: {e}"}
        print(json.dumps(out), flush=True)
    for obj in held:
        obj.close()
    http.close()
    return 0


def run(cmd: dict[str, Any], held: list[Any], http: httpx.Client) -> dict[str, Any]:
    op = cmd["op"]
    if op == "hold":
        frame = SharedFrame(cmd["size"], name=cmd["frame"])
        frame.array(np.uint32, [1])[0] = MARKER
        fence = Fence(name=cmd["fence"])
        held += [frame, fence]
        return {"ok": True}
    if op == "ipc":
        with IpcClient(cmd["socket"]) as c:
            return {"ok": True, "version": c.server["version"]}
    if op == "ipc_import":
        with IpcClient(cmd["socket"]) as c:
            if cmd.get("fence"):
                return {"ok": True, "id": c.import_fence(name=cmd["fence"])}
            if cmd.get("memfd"):
                with SharedFrame(4096) as frame:
                    return {"ok": True, "id": c.import_memory(frame)}
            return {"ok": True, "id": c.import_memory(name=cmd["name"])}
    if op == "runs":
        with IpcClient(cmd["socket"]) as c:
            s = open_session(c, "add_64x64", [1, 3, 64, 64])
            took, wrong, value = [], 0, 0
            end = time.monotonic() + cmd["seconds"]
            while time.monotonic() < end:
                value += 1
                s.x[:] = value
                t0 = time.perf_counter_ns()
                s.wait.signal(value)
                c.run(s.session_id, value)
                took.append(time.perf_counter_ns() - t0)
                wrong += int(not np.all(s.y == value + 1))
            s.close()
        took.sort()
        return {"runs": len(took), "wrong": wrong, "p50_us": took[len(took) // 2] / 1e3,
                "p99_us": took[len(took) * 99 // 100] / 1e3}
    if op == "trace":  # as `fenceline trace` does: the credential it finds, then the request
        token = credential(None, Path(cmd["socket"]))
        try:
            doc = fetch_trace(cmd["url"], Limits(cmd.get("seconds", 0.1), 10), token)
        except FencelineError as e:
            return {"token": token is not None, "code": e.code, "message": e.message}
        return {"token": token is not None, "frames": doc["otherData"]["frames"]}
    if op == "http":
        r = http.request(cmd["method"], cmd["url"], json=cmd.get("json"), headers=cmd.get("headers"))
        body = r.json() if r.content and r.headers.get("content-type", "").startswith("application/json") else None
        return {"status": r.status_code, "body": body}
    raise ValueError(f"unknown op {op!r}")


if __name__ == "__main__":
    sys.exit(main())
