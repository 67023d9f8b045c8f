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
    p.add_argument("--max-spinners", type=int, default=None, metavar="N",
                   help="most fence waiters of the service that spin at once (default: half the "
                   "CPUs it may use, at least 1; 0: never spin); docs/streaming.md")
    p.add_argument("--log-level", default="info")


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

    bench = sub.add_parser("bench", help="latency of IPC, HTTP and in-process runs")
    bench.add_argument("--quick", action="store_true", help="few iterations (smoke test)")
    bench.add_argument("--json", type=Path, help="also write the results as JSON here")

    args = parser.parse_args(argv)
    try:
        if args.command == "serve":
            from fenceline.cli.serve import serve_from_args

            return serve_from_args(args)
        if args.command == "demo":
            from fenceline.cli.demo import demo as run_demo

            return run_demo(args.frames, args.out)
        from fenceline.bench import run_bench

        return run_bench(quick=args.quick, json_path=args.json)
    except FencelineError as e:
        print(f"fenceline: {e.message}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        return 130
