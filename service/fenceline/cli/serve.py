"""``fenceline serve``: the HTTP app and the IPC socket over one runtime."""

from __future__ import annotations

import argparse
import logging
import sys
from types import FrameType

import uvicorn

from fenceline import logs
from fenceline.api import create_app
from fenceline.api.http_protocol import deadline_protocol
from fenceline.config import ServeSettings, parse_model_arg
from fenceline.ipc.pipe_server import PipeServer
from fenceline.ipc.server import IpcServer
from fenceline.metrics import Metrics
from fenceline.runtime.models import ModelRepository
from fenceline.runtime.service import Runtime, RuntimeSettings
from fenceline.triton.regions import InferenceSettings
from fenceline.waiting import set_spinners

log = logging.getLogger("fenceline")


def serve_from_args(args: argparse.Namespace) -> int:
    settings = ServeSettings(
        host=args.host,
        port=args.port,
        socket=args.socket,
        model_repository=args.model_repository,
        models=dict(parse_model_arg(m) for m in args.model),
        ipc_spin_us=args.ipc_spin_us,
        fence_spin_us=args.fence_spin_us,
        max_spinners=args.max_spinners,
        log_level=args.log_level,
        log_format=args.log_format,
        allow_uids=frozenset(args.allow_uid) if args.allow_uid else None,
        token_file=args.token_file,
        max_body_mb=args.max_body_mb,
        max_json_mb=args.max_json_mb,
        http_header_timeout_s=args.http_header_timeout_s,
        http_body_idle_s=args.http_body_idle_s,
        max_sessions=args.max_sessions,
        max_imports=args.max_imports,
        max_mapped_mb=args.max_mapped_mb,
        max_inflight=args.max_inflight,
        max_sessions_per_device=args.max_sessions_per_device,
        client_shared_memory=args.client_shared_memory,
    )
    return serve(settings)


class _Server(uvicorn.Server):
    """Fails runs that wait on fences as soon as a stop signal arrives, so a graceful shutdown
    does not sit out their timeouts."""

    def __init__(self, config: uvicorn.Config, runtime: Runtime) -> None:
        super().__init__(config)
        self.runtime = runtime

    def handle_exit(self, sig: int, frame: FrameType | None) -> None:
        self.runtime.closing.set()
        super().handle_exit(sig, frame)
        # uvicorn re-raises a captured signal once it has stopped, which would kill the process
        # before our own ordered shutdown (IPC connections, mappings) runs. We exit 0 instead.
        captured = getattr(self, "_captured_signals", None)
        if isinstance(captured, list):
            captured.clear()


def serve(settings: ServeSettings) -> int:
    logs.configure(settings.log_level, settings.log_format)
    spinners = set_spinners(settings.max_spinners)
    models = ModelRepository.from_sources(settings.model_repository, settings.models)
    runtime = Runtime(
        models,
        Metrics(),
        RuntimeSettings(
            spin_ns=settings.fence_spin_us * 1000,
            max_sessions_per_owner=settings.max_sessions,
            max_imports_per_owner=settings.max_imports,
            max_mapped_bytes_per_owner=settings.max_mapped_mb << 20,
            max_inflight_runs_per_owner=settings.max_inflight,
            max_sessions_per_device=settings.max_sessions_per_device,
            allow_uids=settings.allow_uids or frozenset(),
        ),
    )
    ipc: IpcServer | PipeServer
    if sys.platform == "win32":
        # Windows: the per-user named pipe; --socket, when given, is the pipe's name.
        ipc = PipeServer(
            runtime, str(settings.socket) if settings.socket else None,
            spin_ns=settings.ipc_spin_us * 1000,
        )
    else:
        ipc = IpcServer(
            runtime, settings.socket, spin_ns=settings.ipc_spin_us * 1000,
            allow_uids=settings.allow_uids,
        )
    ipc.start()
    app = create_app(
        runtime,
        InferenceSettings(
            client_shared_memory=settings.client_shared_memory,
            max_request_bytes=settings.max_body_mb << 20,
            max_json_bytes=settings.max_json_mb << 20,
        ),
        token=settings.token(),
        max_body_bytes=settings.max_body_mb << 20,
        max_json_bytes=settings.max_json_mb << 20,
        ready_checks=[ipc.accepting],
    )
    config = uvicorn.Config(
        app, host=settings.host, port=settings.port, log_level=settings.log_level,
        http=deadline_protocol(settings.http_header_timeout_s, settings.http_body_idle_s),
        access_log=False, lifespan="off", timeout_graceful_shutdown=5,
        log_config=None,  # logs.configure set up logging, uvicorn's loggers included
    )
    server = _Server(config, runtime)
    log.info(
        "fenceline serving %d model(s) on http://%s:%d and %s (at most %d spinning waiters)",
        len(models.names()), settings.host, settings.port, ipc.path, spinners.slots,
    )
    try:
        server.run()
    finally:
        # Order: no new work, fail waiting runs, close connections (each releases its objects),
        # release what HTTP clients left, unmap.
        runtime.closing.set()
        ipc.stop()
        runtime.close()
        log.info("fenceline stopped")
    return 0
