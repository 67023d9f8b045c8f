"""``fenceline serve``: the HTTP app and the IPC socket over one runtime."""

from __future__ import annotations

import argparse
import logging

import uvicorn

from fenceline.api import create_app
from fenceline.config import ServeSettings, parse_model_arg
from fenceline.ipc.server import IpcServer
from fenceline.metrics import Metrics
from fenceline.runtime.models import ModelRepository
from fenceline.runtime.service import Runtime, RuntimeSettings
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
    )
    return serve(settings)


def serve(settings: ServeSettings) -> int:
    logging.basicConfig(
        level=settings.log_level.upper(), format="%(asctime)s %(levelname)s %(name)s: %(message)s"
    )
    spinners = set_spinners(settings.max_spinners)
    models = ModelRepository.from_sources(settings.model_repository, settings.models)
    runtime = Runtime(models, Metrics(), RuntimeSettings(spin_ns=settings.fence_spin_us * 1000))
    ipc = IpcServer(runtime, settings.socket, spin_ns=settings.ipc_spin_us * 1000)
    ipc.start()
    app = create_app(runtime)
    config = uvicorn.Config(
        app, host=settings.host, port=settings.port, log_level=settings.log_level,
        access_log=False, lifespan="off",
    )
    server = uvicorn.Server(config)
    log.info(
        "fenceline serving %d model(s) on http://%s:%d and %s (at most %d spinning waiters)",
        len(models.names()), settings.host, settings.port, ipc.path, spinners.slots,
    )
    try:
        server.run()
    finally:
        ipc.stop()
        runtime.close()
        log.info("fenceline stopped")
    return 0
