"""The Triton peer: a real Triton Inference Server, started through nvidia-pytriton on loopback,
serving the bench's ONNX models with onnxruntime inside a python-backend function, so its rows
are measured in the same run, on the same models, beside fenceline's.

The server runs in its own process (``python -m fenceline.bench.triton serve ...``), started and
stopped by :class:`TritonPeer`; nvidia-pytriton is only needed there (``pip install
'.[bench]'``).

Facts this module is built around:
- pytriton's python-backend stub links the system libpython; from a venv it is found only with
  ``LD_LIBRARY_PATH=<sys.base_prefix>/lib``.
- PyTriton 0.7 guards the shared-memory routes with a ``triton-access-token`` header; the peer
  chooses the token and the clients send it.
"""

from __future__ import annotations

import argparse
import contextlib
import logging
import os
import secrets
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path
from types import TracebackType
from typing import Any

import httpx

from fenceline.cli.process import free_port
from fenceline.errors import FencelineError

ACCESS_HEADER = "triton-access-token"
START_TIMEOUT_S = 240.0


def available() -> str | None:
    """None when a Triton peer can start here, else why not."""
    try:
        import pytriton  # noqa: F401
        import tritonclient.http  # noqa: F401
    except ImportError as e:
        return f"{e.name} is not installed (pip install '.[bench]')"
    return None


class TritonPeer:
    """A Triton server process serving ``models`` (name -> ONNX path). ``close()`` stops it and
    is safe twice; ``url`` and ``headers`` are what a client needs."""

    def __init__(self, models: dict[str, Path], workdir: Path) -> None:
        self.models = dict(models)
        self.token = secrets.token_urlsafe(24)
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.headers = {ACCESS_HEADER: self.token}
        self.log_path = workdir / "triton-peer.log"
        self.version = ""
        self._proc: subprocess.Popen[bytes] | None = None
        self._log: Any = None
        self._workdir = workdir

    def start(self) -> TritonPeer:
        env = dict(os.environ)
        lib = str(Path(sys.base_prefix) / "lib")
        env["LD_LIBRARY_PATH"] = lib + (":" + env["LD_LIBRARY_PATH"] if env.get("LD_LIBRARY_PATH") else "")
        env["FENCELINE_TRITON_TOKEN"] = self.token  # not on the command line, where ps shows it
        args = [sys.executable, "-m", "fenceline.bench.triton", "serve", "--port", str(self.port),
                "--workspace", str(self._workdir / "triton-workspace")]
        for name, path in self.models.items():
            args += ["--model", f"{name}={path}"]
        self._log = open(self.log_path, "wb")  # noqa: SIM115 (closed in close())
        self._proc = subprocess.Popen(args, env=env, stdout=self._log, stderr=subprocess.STDOUT,
                                      start_new_session=True)
        deadline = time.monotonic() + START_TIMEOUT_S
        with httpx.Client(base_url=self.url, timeout=2.0) as http:
            while time.monotonic() < deadline:
                if self._proc.poll() is not None:
                    status = self._proc.returncode
                    self.close()
                    raise FencelineError(f"the Triton peer exited with status {status}; its log: "
                                         f"{self.log_path}\n{self.tail()}")
                with contextlib.suppress(httpx.HTTPError):
                    ready = all(
                        http.get(f"/v2/models/{m}/ready").status_code == 200 for m in self.models
                    )
                    if ready and http.get("/v2/health/ready").status_code == 200:
                        self.version = str(http.get("/v2").json().get("version", ""))
                        return self
                time.sleep(0.25)
        self.close()
        raise FencelineError(f"the Triton peer was not ready within {START_TIMEOUT_S:.0f} s; "
                             f"its log: {self.log_path}")

    @property
    def pid(self) -> int | None:
        return self._proc.pid if self._proc is not None else None

    def tail(self, lines: int = 15) -> str:
        try:
            text = self.log_path.read_text(errors="replace")
        except OSError:
            return ""
        return "\n".join(text.splitlines()[-lines:])

    def close(self) -> None:
        proc, self._proc = self._proc, None
        if proc is not None and proc.poll() is None:
            # The whole group: tritonserver and its backend stubs are the peer's children.
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGTERM)
            try:
                proc.wait(30)
            except subprocess.TimeoutExpired:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(proc.pid, signal.SIGKILL)
                proc.wait()
        if self._log is not None:
            self._log.close()
            self._log = None

    def __enter__(self) -> TritonPeer:
        return self.start()

    def __exit__(self, t: type[BaseException] | None, e: BaseException | None,
                 tb: TracebackType | None) -> None:
        self.close()


# -- the peer process ---------------------------------------------------------------------------


def _bind(triton: Any, name: str, path: Path) -> None:
    import numpy as np
    import onnxruntime as ort
    from pytriton.model_config import ModelConfig, Tensor

    so = ort.SessionOptions()
    so.add_session_config_entry("session.intra_op.allow_spinning", "0")  # as fenceline's
    session = ort.InferenceSession(str(path), so, providers=["CPUExecutionProvider"])
    ins, outs = session.get_inputs(), session.get_outputs()
    out_names = [o.name for o in outs]
    np_types = {"tensor(float)": np.float32, "tensor(float16)": np.float16, "tensor(uint8)": np.uint8,
                "tensor(int64)": np.int64, "tensor(int32)": np.int32, "tensor(double)": np.float64}

    def spec(a: Any) -> Any:
        shape = tuple(d if isinstance(d, int) and d >= 0 else -1 for d in a.shape)
        return Tensor(name=a.name, dtype=np_types[a.type], shape=shape)

    def infer(requests: list[Any]) -> list[dict[str, Any]]:
        replies = []
        for request in requests:
            results = session.run(out_names, {i.name: request[i.name] for i in ins})
            replies.append(dict(zip(out_names, results, strict=True)))
        return replies

    triton.bind(model_name=name, infer_func=infer, inputs=[spec(a) for a in ins],
                outputs=[spec(a) for a in outs], config=ModelConfig(batching=False))


def serve(port: int, models: dict[str, Path], workspace: Path | None) -> int:
    from pytriton.triton import Triton, TritonConfig, TritonSecurityConfig

    token = os.environ.get("FENCELINE_TRITON_TOKEN") or secrets.token_urlsafe(24)
    config = TritonConfig(
        http_address="127.0.0.1", http_port=port, allow_grpc=False, grpc_port=free_port(),
        allow_metrics=False, metrics_port=free_port(), log_verbose=0,
    )
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    with Triton(config=config, workspace=workspace,
                security_config=TritonSecurityConfig(access_token=token)) as triton:
        for name, path in models.items():
            _bind(triton, name, path)
        triton.run()
        print(f"triton peer ready on 127.0.0.1:{port}", flush=True)
        while not stop.wait(0.5):
            if not triton.is_alive():
                print("triton is no longer alive", flush=True)
                return 1
    return 0


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m fenceline.bench.triton")
    sub = p.add_subparsers(dest="command", required=True)
    s = sub.add_parser("serve", help="serve ONNX models from a Triton server (pytriton)")
    s.add_argument("--port", type=int, required=True)
    s.add_argument("--model", action="append", default=[], metavar="NAME=PATH")
    s.add_argument("--workspace", type=Path)
    args = p.parse_args(argv)
    logging.basicConfig(level=logging.WARNING)
    models = {}
    for item in args.model:
        name, sep, path = item.partition("=")
        if not sep:
            p.error(f"--model takes NAME=PATH, not {item!r}")
        models[name] = Path(path)
    return serve(args.port, models, args.workspace)


if __name__ == "__main__":
    sys.exit(main())
