"""``fenceline doctor``: one screen saying what this install has and lacks, with the command
that brings each missing part, and whether a service answers on the socket and port in use.

Every check only looks (imports, files, one HELLO and one HTTP GET on loopback with a short
timeout); none starts anything, and the exit status is 0 whatever is missing, so a script can
print it beside a bug report.
"""

from __future__ import annotations

import platform
import shutil
import socket
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import fenceline
from fenceline import __version__, _native
from fenceline.client import c_api
from fenceline.client.errors import ClientError
from fenceline.errors import FencelineError

PROBE_TIMEOUT_S = 1.0
# The Vulkan loader the `vulkan` package opens (Debian's package of it).
VULKAN_PACKAGES = "libvulkan1"


@dataclass(frozen=True)
class Finding:
    """One line of the report: ``have`` says whether the part is here, ``what`` names it and
    where it is (or why it is not), ``fix`` is the command that brings it ("" when none is
    needed)."""

    have: bool
    what: str
    fix: str = ""
    command: bool = True  # ``fix`` is a command to run (else what the machine needs)


def _part(part: c_api.Part, locate: Callable[[], Path], use: str) -> Finding:
    try:
        where = locate()
    except ClientError:
        return Finding(False, f"{part.name}: not built with this install", part.remedy)
    return Finding(True, f"{part.name}: {where}", use.format(where=where))


def _program(name: str, what: str, packages: str) -> Finding:
    path = shutil.which(name)
    if path:
        return Finding(True, f"{what}: {path}")
    return Finding(False, f"{what}: {name} is not on PATH", c_api.apt_install(packages))


def native_parts() -> list[Finding]:
    """The parts CMake builds into the package at install time (docs/install.md)."""
    cc = c_api.find_c_compiler()
    return [
        Finding(True, f"the native importer fenceline._native ({_native.PLATFORM})"),
        _part(c_api.C_CLIENT, c_api.c_library_dir,
              "python -m fenceline.client.c_api --cflags --libs"),
        Finding(True, f"a C compiler for renderers in C: {cc}") if cc else
        Finding(False, "a C compiler for renderers in C: none ($CC, cc, gcc, clang)",
                c_api.apt_install("gcc")),
        _part(c_api.GST_ELEMENT, c_api.gst_plugin_dir, "export GST_PLUGIN_PATH={where}"),
        _program("gst-launch-1.0", "GStreamer's tools, to run a pipeline", "gstreamer1.0-tools"),
        _part(c_api.OBS_PLUGIN, c_api.obs_plugin_dir, "docs/obs.md puts it where OBS looks"),
    ]


def gpu_parts() -> list[Finding]:
    """CUDA (the driver, loaded at run time), Vulkan for a renderer in Python, and
    onnxruntime's execution providers."""
    out = []
    if _native.cuda_available():
        names = ", ".join(str(d["name"]) for d in _native.cuda_devices()) or "no device"
        out.append(Finding(True, f"CUDA: {names}"))
    else:
        out.append(Finding(False, f"CUDA: {_native.cuda_unavailable_reason()}",
                           "an NVIDIA GPU and its driver (libcuda.so.1); fenceline needs "
                           "nothing more built", command=False))
    from fenceline.client import vulkan

    ok, why = vulkan.available()
    out.append(Finding(True, "Vulkan for a renderer in Python (the vulkan package)") if ok else
               Finding(False, f"Vulkan for a renderer in Python: {why}",
                       f"pip install '.[gpu]' (in fenceline's source tree); "
                       f"{c_api.apt_install(VULKAN_PACKAGES)}"))
    try:
        import onnxruntime as ort
    except ImportError as e:
        out.append(Finding(False, f"onnxruntime: {e}", "pip install onnxruntime"))
        return out
    providers = ort.get_available_providers()
    out.append(Finding(True, f"onnxruntime {ort.__version__}: {', '.join(providers)}"))
    if "CUDAExecutionProvider" not in providers:
        out.append(Finding(False, "onnxruntime's CUDA provider, for models with "
                           '"execution_provider": "cuda"',
                           "pip uninstall -y onnxruntime && pip install onnxruntime-gpu"))
    return out


