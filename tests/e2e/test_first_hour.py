"""A new user's first commands, as real processes: ``fenceline serve`` with no options serves
the builtin models, the README's Python example runs against it, FENCELINE_* variables are
honoured, and every socket or port mistake is one clear line with exit status 2."""

from __future__ import annotations

import os
import re
import shutil
import socket
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from tests.support.service import free_port, wait_ready

ROOT = Path(__file__).resolve().parents[2]
FENCELINE = [sys.executable, "-m", "fenceline"]


def clean_env(tmp: Path, **extra: str) -> dict[str, str]:
    """The test's environment without anyone's FENCELINE_* settings, with a private runtime dir
    and model cache."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("FENCELINE_")}
    run_dir = tmp / "run"
    run_dir.mkdir(mode=0o700, exist_ok=True)
    env.update(XDG_RUNTIME_DIR=str(run_dir), FENCELINE_CACHE=str(tmp.parent / "cache"),
               PYTHONUNBUFFERED="1")
    env.update(extra)
    return env


def cli(env: dict[str, str], *args: str, timeout: float = 120) -> subprocess.CompletedProcess[str]:
    return subprocess.run([*FENCELINE, *args], env=env, capture_output=True, text=True,
                          timeout=timeout, stdin=subprocess.DEVNULL)


def stop(proc: subprocess.Popen[str]) -> str:
    proc.terminate()
    try:
        out, _ = proc.communicate(timeout=20)
    except subprocess.TimeoutExpired:
        proc.kill()
        out, _ = proc.communicate()
    return out


@pytest.fixture(scope="module")
def bare_service(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[dict[str, str], str]]:
    """``fenceline serve`` with no options at all (only the port: 8000 may be taken here), as the
    README starts it; the socket at its default path under $XDG_RUNTIME_DIR."""
    tmp = tmp_path_factory.mktemp("bare")
    port = free_port()
    env = clean_env(tmp, FENCELINE_PORT=str(port))
    proc = subprocess.Popen([*FENCELINE, "serve"], env=env, stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True, stdin=subprocess.DEVNULL)
    url = f"http://127.0.0.1:{port}"
    try:
        wait_ready(proc, url, Path(env["XDG_RUNTIME_DIR"]) / "fenceline" / "fenceline.sock", 90)
        yield env, url
    finally:
        log = stop(proc)
    assert proc.returncode == 0, log
    assert "Traceback" not in log, log
    # A first start is quiet: no model the service ships makes onnxruntime warn.
    assert "W:onnxruntime" not in log, log


def python_blocks(markdown: Path) -> list[str]:
    return re.findall(r"```python\n(.*?)```", markdown.read_text(), re.S)


def test_serve_without_model_options_serves_the_builtin_models(
    bare_service: tuple[dict[str, str], str],
) -> None:
    _, url = bare_service
    names = {m["name"] for m in httpx.get(url + "/v2/interop/status").json()["models"]}
    assert {"image_filter", "add_64x64", "add_720p", "add_dynamic"} <= names


def test_readme_python_example_runs_verbatim_against_bare_serve(
    bare_service: tuple[dict[str, str], str], tmp_path: Path,
) -> None:
    env, url = bare_service
    [example] = python_blocks(ROOT / "README.md")
    script = tmp_path / "example.py"
    script.write_text(example)
    r = subprocess.run([sys.executable, str(script)], env=env, capture_output=True, text=True,
                       timeout=300, cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    # The line the README says it prints: the filter's 2v / (2v + 1) of v = 0.99, read back
    # from the renderer's memory.
    assert re.fullmatch(r"frame 99: display 0\.6644, inference \d+ us\n", r.stdout), r.stdout


def test_fenceline_socket_is_honoured_by_service_and_python_client(tmp_path: Path) -> None:
    from fenceline.client import IpcClient

    sock = tmp_path / "elsewhere" / "fl.sock"
    port = free_port()
    env = clean_env(tmp_path, FENCELINE_SOCKET=str(sock), FENCELINE_PORT=str(port),
                    FENCELINE_LOG_FORMAT="json")
    proc = subprocess.Popen([*FENCELINE, "serve", "--model", "m=" + str(write_model(env, tmp_path))],
                            env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        wait_ready(proc, f"http://127.0.0.1:{port}", sock, 90)
        old = os.environ.get("FENCELINE_SOCKET")
        os.environ["FENCELINE_SOCKET"] = str(sock)
        try:
            with IpcClient() as client:
                assert client.path == sock
        finally:
            if old is None:
                del os.environ["FENCELINE_SOCKET"]
            else:
                os.environ["FENCELINE_SOCKET"] = old
    finally:
        log = stop(proc)
    assert log.lstrip().startswith("{"), log  # FENCELINE_LOG_FORMAT=json took effect


def write_model(env: dict[str, str], tmp: Path) -> Path:
    repo = tmp / "repo"
    r = cli(env, "models", "write", str(repo), "add_64x64")
    assert r.returncode == 0, r.stderr
    return repo / "add_64x64" / "1" / "model.onnx"


def test_flags_win_over_environment(tmp_path: Path) -> None:
    taken = socket.socket()
    taken.bind(("127.0.0.1", 0))
    taken.listen()
    with taken:
        env = clean_env(tmp_path, FENCELINE_PORT=str(taken.getsockname()[1]))
        port = free_port()
        proc = subprocess.Popen([*FENCELINE, "serve", "--port", str(port), "--model",
                                 "m=" + str(write_model(env, tmp_path))],
                                env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        try:
            wait_ready(proc, f"http://127.0.0.1:{port}",
                       Path(env["XDG_RUNTIME_DIR"]) / "fenceline" / "fenceline.sock", 90)
        finally:
            stop(proc)


def test_models_write_gives_a_repository_serve_accepts(tmp_path: Path) -> None:
    env = clean_env(tmp_path)
    r = cli(env, "models", "write", str(tmp_path / "models"))
    assert r.returncode == 0, r.stderr
    assert (tmp_path / "models" / "image_filter" / "1" / "model.onnx").is_file()
    r = cli(env, "models", "write", str(tmp_path / "x"), "no_such_model")
    assert r.returncode == 2 and "no builtin model named no_such_model" in r.stderr


# argparse drops a failed write of --help itself and exits 0.
@pytest.mark.parametrize(("args", "status"), [(("models", "list"), 141), (("serve", "--help"), 0)])
def test_output_into_a_closed_pipe_stops_without_a_traceback(
    tmp_path: Path, args: tuple[str, ...], status: int
) -> None:
    """`fenceline models list | head -1`: the reader is gone before the first write (its end
    is closed before the process starts), so every write fails."""
    read_end, write_end = os.pipe()
    os.close(read_end)
    try:
        r = subprocess.run([*FENCELINE, *args], env=clean_env(tmp_path), stdout=write_end,
                           stderr=subprocess.PIPE, text=True, timeout=120,
                           stdin=subprocess.DEVNULL)
    finally:
        os.close(write_end)
    assert r.returncode == status, r.stderr
    assert r.stderr == ""


def test_help_shows_defaults_and_variables(tmp_path: Path) -> None:
    r = cli(clean_env(tmp_path), "serve", "--help")
    text = " ".join(r.stdout.split())
    assert "default: 8000; env FENCELINE_PORT" in text
    assert "env FENCELINE_SOCKET" in text and "env FENCELINE_LOG_FORMAT" in text


def test_top_level_help_lists_every_command_in_plain_text(tmp_path: Path) -> None:
    import argparse

    from fenceline.cli import build_parser

    r = cli(clean_env(tmp_path), "--help")
    assert r.returncode == 0, r.stderr
    # argparse keeps its subcommands in a private table; there is no public reader.
    commands = next(a.choices for a in build_parser()._actions
                    if isinstance(a, argparse._SubParsersAction))
    listed = {line.split()[0] for line in r.stdout.splitlines() if line.startswith("    ")}
    assert set(commands) <= listed, r.stdout
    assert "``" not in r.stdout and ":class:" not in r.stdout, r.stdout  # no reStructuredText


def one_clear_line(r: subprocess.CompletedProcess[str], *phrases: str) -> None:
    assert r.returncode == 2, (r.returncode, r.stderr)
    assert "Traceback" not in r.stderr, r.stderr
    lines = [line for line in r.stderr.splitlines() if line.startswith("fenceline:")]
    assert len(lines) == 1, r.stderr
    for p in phrases:
        assert p in lines[0], lines[0]


def test_port_in_use_fails_before_the_socket_goes_live(tmp_path: Path) -> None:
    taken = socket.socket()
    taken.bind(("127.0.0.1", 0))
    taken.listen()
    with taken:
        sock = tmp_path / "fl.sock"
        r = cli(clean_env(tmp_path), "serve", "--port", str(taken.getsockname()[1]),
                "--socket", str(sock))
    one_clear_line(r, "already in use", "--port")
    assert not sock.exists()
    assert "fenceline serving" not in r.stderr


@pytest.mark.parametrize(
    "path, phrase",
    [
        ("/etc/hostname/fl.sock", "not a directory"),
        ("/tmp/" + "a" * 120 + ".sock", "longer than a Unix socket path"),
        ("/proc/fl.sock", "/proc cannot hold a socket"),
    ],
    ids=["under-a-file", "too-long", "a-directory-that-takes-no-socket"],
)
def test_socket_path_mistakes_are_one_line_before_any_model_loads(
    tmp_path: Path, path: str, phrase: str
) -> None:
    # No --model: the builtin models, each logged as "loaded model ..." when it loads.
    r = cli(clean_env(tmp_path), "serve", "--port", "0", "--socket", path)
    one_clear_line(r, phrase)
    assert "loaded model" not in r.stderr, r.stderr


def test_a_socket_another_service_listens_on_is_refused_before_the_model_loads(
    tmp_path: Path,
) -> None:
    env = clean_env(tmp_path)
    model = write_model(env, tmp_path)
    path = tmp_path / "taken.sock"
    with socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET) as other:
        other.bind(str(path))
        other.listen()
        r = cli(env, "serve", "--port", "0", "--model", f"m={model}", "--socket", str(path))
        one_clear_line(r, f"another service is listening on {path}", "--socket")
        assert "loaded model" not in r.stderr, r.stderr
        assert path.exists()  # the other service's socket is left alone


AS_NOBODY = """
import os, sys
import encodings.idna
import fenceline.cli, fenceline.cli.serve, fenceline.ipc.server
os.setgroups([]); os.setgid(65534); os.setuid(65534)
sys.exit(fenceline.cli.main(sys.argv[1:]))
"""


def test_socket_in_unwritable_directory_is_one_line(tmp_path: Path) -> None:
    if os.geteuid() != 0:
        pytest.skip("needs root to run the service as another user")
    env = clean_env(tmp_path)
    base = Path(tempfile.mkdtemp(prefix="fenceline-unwritable-"))
    try:
        os.chmod(base, 0o755)  # nobody may pass through and read, not create
        model = write_model(env, base)
        locked = base / "locked"
        locked.mkdir(mode=0o755)
        env.update(HOME=str(base), FENCELINE_CACHE=str(base / "cache"))
        # The interpreter lives where nobody may not read: import first, then become nobody.
        r = subprocess.run([sys.executable, "-c", AS_NOBODY, "serve", "--port", "0", "--model",
                            f"m={model}", "--socket", str(locked / "fl.sock")],
                           env=env, capture_output=True, text=True, timeout=120, cwd="/")
    finally:
        shutil.rmtree(base)
    one_clear_line(r, "no permission", str(locked))


def test_bad_settings_from_the_environment_name_the_variable(tmp_path: Path) -> None:
    r = cli(clean_env(tmp_path, FENCELINE_PORT="eighty"), "serve")
    one_clear_line(r, "FENCELINE_PORT", "eighty")


def test_demo_out_into_missing_directory_fails_first(tmp_path: Path) -> None:
    r = cli(clean_env(tmp_path), "demo", "--out", str(tmp_path / "missing" / "demo.png"))
    one_clear_line(r, "does not exist")
    assert "service pid" not in r.stdout
