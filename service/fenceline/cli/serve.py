"""``fenceline serve``: the HTTP app and the IPC socket over one runtime."""

from __future__ import annotations

import argparse
import errno
import logging
import os
import socket
import sys
from pathlib import Path
from types import FrameType

import uvicorn

from fenceline import logs
from fenceline.api import create_app
from fenceline.api.http_protocol import deadline_protocol
from fenceline.api.trace import TraceRights
from fenceline.config import ServeSettings, parse_model_arg
from fenceline.errors import InvalidArgument
from fenceline.ipc import control_token
from fenceline.ipc.access import check_socket_path
from fenceline.ipc.limits import import_bound, raise_fd_limit
from fenceline.ipc.pipe_server import PipeServer
from fenceline.ipc.server import IpcServer, default_socket_path
from fenceline.metrics import Metrics
from fenceline.models.builtin import builtin_repository
from fenceline.runtime import heap
from fenceline.runtime.model_control import ModelControl
from fenceline.runtime.models import ModelRepository
from fenceline.runtime.service import Runtime
from fenceline.runtime.table import RuntimeSettings
from fenceline.triton.regions import InferenceSettings
from fenceline.waiting import set_spinners

log = logging.getLogger("fenceline")


def serve_from_args(args: argparse.Namespace) -> int:
    """Flags given on the command line; the rest come from ``FENCELINE_*`` or the defaults."""
    given = {k: v for k, v in vars(args).items() if k != "command"}
    if "model" in given:
        given["models"] = dict(parse_model_arg(m) for m in given.pop("model"))
    if "allow_uid" in given:
        given["allow_uids"] = frozenset(given.pop("allow_uid"))
    return serve(ServeSettings(**given))


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


def bind_http(host: str, port: int) -> socket.socket:
    """The HTTP listening socket, bound before anything else goes live, so a taken port is one
    clear error and not a half-started service."""
    try:
        infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE)
    except socket.gaierror as e:
        raise InvalidArgument(f"--host {host}: not an address of this machine ({e.strerror})") from None
    family, kind, proto, _, addr = infos[0]
    sock = socket.socket(family, kind, proto)
    try:
        if sys.platform == "win32":
            # SO_REUSEADDR on Windows lets another process bind the same port and take its
            # connections; SO_EXCLUSIVEADDRUSE is the idiom that forbids it. (Windows has no
            # TIME_WAIT problem for a listening socket to work around.)
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_EXCLUSIVEADDRUSE, 1)
        else:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        if family == socket.AF_INET6:
            sock.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 0)
        sock.bind(addr)
        sock.set_inheritable(True)
    except OSError as e:
        sock.close()
        raise _bind_error(host, port, e) from None
    return sock


def _bind_error(host: str, port: int, e: OSError) -> InvalidArgument:
    where = f"{host}:{port}"
    in_use = InvalidArgument(
        f"port {where} is already in use (another fenceline?); choose another with --port or "
        "FENCELINE_PORT"
    )
    if e.errno == errno.EADDRINUSE:
        return in_use
    if e.errno == errno.EACCES:
        if sys.platform == "win32":
            # Windows has no privileged ports. WSAEACCES means another socket holds the port
            # exclusively (SO_EXCLUSIVEADDRUSE), or Windows reserves it (an excluded port range)
            # or a policy forbids it: a listener on the port tells the first from the others.
            if _someone_listens(host, port):
                return in_use
            return InvalidArgument(
                f"Windows denies listening on {where} and nothing listens there: the port is "
                "reserved (see `netsh interface ipv4 show excludedportrange protocol=tcp`) or a "
                "security policy forbids it; choose another with --port or FENCELINE_PORT"
            )
        if port < 1024:
            return InvalidArgument(
                f"no permission to listen on {where}: ports below 1024 need privileges; use "
                "--port 1024 or above"
            )
        return InvalidArgument(f"no permission to listen on {where}: {e.strerror}")
    if e.errno == errno.EADDRNOTAVAIL:
        return InvalidArgument(f"--host {host} is not an address of this machine")
    return InvalidArgument(f"cannot listen on {where}: {e.strerror}")


