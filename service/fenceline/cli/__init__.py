"""The ``fenceline`` command: one subcommand per task (``fenceline --help`` lists them)."""

from __future__ import annotations

import argparse
import os
import signal
import sys
from pathlib import Path

from fenceline import __version__
from fenceline.config import LOG_LEVELS, setting_help
from fenceline.errors import FencelineError, InvalidArgument, Unsupported
from fenceline.logs import LOG_FORMATS
from fenceline.runtime.model_config import CONTROL_MODES

S = argparse.SUPPRESS  # an absent flag: the settings object decides (environment, default)


def _serve_args(p: argparse.ArgumentParser) -> None:
    """Flags of ``fenceline serve``; an absent flag leaves the field to ``FENCELINE_*`` or its
    default (fenceline.config), which ``--help`` shows."""
    h = setting_help
    p.add_argument("--model-repository", type=Path, default=S, help=h(
        "model_repository", "DIR with <name>/<version>/model.onnx",
        default="the builtin models, when no --model is given either"))
    p.add_argument("--model", action="append", default=S, metavar="NAME=PATH",
                   help=h("models", "an extra model; repeatable; env takes JSON {NAME: PATH}"))
    p.add_argument("--model-control-mode", default=S, choices=CONTROL_MODES, help=h(
        "model_control_mode", "as Triton's: none loads every model at start; explicit loads "
        "those of --load-model and lets clients load and unload; poll rescans the repository "
        "(docs/triton.md)"))
    p.add_argument("--load-model", dest="load_models", action="append", default=S,
                   metavar="NAME", help=h(
        "load_models", "explicit mode: a model to load at start; repeatable; * loads all; env "
        "takes JSON [NAME, ...]"))
    p.add_argument("--repository-poll-secs", type=float, default=S, metavar="S", help=h(
        "repository_poll_secs", "poll mode: seconds between rescans of the repository"))
    p.add_argument("--host", default=S, help=h("host", "HTTP bind address"))
    p.add_argument("--port", type=int, default=S, help=h("port", "HTTP port (0: any free one)"))
    p.add_argument("--socket", type=Path, default=S, help=h(
        "socket", "IPC socket path; on Windows the named pipe",
        default="$XDG_RUNTIME_DIR/fenceline/fenceline.sock, without XDG_RUNTIME_DIR "
        "/tmp/fenceline-<uid>/fenceline/fenceline.sock; on Windows \\\\.\\pipe\\fenceline-<your SID>"))
    p.add_argument("--ipc-spin-us", type=int, default=S, help=h(
        "ipc_spin_us", "longest spin on the IPC socket before blocking (0: always block)"))
    p.add_argument("--fence-spin-us", type=int, default=S, help=h(
        "fence_spin_us", "longest spin on an input fence before sleeping on its futex"))
    p.add_argument("--max-spinners", type=int, default=S, metavar="N", help=h(
        "max_spinners", "most waiters of the service (fence waits, socket receives) that spin at "
        "once (0: never spin); "
        "docs/streaming.md", default="half the CPUs it may use, at least 1"))
    p.add_argument("--log-level", default=S, choices=LOG_LEVELS, help=h("log_level"))
    p.add_argument("--log-format", default=S, choices=LOG_FORMATS, help=h(
        "log_format", "text for a terminal, json: one object per line with request/session ids"))
    p.add_argument("--allow-uid", type=int, action="append", default=S, metavar="UID", help=h(
        "allow_uids", "another user that may use the IPC socket and import the objects it owns "
        "by name; repeatable (the service's own user always may); env takes JSON [UID, ...]; "
        "docs/http.md"))
    p.add_argument("--token-file", type=Path, default=S, help=h(
        "token_file", "require Authorization: Bearer <the file's contents> on HTTP"))
    p.add_argument("--http-trace", action=argparse.BooleanOptionalAction, default=S, help=h(
        "http_trace", "without --token-file, let any HTTP client record and stop traces, which "
        "show every user's sessions (off: only a client with the control token beside the "
        "socket, which `fenceline trace` reads; docs/tracing.md)"))
    p.add_argument("--trace-max-frames", type=int, default=S, metavar="N", help=h(
        "trace_max_frames", "the most frames one trace may record (~1 KB of answer and 256 "
        "bytes of buffer each)"))
    p.add_argument("--max-body-mb", type=int, default=S, help=h("max_body_mb", "largest HTTP request body"))
    p.add_argument("--max-json-mb", type=int, default=S, help=h(
        "max_json_mb", "largest JSON in a request (a KServe JSON header, any other body); larger "
        "tensors go as binary data or in shared memory"))
    p.add_argument("--http-header-timeout-s", type=float, default=S, metavar="S", help=h(
        "http_header_timeout_s", "close an HTTP connection whose request line and headers take longer"))
    p.add_argument("--http-body-idle-s", type=float, default=S, metavar="S", help=h(
        "http_body_idle_s", "close an HTTP connection whose request body pauses for longer"))
    p.add_argument("--max-sessions", type=int, default=S, help=h("max_sessions", "sessions per client"))
    p.add_argument("--max-imports", type=int, default=S, help=h(
        "max_imports", "memory + fence imports per client"))
    p.add_argument("--max-imports-per-user", type=int, default=S, metavar="N", help=h(
        "max_imports_per_user", "memory + fence imports of one user (uid) over all its clients"))
    p.add_argument("--max-mapped-mb", type=int, default=S, help=h(
        "max_mapped_mb", "mapped memory per client"))
    p.add_argument("--max-inflight", type=int, default=S, help=h(
        "max_inflight", "HTTP runs in flight per client"))
    p.add_argument("--max-sessions-per-device", type=int, default=S, help=h(
        "max_sessions_per_device", "CUDA sessions per GPU, over all clients"))
    p.add_argument("--max-connections", type=int, default=S, metavar="N", help=h(
        "max_connections", "IPC connections served at once, over all users; one more is "
        "answered resource_exhausted and closed"))
    p.add_argument("--max-connections-per-user", type=int, default=S, metavar="N", help=h(
        "max_connections_per_user", "IPC connections of one user (uid) at once, at most "
        "--max-connections"))
    p.add_argument("--ipc-send-timeout-s", type=float, default=S, metavar="S", help=h(
        "ipc_send_timeout_s", "close an IPC connection whose renderer does not take a reply "
        "within this (it does not read its socket)"))
    p.add_argument("--client-shared-memory", action=argparse.BooleanOptionalAction, default=S,
                   help=h("client_shared_memory", "let KServe clients register Triton system "
                          "shared-memory regions (off: those routes answer 501)"))


