"""`fenceline doctor` tells the truth about this install: what it finds is there, what it says
is missing is missing and comes with the command that brings it, and it exits 0 either way.
The C API's messages name the part that is missing, not another one."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path
from urllib.parse import urlsplit

import onnxruntime as ort
import pytest

import fenceline
from fenceline import __version__, _native
from fenceline.cli import doctor
from fenceline.cli.process import free_port
from fenceline.client import c_api
from tests.e2e.test_first_hour import clean_env
from tests.support.service import Service

PACKAGE = Path(fenceline.__file__).parent


def run_doctor(env: dict[str, str]) -> str:
    r = subprocess.run([sys.executable, "-m", "fenceline", "doctor"], env=env,
                       capture_output=True, text=True, timeout=120, stdin=subprocess.DEVNULL)
    assert r.returncode == 0, r.stderr
    assert r.stderr == "", r.stderr
    return r.stdout


def line(text: str, start: str) -> str:
    """The report's line that starts with ``start`` (after its indent), and the `run:` or `use:`
    line under it, if any."""
    lines = text.splitlines()
    for i, got in enumerate(lines):
        if got.strip().startswith(start):
            below = lines[i + 1].strip() if i + 1 < len(lines) else ""
            return got.strip() + ("\n" + below if below.startswith(("run:", "use:")) else "")
    raise AssertionError(f"no line {start!r} in:\n{text}")


def test_doctor_reports_what_this_install_has_and_exits_0(tmp_path: Path) -> None:
    sock, port = tmp_path / "nobody.sock", free_port()
    out = run_doctor(clean_env(tmp_path, FENCELINE_SOCKET=str(sock), FENCELINE_PORT=str(port)))
    assert out.startswith(f"fenceline {__version__} (Python ")
    assert line(out, "have  the native importer").endswith(f"({_native.PLATFORM})")
    # The C client is part of every install from source, and the doctor points at its files.
    client = PACKAGE / "lib" / c_api.LIBRARY
    assert client.exists()
    assert line(out, "have  the C client libfenceline_client:").startswith(
        f"have  the C client libfenceline_client: {client.parent}")
    # The GStreamer element: there exactly when its plugin file is in the package.
    element = PACKAGE / "lib" / "gstreamer-1.0" / "libgstfenceline.so"
    got = line(out, "have  the GStreamer element" if element.exists() else
               "lack  the GStreamer element")
    if element.exists():
        assert f"export GST_PLUGIN_PATH={element.parent}" in got
    else:
        assert "libgstreamer1.0-dev" in got and "install fenceline again" in got
    obs = PACKAGE / "lib" / "obs" / "fenceline-obs.so"
    line(out, ("have" if obs.exists() else "lack") + "  the OBS plugin fenceline-obs")
    # onnxruntime's providers as onnxruntime lists them; CUDA as the importer finds it.
    assert line(out, f"have  onnxruntime {ort.__version__}:").endswith(
        ", ".join(ort.get_available_providers()))
    if not _native.cuda_available():
        assert line(out, "lack  CUDA:").startswith(f"lack  CUDA: {_native.cuda_unavailable_reason()}")
    # Nothing answers at the socket and port it was given, and it says what starts a service.
    assert line(out, f"lack  the IPC socket {sock}: no socket there").endswith(
        "run: fenceline serve")
    assert line(out, f"lack  HTTP on 127.0.0.1:{port}: nothing answers").endswith(
        f"run: fenceline serve --port {port}")


def test_doctor_says_a_running_service_answers_on_its_socket_and_port(
    service: Service, tmp_path: Path
) -> None:
    port = urlsplit(service.url).port
    out = run_doctor(clean_env(tmp_path, FENCELINE_SOCKET=str(service.socket),
                               FENCELINE_PORT=str(port)))
    assert f"have  the IPC socket {service.socket}: fenceline {__version__} answers" in out
    assert f"have  HTTP on 127.0.0.1:{port}: fenceline {__version__} answers" in out


def test_doctor_names_each_missing_part_and_the_command_that_builds_it(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """An install whose package holds none of the native parts (its path points at an empty
    folder) and a PATH without GStreamer's tools: each part is named with its own command."""
    monkeypatch.setattr(fenceline, "__path__", [str(tmp_path)])
    monkeypatch.setenv("PATH", str(tmp_path))
    out = doctor.render([("built into this install", doctor.native_parts())])
    client = line(out, "lack  the C client libfenceline_client: not built with this install")
    assert "apt-get install gcc" in client and "install fenceline again: pip install ." in client
    element = line(out, "lack  the GStreamer element fencelinefilter: not built with this install")
    assert "libgstreamer1.0-dev libgstreamer-plugins-base1.0-dev" in element
    assert "install fenceline again" in element and "C client" not in element
    obs = line(out, "lack  the OBS plugin fenceline-obs: not built with this install")
    assert "libobs-dev" in obs and "install fenceline again" in obs
    tools = line(out, "lack  GStreamer's tools, to run a pipeline: gst-launch-1.0 is not on PATH")
    assert tools.endswith("sudo apt-get update && sudo apt-get install gstreamer1.0-tools")


@pytest.mark.parametrize(("flag", "part", "package"), [
    ("--gst-plugin-path", "the GStreamer element fencelinefilter", "libgstreamer1.0-dev"),
    ("--obs-plugin-path", "the OBS plugin fenceline-obs", "libobs-dev"),
])
def test_c_api_names_the_missing_plugin_not_the_c_client(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], tmp_path: Path,
    flag: str, part: str, package: str,
) -> None:
    """A package with the C client but without the plugin: the message is the plugin's."""
    (tmp_path / "lib").mkdir()
    shutil.copy(PACKAGE / "lib" / c_api.LIBRARY, tmp_path / "lib" / c_api.LIBRARY)
    monkeypatch.setattr(fenceline, "__path__", [str(tmp_path)])
    assert c_api.c_library_dir() == tmp_path / "lib"
    with pytest.raises(SystemExit) as e:
        c_api.main([flag])
    assert e.value.code == 2
    err = capsys.readouterr().err
    assert err.startswith(f"fenceline: {part} is not installed with this fenceline"), err
    assert package in err and "install fenceline again" in err and "C client" not in err