def bench_parts() -> list[Finding]:
    """What `fenceline bench` needs beyond the install for its KServe and Triton rows."""
    out = []
    for module, what in (("tritonclient.http", "tritonclient, for the bench's KServe and Triton "
                          "rows"), ("pytriton", "nvidia-pytriton, for the Triton peer of "
                                    "`fenceline bench --peers`")):
        try:
            __import__(module)
        except ImportError:
            out.append(Finding(False, f"{what}: not installed",
                               "pip install '.[bench]' (in fenceline's source tree)"))
        else:
            out.append(Finding(True, what))
    return out


def _ipc_answer(path: Path) -> str:
    """What answers a HELLO on the socket at ``path``: the service's version, or why none."""
    from fenceline.protocol import codec

    if not path.exists():
        return "no socket there"
    try:
        with socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET) as s:
            s.settimeout(PROBE_TIMEOUT_S)
            s.connect(str(path))
            s.send(codec.encode_json(codec.Kind.HELLO, 1, {"client": "fenceline doctor"}))
            reply = codec.decode(s.recv(codec.MAX_FRAME))
            hello = codec.decode_json(reply.body)
    except (OSError, FencelineError, ValueError) as e:
        return f"nothing answers ({e})"
    if reply.kind == codec.Kind.ERROR:
        return f"a service refused the HELLO: {hello.get('message', hello)}"
    return f"fenceline {hello.get('version', '?')} answers (protocol {hello.get('protocol', '?')})"


def _http_answer(host: str, port: int) -> str:
    import httpx

    probe = "127.0.0.1" if host in ("0.0.0.0", "") else ("::1" if host == "::" else host)
    url = f"http://{probe}:{port}/v2" if ":" not in probe else f"http://[{probe}]:{port}/v2"
    try:
        r = httpx.get(url, timeout=PROBE_TIMEOUT_S)
    except httpx.HTTPError as e:
        return f"nothing answers ({type(e).__name__})"
    if r.status_code == 401:
        return "a service answers and asks for a token (--token-file)"
    try:
        body = r.json()
    except ValueError:
        body = {}
    if r.status_code == 200 and isinstance(body, dict) and body.get("name") == "fenceline":
        return f"fenceline {body.get('version', '?')} answers"
    return f"something that is not fenceline answers (HTTP {r.status_code})"


def service_parts() -> list[Finding]:
    """The socket and the HTTP address a `fenceline serve` started here would use (flags aside:
    the FENCELINE_* variables, else the defaults), and whether a service answers there."""
    from fenceline.config import ServeSettings

    try:
        settings = ServeSettings()
        host, port, sock = settings.host, settings.port, settings.socket
    except (FencelineError, ValueError) as e:
        why = e.message if isinstance(e, FencelineError) else str(e).splitlines()[0]
        return [Finding(False, f"the FENCELINE_* settings: {why}",
                        "mend or unset the variable it names")]
    out = []
    if _native.PLATFORM == "win32":
        from fenceline.ipc.pipe_server import default_pipe_name

        out.append(Finding(True, f"the IPC pipe: {sock or default_pipe_name()}"))
    else:
        from fenceline.ipc.server import default_socket_path

        path = sock or default_socket_path()
        answer = _ipc_answer(path)
        out.append(Finding(answer.startswith("fenceline "), f"the IPC socket {path}: {answer}",
                           "" if answer.startswith("fenceline ") else "fenceline serve"))
    answer = _http_answer(host, port)
    up = answer.startswith(("fenceline ", "a service answers"))
    out.append(Finding(up, f"HTTP on {host}:{port}: {answer}",
                       "" if up else f"fenceline serve --port {port}"))
    return out


def report() -> list[tuple[str, list[Finding]]]:
    return [
        ("built into this install", native_parts()),
        ("GPU and onnxruntime", gpu_parts()),
        ("fenceline bench", bench_parts()),
        ("the service", service_parts()),
    ]


def render(sections: list[tuple[str, list[Finding]]]) -> str:
    where = Path(next(iter(fenceline.__path__)))
    lines = [f"fenceline {__version__} (Python {platform.python_version()}, {where})"]
    for title, findings in sections:
        lines.append(f"{title}:")
        for f in findings:
            lines.append(f"  {'have' if f.have else 'lack'}  {f.what}")
            if f.fix:
                label = "use" if f.have else ("run" if f.command else "needs")
                lines.append(f"        {label}: {f.fix}")
    return "\n".join(lines)


def doctor() -> int:
    print(render(report()))
    sys.stdout.flush()
    return 0

