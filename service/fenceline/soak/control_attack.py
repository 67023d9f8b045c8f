"""Hostile clients of the control plane (docs/reliability.md, "The control plane"), used by
``fenceline soak --hostile`` beside the hostile renderers (soak/hostile_pool.py)::

    python -m fenceline.soak.control_attack MODE URL SOCKET

Modes, each a few seconds of requests over loopback HTTP, then one JSON line with the answers
by status (``{"codes": {"400": 12, ...}}``):

- ``bad-configs``: loads every model of :data:`HOSTILE_CONFIGS` (2,000-deep nesting, a
  5,000-digit integer, a bad ``\\x`` escape, bytes that are not UTF-8, a 5 MB file, a 300-byte
  name) and names no repository may hold (300 bytes, bytes that are not UTF-8): each answers
  400.
- ``reload-flood``: 80 clients reloading one model as fast as they are answered: each 200.
- ``trace-flood``: traces of the service's largest size with its control token (200, or 409
  while another records), and requests to record or stop one without it (403).

:func:`write_repository` adds the models these need to a repository the service serves in
explicit mode.
"""

from __future__ import annotations

import argparse
import http.client
import json
import shutil
import threading
import time
from collections import Counter
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

RELOAD_MODEL = "soak-reload"
RELOAD_CLIENTS = 80
SECONDS = 3.0
# Model directory -> config.pbtxt bytes, each refused with one invalid_argument line.
HOSTILE_CONFIGS: dict[str, bytes] = {
    "soak-deep": b"optimization {\n" * 2000 + b"}\n" * 2000,
    "soak-huge-number": b"max_batch_size: " + b"9" * 5000 + b"\n",
    "soak-bad-escape": b'platform: "onnx\\x"\n',
    "soak-not-utf8": b"# caf\xe9\n",
    "soak-5mb": b"# " + b"x" * (5 << 20) + b"\n",
    "soak-long-name": f'name: "{"n" * 300}"\n'.encode(),
}
BAD_NAMES = ("n" * 300, "%FF%FE")
ANSWERS: dict[str, frozenset[str]] = {  # what each mode may be answered
    "bad-configs": frozenset({"400"}),
    "reload-flood": frozenset({"200"}),
    "trace-flood": frozenset({"200", "403", "409"}),
}
MODES = tuple(ANSWERS)


def write_repository(root: Path, model: Path) -> list[str]:
    """The attackers' models under ``root``, each a copy of ``model`` (an ONNX file); returns
    the one to load at start (the reload target)."""
    for name, config in [(RELOAD_MODEL, None), *HOSTILE_CONFIGS.items()]:
        (root / name / "1").mkdir(parents=True, exist_ok=True)
        shutil.copyfile(model, root / name / "1" / "model.onnx")
        if config is not None:
            (root / name / "config.pbtxt").write_bytes(config)
    return [RELOAD_MODEL]


class _Client:
    """One keep-alive HTTP connection; answers counted by status."""

    def __init__(self, url: str, codes: Counter[str], lock: threading.Lock) -> None:
        where = urlsplit(url)
        self.conn = http.client.HTTPConnection(where.hostname or "127.0.0.1", where.port,
                                               timeout=120)
        self.codes, self.lock = codes, lock

    def __call__(self, method: str, path: str, body: Any = None, token: str | None = None) -> None:
        headers = {"Content-Type": "application/json"}
        if token:
            headers["Authorization"] = f"Bearer {token}"
        try:
            self.conn.request(method, path, body=json.dumps(body) if body is not None else None,
                              headers=headers)
            r = self.conn.getresponse()
            r.read()
            got = str(r.status)
        except (OSError, http.client.HTTPException) as e:
            got = type(e).__name__
            self.conn.close()
        with self.lock:
            self.codes[got] += 1


def attack(mode: str, url: str, socket: Path) -> dict[str, Any]:
    from fenceline.ipc.control_token import read_token, token_path
    from fenceline.trace import DEFAULT_MAX_FRAMES

    codes: Counter[str] = Counter()
    lock = threading.Lock()
    end = time.monotonic() + SECONDS
    load = "/v2/repository/models/{}/load"

    def bad_configs() -> None:
        c = _Client(url, codes, lock)
        for name in [*HOSTILE_CONFIGS, *BAD_NAMES]:
            c("POST", load.format(name))

    def reloader() -> None:
        c = _Client(url, codes, lock)
        while time.monotonic() < end:
            c("POST", load.format(RELOAD_MODEL))

    def tracer() -> None:
        c, token = _Client(url, codes, lock), read_token(token_path(socket))
        while time.monotonic() < end:
            c("POST", "/v2/interop/trace", {"seconds": 0.5, "frames": DEFAULT_MAX_FRAMES}, token)
            c("POST", "/v2/interop/trace", {"seconds": 0.5})
            c("DELETE", "/v2/interop/trace")

    target, n = {"bad-configs": (bad_configs, 1), "reload-flood": (reloader, RELOAD_CLIENTS),
                 "trace-flood": (tracer, 1)}[mode]
    threads = [threading.Thread(target=target, daemon=True) for _ in range(n)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(SECONDS + 150)
    return {"codes": dict(codes)}


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m fenceline.soak.control_attack")
    p.add_argument("mode", choices=MODES)
    p.add_argument("url")
    p.add_argument("socket", type=Path)
    a = p.parse_args(argv)
    print(json.dumps({"ready": a.mode}), flush=True)
    print(json.dumps(attack(a.mode, a.url, a.socket)), flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
