"""``fenceline serve``: the HTTP app and the IPC socket over one runtime."""

from __future__ import annotations

import argparse
import logging
import signal
import threading

import uvicorn

from fenceline import logs
from fenceline.api import create_app
from fenceline.config import ServeSettings, parse_model_arg
from fenceline.ipc.server import IpcServer
from fenceline.metrics import Metrics
from fenceline.runtime.models import ModelRepository
from fenceline.runtime.service import Runtime, RuntimeSettings

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
        log_level=args.log_level,
        log_format=args.log_format,
    )
    return serve(settings)


def serve(settings: ServeSettings) -> int:
    logs.configure(settings.log_level, settings.log_format)
    models = ModelRepository.from_sources(settings.model_repository, settings.models)
    runtime = Runtime(models, Metrics(), RuntimeSettings(spin_ns=settings.fence_spin_us * 1000))
    ipc = IpcServer(runtime, settings.socket, spin_ns=settings.ipc_spin_us * 1000)
    ipc.start()
    app = create_app(runtime)
    config = uvicorn.Config(
        app, host=settings.host, port=settings.port, log_level=settings.log_level,
        access_log=False, lifespan="off", log_config=None,  # logs.configure set up logging
    )
    server = uvicorn.Server(config)
    log.info(
        "fenceline serving %d model(s) on http://%s:%d and %s",
        len(models.names()), settings.host, settings.port, ipc.path,
    )
    if threading.current_thread() is threading.main_thread():
        # uvicorn shuts down gracefully on SIGTERM, restores the handler it found and raises the
        # signal again: with the default handler the process would die before the cleanup below.
        signal.signal(signal.SIGTERM, _stop)
    try:
        server.run()
    except _Stopped:
        pass
    finally:
        if threading.current_thread() is threading.main_thread():
            signal.signal(signal.SIGTERM, signal.SIG_DFL)  # a second SIGTERM ends the cleanup
        ipc.stop()
        runtime.close()
        log.info("fenceline stopped")
    return 0


class _Stopped(Exception):
    """SIGTERM: a clean stop (systemd, Docker and Kubernetes stop services with it)."""


def _stop(signum: int, frame: object) -> None:
    raise _Stopped
