"""An example renderer: a separate process that renders frames with Vulkan into memory exported
as OPAQUE_FD, signals its exported timeline semaphore, lets a running fenceline service run a
model on the frames on the GPU, and waits on the output semaphore (spin, then block).

On a Linux machine with an NVIDIA GPU, onnxruntime-gpu and `pip install 'fenceline[gpu]'`, from
the repository's root:

    python3 examples/vulkan_renderer.py --make-models models  # models/add_1080p on the CUDA EP
    fenceline serve --model-repository models --socket /tmp/fenceline-gpu.sock &
    python3 examples/vulkan_renderer.py --socket /tmp/fenceline-gpu.sock
    kill %1

The renderer waits up to 60 s for the service's socket to appear. Each frame is a gradient that
moves with the frame number, uploaded through a staging buffer; the output of every tenth frame
is read back on the renderer's queue and checked (y = x + 1). With `--streaming` the session is a
streaming one (docs/streaming.md, "GPU sessions"): no RUN is sent, the service runs each value
the input semaphore reaches.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

import numpy as np

from fenceline.client import IpcClient
from fenceline.client.vk_renderer import VkRenderer
from fenceline.models import build_repository

SOCKET_WAIT_S = 60.0


def make_models(root: Path, name: str) -> None:
    """A model repository with ``name`` (a builtin add_* model) on the CUDA execution provider."""
    build_repository(root, [name])
    (root / name / "config.json").write_text('{"execution_provider": "cuda"}\n')
    print(f"wrote {root / name} (execution_provider: cuda)")


def wait_for(socket: Path | None) -> None:
    """A service started in the background a moment ago may not listen yet."""
    deadline = time.monotonic() + SOCKET_WAIT_S
    while socket is not None and not socket.exists() and time.monotonic() < deadline:
        time.sleep(0.1)


def frame(shape: list[int], n: int) -> np.ndarray:
    _, c, h, w = shape
    ys = np.linspace(0, 1, h, dtype=np.float32)[:, None]
    xs = np.linspace(0, 1, w, dtype=np.float32)[None, :]
    planes = [(xs * (k + 1) + ys + n * 0.01) % 1.0 for k in range(c)]
    return np.stack(planes)[None].astype(np.float32)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--socket", type=Path, help="the service's IPC socket (default: its default path)")
    p.add_argument("--model", default="add_1080p")
    p.add_argument("--shape", default="1,3,1080,1920")
    p.add_argument("--frames", type=int, default=60)
    p.add_argument("--streaming", action="store_true",
                   help="a streaming session: signal the input semaphore only, send no RUN")
    p.add_argument("--make-models", type=Path, metavar="DIR",
                   help="write a model repository with --model for `fenceline serve`, and exit")
    args = p.parse_args(argv)
    if args.make_models is not None:
        make_models(args.make_models, args.model)
        return 0
    wait_for(args.socket)
    shape = [int(d) for d in args.shape.split(",")]
    latencies = []
    options = {"mode": "streaming", "policy": "every"} if args.streaming else {}
    with IpcClient(args.socket, name="vulkan-renderer-example") as client, \
            VkRenderer(client, args.model, shape, session_options=options) as r:
        print(f"renderer on {r.dev.name} (device uuid {r.dev.uuid_hex})")
        for n in range(1, args.frames + 1):
            x = frame(shape, n)
            r.upload(0, x, n)  # staging -> exported input, then signal n on the GPU queue
            t0 = time.perf_counter()
            if not args.streaming:  # a streaming session runs n once the semaphore reaches it
                client.run_async(r.slots[0].session, n)
            if not r.wait_output(0, n, timeout_s=5):
                print(f"frame {n}: the output semaphore never reached {n}", file=sys.stderr)
                return 1
            latencies.append(time.perf_counter() - t0)
            if n % 10 == 0 or n == args.frames:
                y = r.read_output(0, n)
                if not np.array_equal(y, x + 1):
                    print(f"frame {n}: wrong output", file=sys.stderr)
                    return 1
    what = "signal submitted" if args.streaming else "RUN"
    print(f"{args.frames} frames verified; {what} -> output seen p50 "
          f"{statistics.median(latencies) * 1e6:.0f} us")
    return 0


if __name__ == "__main__":
    sys.exit(main())
