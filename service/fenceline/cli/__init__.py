"""``fenceline serve | demo | bench``."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from fenceline import __version__
from fenceline.errors import FencelineError


def _serve_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--model-repository", type=Path, help="DIR with <name>/<version>/model.onnx")
    p.add_argument("--model", action="append", default=[], metavar="NAME=PATH",
                   help="an extra model; repeatable")
    p.add_argument("--host", default="127.0.0.1", help="HTTP bind address (default loopback)")
    p.add_argument("--port", type=int, default=8000)
    p.add_argument("--socket", type=Path, help="IPC socket path (default under $XDG_RUNTIME_DIR)")
    p.add_argument("--ipc-spin-us", type=int, default=100,
                   help="longest spin on the IPC socket before blocking (0: always block)")
    p.add_argument("--fence-spin-us", type=int, default=50,
                   help="longest spin on an input fence before sleeping on its futex")
    p.add_argument("--log-level", default="info")


def _names(text: str) -> list[str]:
    """A comma-separated list; ``none`` is the empty one."""
    return [] if text.strip() == "none" else [t.strip() for t in text.split(",") if t.strip()]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="fenceline", description=__doc__)
    parser.add_argument("--version", action="version", version=f"fenceline {__version__}")
    sub = parser.add_subparsers(dest="command", required=True)

    serve = sub.add_parser("serve", help="run the service")
    _serve_args(serve)

    demo = sub.add_parser("demo", help="service + a renderer process + an image model, live")
    demo.add_argument("--frames", type=int, default=240)
    demo.add_argument("--out", type=Path, default=Path("fenceline-demo.png"),
                      help="where the before/after picture goes")

    bench = sub.add_parser("bench", help="latency of every transport beside the floor and Triton")
    bench.add_argument("--quick", action="store_true",
                       help="a tiny configuration: two sizes, few frames (smoke test)")
    bench.add_argument("--json", type=Path, help="also write the results as JSON here")
    bench.add_argument("--plot", type=Path, help="also draw the latency distributions as PNG here")
    bench.add_argument("--markdown", type=Path, help="also write the tables as Markdown here")
    bench.add_argument("--peers", action="store_true",
                       help="also start a real Triton (nvidia-pytriton) on loopback and measure it")
    bench.add_argument("--sizes", type=_names,
                       help="comma-separated: 64x64,720p,1080p,4K (none: real models only)")
    bench.add_argument("--transports", type=_names,
                       help="comma-separated: in-process,ipc,http,kserve-binary,system-shm,"
                       "triton-binary,triton-shm,...")
    bench.add_argument("--model", action="append", default=[], metavar="NAME=PATH",
                       help="also bench this ONNX model (free H and W of a 1x3xHxW input: 736x1280)")
    bench.add_argument("--no-real-model", dest="real_model", action="store_false",
                       help="leave out the packaged PP-OCRv4 text detector")
    bench.add_argument("--seconds", type=float, help="time budget of each row (default per size)")
    bench.add_argument("--gpu", action="store_true",
                       help="GPU zero-copy: Vulkan renderer -> CUDA session (docs/gpu.md)")

    args = parser.parse_args(argv)
    try:
        if args.command == "serve":
            from fenceline.cli.serve import serve_from_args

            return serve_from_args(args)
        if args.command == "demo":
            from fenceline.cli.demo import demo as run_demo

            return run_demo(args.frames, args.out)
        if args.gpu:
            import importlib

            try:
                gpu = importlib.import_module("fenceline.bench.gpu")
            except ImportError:
                print("fenceline: this build has no GPU bench", file=sys.stderr)
                return 2
            return int(gpu.run_gpu_bench(quick=args.quick, json_path=args.json))
        from fenceline.bench import run_bench
        from fenceline.config import parse_model_arg

        return run_bench(
            quick=args.quick, json_path=args.json, plot_path=args.plot, peers=args.peers,
            sizes=args.sizes, transports=args.transports,
            models=dict(parse_model_arg(m) for m in args.model), real_model=args.real_model,
            seconds=args.seconds, markdown_path=args.markdown,
        )
    except FencelineError as e:
        print(f"fenceline: {e.message}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        return 130
