"""``fenceline serve | demo | bench``."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from fenceline import __version__
from fenceline.errors import FencelineError
from fenceline.logs import LOG_FORMATS


def _serve_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--model-repository", type=Path, help="DIR with <name>/<version>/model.onnx")
    p.add_argument("--model", action="append", default=[], metavar="NAME=PATH",
                   help="an extra model; repeatable")
    p.add_argument("--host", default="127.0.0.1", help="HTTP bind address (default loopback)")
    p.add_argument("--port", type=int, default=8000)
    p.add_argument("--socket", type=Path,
                   help="IPC socket path (default under $XDG_RUNTIME_DIR); on Windows the named "
                   "pipe (default \\\\.\\pipe\\fenceline-<your SID>)")
    p.add_argument("--ipc-spin-us", type=int, default=100,
                   help="longest spin on the IPC socket before blocking (0: always block)")
    p.add_argument("--fence-spin-us", type=int, default=50,
                   help="longest spin on an input fence before sleeping on its futex")
    p.add_argument("--max-spinners", type=int, default=None, metavar="N",
                   help="most fence waiters of the service that spin at once (default: half the "
                   "CPUs it may use, at least 1; 0: never spin); docs/streaming.md")
    p.add_argument("--log-level", default="info",
                   choices=["critical", "error", "warning", "info", "debug"])
    p.add_argument("--log-format", default="text", choices=LOG_FORMATS,
                   help="text for a terminal, json: one object per line with request/session ids")
    p.add_argument("--allow-uid", type=int, action="append", metavar="UID",
                   help="another user that may use the IPC socket and import the objects it "
                   "owns by name; repeatable (the service's own user always may); docs/http.md")
    p.add_argument("--token-file", type=Path,
                   help="require Authorization: Bearer <the file's contents> on HTTP")
    p.add_argument("--max-body-mb", type=int, default=256, help="largest HTTP request body")
    p.add_argument("--max-json-mb", type=int, default=16,
                   help="largest JSON in a request (a KServe JSON header, any other body); "
                   "larger tensors go as binary data or in shared memory")
    p.add_argument("--http-header-timeout-s", type=float, default=10.0, metavar="S",
                   help="close an HTTP connection whose request line and headers take longer")
    p.add_argument("--http-body-idle-s", type=float, default=30.0, metavar="S",
                   help="close an HTTP connection whose request body pauses for longer")
    p.add_argument("--max-sessions", type=int, default=256, help="sessions per client")
    p.add_argument("--max-imports", type=int, default=1024, help="memory + fence imports per client")
    p.add_argument("--max-mapped-mb", type=int, default=16384, help="mapped memory per client")
    p.add_argument("--max-inflight", type=int, default=64, help="HTTP runs in flight per client")
    p.add_argument("--max-sessions-per-device", type=int, default=1024,
                   help="CUDA sessions per GPU, over all clients")
    p.add_argument("--client-shared-memory", action=argparse.BooleanOptionalAction, default=True,
                   help="let KServe clients register Triton system shared-memory regions "
                   "(default on; --no-client-shared-memory answers those routes with 501)")


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
    bench.add_argument("--gst", action="store_true",
                       help="fps through the GStreamer element beside appsink -> onnxruntime "
                            "(docs/gstreamer.md)")

    soak = sub.add_parser("soak", help="renderers at full rate with random kills (loopback only)")
    soak.add_argument("--renderers", type=int, default=4)
    soak.add_argument("--seconds", type=float, default=60.0)
    soak.add_argument("--kill-every", type=float, default=5.0, help="mean seconds between kills")
    soak.add_argument(
        "--hostile", type=int, default=0, metavar="N",
        help="also run N hostile renderers at a time: shrinking memory and fences, malformed "
        "frames with fds, dying while the service waits or before it replies",
    )
    soak.add_argument("--warmup", type=float, default=10.0)
    soak.add_argument("--json", type=Path, help="also write the report as JSON here")

    args = parser.parse_args(argv)
    try:
        if args.command == "serve":
            from fenceline.cli.serve import serve_from_args

            return serve_from_args(args)
        if args.command == "demo":
            from fenceline.cli.demo import demo as run_demo

            return run_demo(args.frames, args.out)
        if args.command == "soak":
            from fenceline.cli.soak import soak_from_args

            return soak_from_args(args)
        if args.gst:
            from fenceline.bench.gst import run_gst_bench

            return run_gst_bench(quick=args.quick, json_path=args.json, sizes=args.sizes)
        if args.gpu:
            from fenceline.bench.gpu import run_gpu_bench

            return run_gpu_bench(quick=args.quick, json_path=args.json)
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