def _names(text: str) -> list[str]:
    """A comma-separated list; ``none`` is the empty one."""
    return [] if text.strip() == "none" else [t.strip() for t in text.split(",") if t.strip()]


def main(argv: list[str] | None = None) -> int:
    try:
        return _main(argv)
    except BrokenPipeError:
        # The reader went away (`fenceline models list | head`): stop quietly as other tools do.
        # stdout still holds unwritten bytes, and Python's flush at exit would fail again.
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 141  # 128 + SIGPIPE, what a shell reports for a tool the pipe stopped


def build_parser() -> argparse.ArgumentParser:
    """Every command and flag (the docs' commands are checked against it)."""
    parser = argparse.ArgumentParser(
        prog="fenceline",
        description="A local inference service for renderers: shared frames and timeline "
        "fences into ONNX Runtime, run in place.",
        epilog="Run 'fenceline COMMAND --help' for the flags of a command. Documentation: "
        "README.md and docs/ in the source tree; with the service running, /ui and /docs.",
    )
    parser.add_argument("--version", action="version", version=f"fenceline {__version__}")
    sub = parser.add_subparsers(dest="command", required=True, title="commands",
                                metavar="COMMAND")

    serve = sub.add_parser("serve", help="run the service")
    _serve_args(serve)

    models = sub.add_parser("models", help="the builtin models")
    models_sub = models.add_subparsers(dest="models_command", required=True)
    models_sub.add_parser("list", help="their names, inputs and outputs")
    write = models_sub.add_parser(
        "write", help="write them as a model repository (DIR/<name>/1/model.onnx, Triton's layout)"
    )
    write.add_argument("dir", type=Path, metavar="DIR")
    write.add_argument("names", nargs="*", metavar="NAME", help="only these (default: all)")

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
    bench.add_argument("--scaling", metavar="N,N,...",
                       help="combined frames/s of N renderers through IPC against the in-process "
                       "floor with N threads, for each N (e.g. 1,4,8,16); --sizes picks the "
                       "frame (default 720p), --seconds each point's time")
    bench.add_argument("--control-plane", action="store_true", help=(
        "one renderer's latency quiet and beside an 80-client reload flood, 256 KiB and 5 MB "
        "configs loading and full-size traces (--seconds: each phase, default 5); "
        "docs/reliability.md"))
    bench.add_argument("--flood", type=int, metavar="N",
                       help="one renderer's p50/p99 quiet, beside a CPU burner and during N "
                       "connection attempts from one user past its limit (e.g. 5000); --seconds "
                       "each quiet phase's length (default 2)")
    bench.add_argument("--churn", type=int, metavar="N",
                       help="the same as --flood, with N connections below the limit, each "
                       "connecting, saying HELLO, reading the answer and closing (e.g. 5000)")
    bench.add_argument("--intra-op-threads", type=int, metavar="N",
                       help="with --scaling, --gst or --obs: onnxruntime's intra-op threads per run "
                       "on both sides (default: the model's, a pool sized to the machine)")
    bench.add_argument("--cpus", type=int, metavar="N",
                       help="run everything (service, renderers, floors) on the first N CPUs "
                       "this process may use: a small machine's shape on a large one")
    bench.add_argument("--gpu", action="store_true",
                       help="GPU zero-copy: Vulkan renderer -> CUDA session (docs/gpu.md)")
    bench.add_argument("--gst", action="store_true",
                       help="fps through the GStreamer element beside appsink -> onnxruntime "
                            "(docs/gstreamer.md)")
    bench.add_argument("--obs", action="store_true",
                       help="OBS's fps and video-thread time per frame with the fenceline filter "
                            "beside onnxruntime inside filter_video (docs/obs.md)")
    bench.add_argument("--rounds", type=int,
                       help="--gst: rounds per side and size, taking turns (default 4; --quick 1); "
                            "--obs: rounds per side and model (default 2; --quick 1)")
    bench.add_argument("--frames", type=int,
                       help="--gst: frames per round (default 150, 20 of them warmup; --quick 60, 10)")

    tr = sub.add_parser("trace", help="record a running service's per-frame trace as Chrome "
                        "trace-event JSON (Perfetto, chrome://tracing; docs/tracing.md)")
    tr.add_argument("--url", default="http://127.0.0.1:8000",
                    help="the service's HTTP address (default %(default)s)")
    tr.add_argument("--seconds", type=float, default=2.0,
                    help="longest recording, at most 60 (default %(default)s)")
    tr.add_argument("--frames", type=int, default=10_000,
                    help="stop after this many frames, at most the service's --trace-max-frames "
                    "(default %(default)s)")
    tr.add_argument("--out", type=Path, default=Path("fenceline-trace.json"),
                    help="where the JSON goes (default %(default)s)")
    tr.add_argument("--png", type=Path,
                    help="also draw a few frames of it as a PNG timeline here")
    tr.add_argument("--token-file", type=Path, help="the service's --token-file, when it has one")
    tr.add_argument("--socket", type=Path, help="the service's IPC socket, beside which it keeps "
                    "the control token that `fenceline trace` reads when no --token-file is "
                    "given (default: the default socket, $FENCELINE_SOCKET)")

    sub.add_parser("doctor", help="what this install has and lacks (the C client, the GStreamer "
                   "element, the OBS plugin, CUDA, Vulkan, onnxruntime's providers, the bench's "
                   "peers), the command for each missing part, and whether a service answers")

    soak = sub.add_parser("soak", help="renderers at full rate with random kills (loopback only)")
    soak.add_argument("--renderers", type=int, default=4)
    soak.add_argument("--seconds", type=float, default=60.0)
    soak.add_argument("--kill-every", type=float, default=5.0, help="mean seconds between kills")
    soak.add_argument(
        "--hostile", type=int, default=0, metavar="N",
        help="also run N hostile renderers at a time: shrinking memory and fences, malformed "
        "frames with fds, dying while the service waits or before it replies, or after "
        "queueing their own socket end in the service, and the control plane's attackers; "
        "one round of each belongs to the warm-up (docs/reliability.md)",
    )
    soak.add_argument("--warmup", type=float, default=10.0,
                      help="seconds of the renderers at full rate before the RSS is taken")
    soak.add_argument("--json", type=Path, help="also write the report as JSON here")

    return parser