def _someone_listens(host: str, port: int) -> bool:
    """Whether a TCP connection to the port is accepted (a wildcard host is asked on loopback)."""
    target = {"0.0.0.0": "127.0.0.1", "::": "::1", "": "127.0.0.1"}.get(host, host)
    try:
        with socket.create_connection((target, port), timeout=2):
            return True
    except OSError:
        return False


def serve(settings: ServeSettings) -> int:
    logs.configure(settings.log_level, settings.log_format)
    http_sock = bind_http(settings.host, settings.port)
    try:
        return _serve(settings, http_sock)
    finally:
        http_sock.close()


def _serve(settings: ServeSettings, http_sock: socket.socket) -> int:
    if sys.platform != "win32":
        # Before the models load (seconds for a large repository), so a bad --socket is said
        # at once; the server checks again when it listens.
        others = (settings.allow_uids or frozenset()) - {os.geteuid()}
        check_socket_path(settings.socket or default_socket_path(), others)
    before, now = raise_fd_limit()
    heap.fix_thresholds()  # freed buffers go back to the system (runtime/heap.py)
    if now != before:
        log.info("open fds: soft limit raised from %d to %d", before, now)
    spinners = set_spinners(settings.max_spinners)
    if settings.builtin_models:
        log.info("no --model-repository or --model: serving the builtin models")
    models = ModelRepository.from_sources(
        builtin_repository() if settings.builtin_models else settings.model_repository,
        settings.models, mode=settings.model_control_mode, load=settings.load_models,
    )
    runtime = Runtime(
        models,
        Metrics(),
        RuntimeSettings(
            spin_ns=settings.fence_spin_us * 1000,
            max_sessions_per_owner=settings.max_sessions,
            max_imports_per_owner=settings.max_imports,
            max_imports_per_user=settings.max_imports_per_user,
            max_imports=(import_bound(now, settings.max_connections)
                         or RuntimeSettings.max_imports),
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
        ipc.limits = settings.connection_limits()
    else:
        ipc = IpcServer(
            runtime, settings.socket, spin_ns=settings.ipc_spin_us * 1000,
            allow_uids=settings.allow_uids, limits=settings.connection_limits(),
        )
    ipc.start()
    token = settings.token()
    control_path = None if sys.platform == "win32" else control_token.token_path(Path(ipc.path))
    control = control_token.write_token(control_path) if control_path is not None else None
    model_control = ModelControl(runtime, settings.repository_poll_secs)
    if settings.model_control_mode == "poll":
        model_control.start_polling()
    app = create_app(
        runtime,
        InferenceSettings(
            client_shared_memory=settings.client_shared_memory,
            max_request_bytes=settings.max_body_mb << 20,
            max_json_bytes=settings.max_json_mb << 20,
        ),
        token=token,
        max_body_bytes=settings.max_body_mb << 20,
        max_json_bytes=settings.max_json_mb << 20,
        ready_checks=[ipc.unready, runtime.saturated],
        model_control=model_control,
        trace_rights=TraceRights(open=bool(token) or settings.http_trace, control_token=control,
                                 token_path=control_path, max_frames=settings.trace_max_frames),
    )
    config = uvicorn.Config(
        app, host=settings.host, port=settings.port, log_level=settings.log_level,
        http=deadline_protocol(settings.http_header_timeout_s, settings.http_body_idle_s),
        access_log=False, lifespan="off", timeout_graceful_shutdown=5,
        log_config=None,  # logs.configure set up logging, uvicorn's loggers included
    )
    server = _Server(config, runtime)
    port = http_sock.getsockname()[1]
    log.info(
        "fenceline serving %d model(s) on http://%s:%d and %s (at most %d spinning waiters)",
        len(models.names()), settings.host, port, ipc.path, spinners.slots,
    )
    try:
        server.run(sockets=[http_sock])
    finally:
        # Order: no new work, fail waiting runs, close connections (each releases its objects),
        # release what HTTP clients left, unmap.
        runtime.closing.set()
        model_control.close()
        ipc.stop()
        runtime.close()
        if control is not None and control_path is not None:
            control_token.remove_token(control_path, control)
        # With what the native runners did, whole: the metrics end with the HTTP server.
        log.info("fenceline stopped", extra={"native_runs": runtime.metrics.native_runs()})
    return 0