def _end_on_sigterm() -> None:
    """SIGTERM ends this command as Ctrl-C does, so that the service it started and its
    temporary files go with it (the default action would end this process alone and leave its
    service running). A process forked from this one keeps the default action."""
    main = os.getpid()

    def interrupt(signum: int, _frame: object) -> None:
        if os.getpid() != main:
            signal.signal(signum, signal.SIG_DFL)
            os.kill(os.getpid(), signum)
            return
        raise KeyboardInterrupt

    signal.signal(signal.SIGTERM, interrupt)


def _main(argv: list[str] | None) -> int:
    args = build_parser().parse_args(argv)
    if args.command in ("demo", "soak", "bench"):  # each starts a service of its own
        _end_on_sigterm()
    try:
        if args.command == "serve":
            from fenceline.cli.serve import serve_from_args

            return serve_from_args(args)
        if args.command == "models":
            from fenceline.cli.models import models_from_args

            return models_from_args(args)
        if args.command == "demo":
            from fenceline.cli.demo import demo as run_demo

            return run_demo(args.frames, args.out)
        if args.command == "trace":
            from fenceline.cli.trace import trace_from_args

            return trace_from_args(args)
        if args.command == "doctor":
            from fenceline.cli.doctor import doctor

            return doctor()
        if args.command == "soak":
            from fenceline.cli.soak import soak_from_args

            return soak_from_args(args)
        if sys.platform == "win32":
            raise Unsupported(
                "fenceline bench runs on Linux only: it reads CPU time from /proc and getrusage "
                "and runs its lanes in forkserver processes, none of which Windows has; "
                "`fenceline demo` runs here (docs/windows.md)"
            )
        if args.cpus is not None:
            from fenceline.bench.report import confine

            print(f"fenceline bench: confined to CPUs {confine(args.cpus)}", flush=True)
        if args.intra_op_threads is not None and not (args.scaling or args.gst or args.obs):
            raise InvalidArgument("--intra-op-threads goes with --scaling, --gst or --obs")
        if args.control_plane:
            from fenceline.bench.control_plane import run_control_plane

            return run_control_plane(seconds=args.seconds or 5.0, json_path=args.json)
        if args.flood is not None or args.churn is not None:
            from fenceline.bench.flood import run_flood

            if args.flood is not None and args.churn is not None:
                raise InvalidArgument("--flood and --churn are two runs: give one")
            churn = args.churn is not None
            return run_flood(args.churn if churn else args.flood, seconds=args.seconds or 2.0,
                             json_path=args.json, churn=churn)
        if args.scaling:
            from fenceline.bench.scaling import DEFAULT_SIZE, parse_counts, run_scaling

            sizes = args.sizes or [DEFAULT_SIZE]
            if len(sizes) != 1:
                raise InvalidArgument("--scaling measures one frame size: give one --sizes")
            return run_scaling(parse_counts(args.scaling), size=sizes[0],
                               seconds=args.seconds or 10.0, json_path=args.json,
                               plot_path=args.plot, intra_op_threads=args.intra_op_threads)
        if args.obs:
            from fenceline.bench.obs_fps import run_obs_bench

            return run_obs_bench(quick=args.quick, json_path=args.json, seconds=args.seconds,
                                 rounds=args.rounds, intra_op_threads=args.intra_op_threads)
        if args.gst:
            from fenceline.bench.gst_fps import run_gst_bench

            return run_gst_bench(quick=args.quick, json_path=args.json, sizes=args.sizes,
                                 rounds=args.rounds, frames=args.frames,
                                 intra_op_threads=args.intra_op_threads)
        if args.gpu:
            from fenceline.bench.gpu import run_gpu_bench

            return run_gpu_bench(quick=args.quick, json_path=args.json, peers=args.peers)
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
