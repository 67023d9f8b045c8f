"""Docs as tests: every fenced block in README.md and docs/ is either run here as written, or
named with the test that does the same thing, or marked as a sample of output (checked against
the real thing where it can be). A new block fails ``test_every_block_is_run_or_covered`` until
it is classified in ``COVERED`` below."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest
import yaml

from fenceline.protocol.schemas import MemoryImportRequest, RunRequest, SessionCreateRequest
from tests.support.docs_block import run_docs_block
from tests.support.service import Service

ROOT = Path(__file__).resolve().parents[2]
DOCS = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
HERE = "tests/e2e/test_docs_examples.py"
FIRST_HOUR = "tests/e2e/test_first_hour.py"


@dataclass(frozen=True)
class Block:
    doc: str  # path relative to the repository
    lang: str
    text: str

    @property
    def key(self) -> tuple[str, str]:
        first = next((line.strip() for line in self.text.splitlines() if line.strip()), "")
        return self.doc, first


def blocks() -> list[Block]:
    out = []
    for path in DOCS:
        for lang, text in re.findall(r"^```(\w*)\n(.*?)^```$", path.read_text(), re.S | re.M):
            out.append(Block(str(path.relative_to(ROOT)), lang, text))
    return out


def find(doc: str, first: str, nth: int = 0) -> Block:
    return [b for b in blocks() if b.key == (doc, first)][nth]


# (document, first line of the block) -> the tests that run it, "path::test" each.
# "sample:" marks an example of output or of a body; the tests named after it check it.
COVERED: dict[tuple[str, str], list[str]] = {
    ("README.md", "sequenceDiagram"): ["sample: a diagram"],
    ("docs/architecture.md", "sequenceDiagram"): ["sample: a diagram"],
    ("README.md", "python3 -m venv .venv && .venv/bin/pip install . && .venv/bin/fenceline demo"): [
        ".ci/run (a fresh venv, pip install)",
        "tests/e2e/test_bench_smoke.py::test_real_model_through_ipc_equals_a_direct_onnxruntime_run",
        f"{FIRST_HOUR}::test_demo_out_into_missing_directory_fails_first",
    ],
    ("README.md", "python3 -m venv .venv && .venv/bin/pip install '.[test]' && .venv/bin/python -m pytest -n 2 --dist loadfile"): [
        ".ci/run (runs this, with the build requirements installed first so .ci/wheel reuses the build)",
    ],
    ("README.md", "fenceline serve                             # the builtin models (`fenceline models list`)"): [
        f"{FIRST_HOUR}::test_serve_without_model_options_serves_the_builtin_models",
        f"{FIRST_HOUR}::test_models_write_gives_a_repository_serve_accepts",
        f"{FIRST_HOUR}::test_flags_win_over_environment",
        "tests/e2e/test_bench_smoke.py::test_quick_bench_writes_well_formed_json",
    ],
    ("README.md", "from fenceline.client import Fence, IpcClient, Layout, SharedFrame"): [
        f"{FIRST_HOUR}::test_readme_python_example_runs_verbatim_against_bare_serve",
    ],
    ("docs/benchmarks.md", "pip install '.[bench]'          # tritonclient, nvidia-pytriton, rapidocr-onnxruntime, matplotlib"): [
        "tests/e2e/test_bench_smoke.py::test_quick_bench_prints_table_and_goals",
        "tests/e2e/test_bench_smoke.py::test_scaling_mode_prints_a_table_and_writes_json",
    ],
    ("docs/tracing.md", "fenceline trace --seconds 2 --out frame.json                      # the service on 127.0.0.1:8000"): [
        "tests/integration/test_trace.py::test_trace_records_each_frame_of_a_renderer_in_order",
        "tests/integration/test_trace.py::test_trace_cli_says_when_no_service_answers"],
    ("docs/c-api.md", "# flags for the shared library, with an rpath so the program finds it"): [
        f"{HERE}::test_c_api_build_commands_run_as_written",
    ],
    ("docs/c-api.md", "#define _POSIX_C_SOURCE 200809L"): [
        "tests/native/test_c_client.py::test_docs_example_compiles_and_runs",
        f"{HERE}::test_c_api_build_commands_run_as_written",
        f"{HERE}::test_c_api_engine_build_runs_as_written",
    ],
    ("docs/c-api.md", "cmake -S native/client -B build/client -DFENCELINE_CLIENT_EXAMPLES=OFF"): [
        f"{HERE}::test_c_api_engine_build_runs_as_written",
        "tests/native/test_c_client_install.py::test_install_holds_headers_config_and_pkg_config",
    ],
    ("docs/c-api.md", "#include <cstdio>"): [
        f"{HERE}::test_c_api_cxx_example_runs_as_written",
        "tests/native/test_c_client_install.py::"
        "test_find_package_builds_c_and_cxx_programs_that_run_against_a_service",
    ],
    ("docs/c-api.md", "cmake_minimum_required(VERSION 3.18)"): [
        f"{HERE}::test_c_api_engine_build_runs_as_written",
    ],
    ("docs/c-api.md", 'cmake -S . -B build -DCMAKE_PREFIX_PATH="$HOME/.local/fenceline-client" '
     "&& cmake --build build"): [
        f"{HERE}::test_c_api_engine_build_runs_as_written",
    ],
    ("docs/c-api.md", 'export PKG_CONFIG_PATH="$HOME/.local/fenceline-client/lib/pkgconfig"'): [
        f"{HERE}::test_c_api_engine_build_runs_as_written",
    ],
    # Two blocks start so: "Directly" and the user service.
    ("docs/deploy.md", "python3 -m venv ~/.local/fenceline && ~/.local/fenceline/bin/pip install ."): [
        f"{HERE}::test_deploy_directly_serves_a_model_repository",
        "tests/e2e/test_deploy.py::test_user_unit_passes_systemd_analyze_verify",
    ],
    ("docs/deploy.md", "sudo useradd --system --home-dir /var/lib/fenceline --shell /usr/sbin/nologin fenceline"): [
        "tests/e2e/test_deploy.py::test_system_unit_passes_systemd_analyze_verify",
        "tests/e2e/test_deploy.py::test_unit_command_line_starts_a_working_service",
    ],
    ("docs/deploy.md", "docker build -t fenceline:0.1.0 ."): [
        "tests/e2e/test_deploy.py::test_dockerfile_passes_hadolint",
        "tests/e2e/test_entrypoint.py::test_entrypoint_serves_from_the_environment_and_stops_cleanly_on_sigterm",
    ],
    ("docs/deploy.md", "docker run --user 10001:10001 --ipc=container:fenceline \\"): [
        f"{FIRST_HOUR}::test_fenceline_socket_is_honoured_by_service_and_python_client",
    ],
    ("docs/deploy.md", "kubectl apply -f deploy/kubernetes/namespace.yaml"): [
        "tests/e2e/test_deploy.py::test_kubernetes_manifests_are_valid_against_the_strict_schemas",
    ],
    ("docs/deploy.md", "scrape_configs:"): [f"{HERE}::test_scrape_config_is_valid_yaml_for_the_port"],
    ("docs/deploy.md", "{"): [f"{HERE}::test_status_sample_has_the_live_keys"],
    ("docs/deploy.md", '{"ts": "2026-12-02T16:53:50.466Z", "level": "info", "logger": "fenceline.runtime", "message": "session created for model add_64x64", "owner": "ipc:1", "session_id": "74d21e04", "request_id": "5"}'): [
        f"{HERE}::test_json_samples_parse",
        "tests/integration/test_logs.py::test_json_logs_carry_request_and_session_ids",
    ],
    ("docs/gstreamer.md", "sudo apt-get install pkg-config libgstreamer1.0-dev "
     "libgstreamer-plugins-base1.0-dev \\"): [
        "tests/integration/test_gstreamer.py::test_720p_frames_equal_onnxruntime_and_share_the_pool_without_a_copy",
    ],
    ("docs/gstreamer.md", ".venv/bin/python -c 'from pathlib import Path; from fenceline.models import "
     "build_repository; build_repository(Path(\"models\"), [\"image_filter_rgba8\", \"image_filter_rgb8\"])'"): [
        f"{HERE}::test_gstreamer_run_it_block_runs_as_written",
        "tests/integration/test_gstreamer.py::test_every_packed_format_runs_through_its_model",
    ],
    ("docs/obs.md", "apt-get update"): [
        ".ci/run",
        "tests/integration/test_obs.py::test_the_plugin_loads_and_lists_the_services_models",
    ],
    ("docs/obs.md", "mkdir -p ~/.config/obs-studio/plugins/fenceline-obs/bin/64bit"): [
        "tests/integration/test_obs.py::test_docs_plugin_link_block_puts_the_module_where_obs_studio_looks",
    ],
    ("docs/obs.md", ".venv/bin/python -c 'from pathlib import Path; from fenceline.models import "
     "build_repository; build_repository(Path(\"models\"), [\"image_filter_rgba8\", "
     "\"image_filter_rgba8_slow\"])'"): [
        "tests/integration/test_obs.py::test_docs_run_it_headless_block_runs_as_written",
    ],
    ("docs/http.md", "sudo install -d -m 0711 -o fenceline /run/fenceline"): [
        "tests/integration/test_multi_user.py::test_an_allowed_user_connects_and_the_service_keeps_its_own_uid",
    ],
    ("docs/http.md", '{"memory": {"host_shm": true, "host_fd": true, "opaque_fd": false, "cuda_ipc": false,'): [
        f"{HERE}::test_capabilities_sample_has_the_live_keys",
    ],
    ("docs/http.md", '{"handle_type": "host_shm", "name": "/game-frame0", "size_bytes": 0, "offset_bytes": 0,'): [
        f"{HERE}::test_http_body_samples_are_valid_requests",
    ],
    ("docs/http.md", '{"model": "image_filter",'): [f"{HERE}::test_http_body_samples_are_valid_requests"],
    ("docs/http.md", '{"wait_value": 42, "signal_value": 42, "timeout_ms": 10000}'): [
        f"{HERE}::test_http_body_samples_are_valid_requests",
    ],
    ("docs/reliability.md", "nice -n 10 fenceline soak --renderers 4 --seconds 600 --kill-every 5 "
     "--warmup 20 --hostile 2 \\"): [
        "tests/integration/test_robustness.py::test_a_short_soak_with_hostile_renderers_leaks_nothing",
    ],
    ("docs/install.md", ".ci/windows          # set-up (cached in ~/.cache/fenceline-win), build, "
     "tests; the wheel lands in build/windows/dist/"): [".ci/run (runs .ci/windows)"],
    # docs/windows.md: run by the Windows lane (.ci/windows, under Wine), not on Linux.
    ("docs/windows.md", "py -3.13 -m pip install fenceline_inference-0.1.0-cp313-cp313-win_amd64.whl"): [".ci/windows"],
    ("docs/windows.md", "import numpy as np"): ["tests/windows/test_native.py::test_section_made_by_another_process_is_mapped_by_name"],
    ("docs/windows.md", "import httpx"): ["tests/windows/test_native.py::test_capabilities_report_linux_only_kinds_false"],
    ("docs/windows.md", "/* renderer.c: cl renderer.c /I <pkg>\\include <pkg>\\lib\\fenceline_client.lib, or with"): [
        "tests/windows/test_c_client.py::test_docs_c_renderer_runs_as_written",
    ],
    ("docs/windows.md", "HANDLE token; DWORD n = 0; LPWSTR sid = NULL; wchar_t pipe[256];"): [
        "tests/windows/test_pipe_frames.py::test_the_docs_pipe_name_in_c_is_the_services_default_pipe",
    ],
    ("docs/windows.md", "/* The frame: a pagefile-backed section. */"): [
        "tests/windows/test_native.py::test_fence_signalled_in_another_process_wakes_a_sleeping_waiter",
    ],
    ("docs/triton.md", "import tritonclient.http as httpclient"): [
        "tests/integration/test_model_control.py::test_load_serves_a_model_and_unload_stops_it",
        "tests/integration/test_model_control.py::test_unload_is_refused_while_a_session_uses_the_model"],
    ("docs/streaming.md", 'info = client.create_session("add_64x64", {"x": View(mem, "FP32", shape)},'): [
        "tests/integration/test_streaming.py::test_streaming_session_outputs_equal_direct_onnxruntime_runs",
    ],
}


def covered_by(block: Block) -> list[str] | None:
    if block.lang == "json" and block.key not in COVERED:
        return [f"{HERE}::test_json_samples_parse"]
    if block.lang == "":
        return ["sample: program output"]
    return COVERED.get(block.key)


def test_every_block_is_run_or_covered() -> None:
    missing = [f"{b.doc}: ```{b.lang} starting {b.key[1]!r}" for b in blocks() if covered_by(b) is None]
    assert not missing, (
        "blocks that no test runs; run them in a test and name it in COVERED in " + HERE + ":\n"
        + "\n".join(missing)
    )


def test_every_covered_entry_names_a_block_there_is() -> None:
    keys = {b.key for b in blocks()}
    stale = [f"{doc}: {first!r}" for doc, first in COVERED if (doc, first) not in keys]
    assert not stale, "COVERED names blocks no doc has any more; take them out:\n" + "\n".join(stale)


def test_every_named_test_exists() -> None:
    for block in blocks():
        for ref in covered_by(block) or []:
            if "::" not in ref:
                continue
            path, name = ref.split("::")
            assert re.search(rf"^def {name}\(", (ROOT / path).read_text(), re.M), ref


def sample_json(text: str) -> str:
    """A sample with its elisions (``[...]``, ``, ...``) taken out."""
    return re.sub(r",\s*\.\.\.", "", text.replace("[...]", "[]"))


def test_json_samples_parse() -> None:
    for b in blocks():
        if b.lang != "json":
            continue
        text = sample_json(b.text)
        if all(line.lstrip().startswith("{") for line in text.splitlines() if line.strip()) and \
                text.count("\n{") >= 1:
            for line in text.splitlines():
                json.loads(line)
        else:
            json.loads(text)


def test_http_body_samples_are_valid_requests() -> None:
    mem = json.loads(find("docs/http.md", '{"handle_type": "host_shm", "name": "/game-frame0", '
                          '"size_bytes": 0, "offset_bytes": 0,').text)
    MemoryImportRequest.model_validate(mem)
    session = json.loads(find("docs/http.md", '{"model": "image_filter",').text)
    SessionCreateRequest.model_validate(session)
    run = json.loads(find("docs/http.md", '{"wait_value": 42, "signal_value": 42, '
                          '"timeout_ms": 10000}').text)
    RunRequest.model_validate(run)


def test_capabilities_sample_has_the_live_keys(service: Service) -> None:
    import httpx

    sample = json.loads(find("docs/http.md", '{"memory": {"host_shm": true, "host_fd": true, '
                             '"opaque_fd": false, "cuda_ipc": false,').text)
    live = httpx.get(service.url + "/v2/interop/capabilities").json()
    assert set(sample) <= set(live)
    for part in ("memory", "fences"):
        assert set(sample[part]) == set(live[part]), part


def test_status_sample_has_the_live_keys(service: Service) -> None:
    import httpx

    sample = json.loads(sample_json(find("docs/deploy.md", "{").text))
    live = httpx.get(service.url + "/v2/interop/status").json()
    assert set(sample) == set(live)
    assert set(sample["server"]) <= set(live["server"])


def test_scrape_config_is_valid_yaml_for_the_port() -> None:
    cfg = yaml.safe_load(find("docs/deploy.md", "scrape_configs:").text)
    [job] = cfg["scrape_configs"]
    assert all(t.endswith(":8000") for t in job["static_configs"][0]["targets"])


@pytest.fixture
def venv_path() -> dict[str, str]:
    """The environment a user has after activating the venv: its python first on PATH."""
    return dict(os.environ, PATH=f"{Path(sys.executable).parent}:{os.environ['PATH']}")


def test_c_api_build_commands_run_as_written(
    service: Service, tmp_path: Path, venv_path: dict[str, str]
) -> None:
    """Each of the three ways to build in docs/c-api.md, verbatim, on the document's own
    example; each program finds the service through FENCELINE_SOCKET (no argument given)."""
    if shutil.which("cc") is None:
        pytest.skip("no C compiler")
    commands = find("docs/c-api.md", "# flags for the shared library, with an rpath so the program "
                    "finds it").text
    source = find("docs/c-api.md", "#define _POSIX_C_SOURCE 200809L").text
    ways = [w for w in re.split(r"\n\s*\n", commands) if "cc " in w]
    assert len(ways) == 3
    for i, way in enumerate(ways):
        work = tmp_path / f"way{i}"
        work.mkdir()
        (work / "renderer.c").write_text(source)
        if "pkg-config" in way and shutil.which("pkg-config") is None:
            continue
        build = subprocess.run(["bash", "-euo", "pipefail", "-c", way], cwd=work, env=venv_path,
                               capture_output=True, text=True, timeout=180)
        assert build.returncode == 0, f"{way}\n{build.stderr}"
        r = subprocess.run([str(work / "renderer")], env=dict(venv_path, FENCELINE_SOCKET=str(
            service.socket)), capture_output=True, text=True, timeout=60)
        assert r.returncode == 0, f"{way}\n{r.stderr}"
        assert r.stdout.count("y = x + 1") == 3, r.stdout


def test_c_api_engine_build_runs_as_written(service: Service, tmp_path: Path) -> None:
    """docs/c-api.md "Building the client alone", verbatim: native/client built and installed
    under a fresh HOME with no Python on PATH, then the document's example built against the
    install with find_package and with pkg-config, each run against a real service."""
    from tests.native.test_c_client_install import find_cmake

    cmake = find_cmake()
    if cmake is None or shutil.which("cc") is None:
        pytest.skip("needs cmake (the [test] extra) and cc")
    doc = "docs/c-api.md"
    install = find(doc, "cmake -S native/client -B build/client -DFENCELINE_CLIENT_EXAMPLES=OFF")
    lists = find(doc, "cmake_minimum_required(VERSION 3.18)")
    configure = find(doc, 'cmake -S . -B build -DCMAKE_PREFIX_PATH="$HOME/.local/fenceline-client" '
                     "&& cmake --build build")
    pkg = find(doc, 'export PKG_CONFIG_PATH="$HOME/.local/fenceline-client/lib/pkgconfig"')
    source = find(doc, "#define _POSIX_C_SOURCE 200809L").text
    tools = tmp_path / "bin"
    tools.mkdir()
    (tools / "cmake").symlink_to(cmake)
    clone, home = tmp_path / "clone", tmp_path / "home"
    clone.mkdir()
    home.mkdir()
    (clone / "native").symlink_to(ROOT / "native")
    venv_bin = str(Path(sys.executable).parent)
    path = [str(tools), *(p for p in os.environ["PATH"].split(":") if p and p != venv_bin)]
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PYTHON", "VIRTUAL_ENV",
                                                                    "PKG_CONFIG", "CMAKE_"))}
    env.update(HOME=str(home), PATH=":".join(path), FENCELINE_SOCKET=str(service.socket))

    def sh(text: str, cwd: Path) -> str:
        r = subprocess.run(["bash", "-euo", "pipefail", "-c", text], cwd=cwd, env=env,
                           capture_output=True, text=True, timeout=300)
        assert r.returncode == 0, f"{text}\n{r.stdout}\n{r.stderr}"
        return r.stdout

    sh(install.text, clone)
    # The document's table of installed files names what the build made (the library's version
    # follows FL_API_VERSION, so a bump that the table missed fails here).
    prefix = home / ".local" / "fenceline-client"
    text = (ROOT / doc).read_text()
    table = text[text.index("| installed | what |"):].split("\n\n", 1)[0]
    listed = re.findall(r"^\| `([^`]+)`", table, re.M)
    assert any(".so." in p for p in listed)
    assert [p for p in listed if not (prefix / p).exists()] == []
    with_cmake, with_pc = tmp_path / "with-cmake", tmp_path / "with-pkg-config"
    for d in (with_cmake, with_pc):
        d.mkdir()
        (d / "renderer.c").write_text(source)
    (with_cmake / "CMakeLists.txt").write_text(lists.text)
    assert sh(configure.text, with_cmake).count("y = x + 1") == 3
    if shutil.which("pkg-config") is None:
        return
    sh(pkg.text, with_pc)
    assert sh("./renderer", with_pc).count("y = x + 1") == 3


def test_c_api_cxx_example_runs_as_written(
    service: Service, tmp_path: Path, venv_path: dict[str, str]
) -> None:
    """docs/c-api.md's C++ wrapper example, verbatim, built as C++11 against the installed
    library; it finds the service through FENCELINE_SOCKET."""
    from fenceline.client import c_api

    cxx = shutil.which("c++") or shutil.which("g++") or shutil.which("clang++")
    if cxx is None:
        pytest.skip("no C++ compiler")
    (tmp_path / "example.cpp").write_text(find("docs/c-api.md", "#include <cstdio>").text)
    build = subprocess.run([cxx, "-std=c++11", "-Wall", "-Wextra", "-Werror", "-pedantic",
                            str(tmp_path / "example.cpp"), *c_api.c_compile_flags(),
                            *c_api.c_link_flags(), "-o", str(tmp_path / "example")],
                           capture_output=True, text=True, timeout=180)
    assert build.returncode == 0, build.stderr
    r = subprocess.run([str(tmp_path / "example")], env=dict(venv_path, FENCELINE_SOCKET=str(
        service.socket)), capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stderr
    assert r.stdout.startswith("y[0] = 42 after "), r.stdout


def test_deploy_directly_serves_a_model_repository(tmp_path: Path) -> None:
    """docs/deploy.md "Directly" on a fresh home, with the install step replaced by this
    checkout's install (CI installs from a clean clone the same way); the other lines run as
    written."""
    block = find("docs/deploy.md", "python3 -m venv ~/.local/fenceline && "
                 "~/.local/fenceline/bin/pip install .").text
    install, write_line, serve_line = block.splitlines()
    assert write_line.startswith("~/.local/fenceline/bin/fenceline models write ~/models")
    assert serve_line.startswith("~/.local/fenceline/bin/fenceline serve --model-repository ~/models")
    home = tmp_path / "home"
    (home / ".local" / "fenceline" / "bin").mkdir(parents=True)
    (home / ".local" / "fenceline" / "bin" / "fenceline").symlink_to(
        Path(sys.executable).parent / "fenceline")
    run_dir = tmp_path / "run"
    run_dir.mkdir(mode=0o700)
    env = {k: v for k, v in os.environ.items() if not k.startswith("FENCELINE_")}
    env.update(HOME=str(home), XDG_RUNTIME_DIR=str(run_dir), FENCELINE_PORT="0")
    w = subprocess.run(["bash", "-c", write_line], env=env, capture_output=True, text=True,
                       timeout=300)
    assert w.returncode == 0, w.stderr
    proc = subprocess.Popen(["bash", "-c", "exec " + serve_line], env=env, stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True)
    try:
        sock = run_dir / "fenceline" / "fenceline.sock"
        from fenceline.client import IpcClient

        for _ in range(600):
            if sock.exists():
                break
            assert proc.poll() is None, proc.stdout.read() if proc.stdout else ""
            import time

            time.sleep(0.1)
        with IpcClient(sock) as client:
            assert client.server["server"] == "fenceline"
    finally:
        proc.terminate()
        out, _ = proc.communicate(timeout=20)
    assert "loaded model image_filter" in out, out


def test_gstreamer_run_it_block_runs_as_written(tmp_path: Path) -> None:
    """docs/gstreamer.md "Run it", verbatim, in a fresh directory holding this venv as .venv;
    the service's port and socket come from FENCELINE_* (8000 may be taken here), the element
    finds the socket the same way. The background service is stopped when the block ends."""
    gst_launch = shutil.which("gst-launch-1.0")
    from fenceline.client import ClientError
    from fenceline.client.c_api import gst_plugin_dir

    try:
        plugins: Path | None = gst_plugin_dir()
    except ClientError:  # no element in this build
        plugins = None
    if gst_launch is None or plugins is None:
        if os.environ.get("FENCELINE_REQUIRE_GST"):
            pytest.fail("FENCELINE_REQUIRE_GST is set but GStreamer or the element is missing")
        pytest.skip("needs gst-launch-1.0 and the fencelinefilter element")
    block = find("docs/gstreamer.md", ".venv/bin/python -c 'from pathlib import Path; from "
                 "fenceline.models import build_repository; build_repository(Path(\"models\"), "
                 "[\"image_filter_rgba8\", \"image_filter_rgb8\"])'").text
    r = run_docs_block(tmp_path, block, 900, GST_PLUGIN_PATH=str(plugins))
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    assert "Got EOS" in r.stdout, r.stdout[-3000:]
    assert (tmp_path / "models" / "image_filter_rgba8" / "1" / "model.onnx").is_file()


def test_inline_fenceline_commands_name_real_commands_and_flags() -> None:
    """The `fenceline ...` commands written inline in README.md and docs/ (not in blocks) use
    subcommands and flags the CLI has, so a renamed flag cannot outlive its mention."""
    import argparse
    import shlex

    from fenceline.cli import build_parser

    # argparse keeps its flags and subcommands in private tables; there is no public reader.
    def subcommands(p: argparse.ArgumentParser) -> dict[str, argparse.ArgumentParser]:
        return next((dict(a.choices) for a in p._actions
                     if isinstance(a, argparse._SubParsersAction)), {})

    checked, wrong = 0, []
    for path in DOCS:
        text = re.sub(r"^```.*?^```$", "", path.read_text(), flags=re.S | re.M)
        for command in re.findall(r"`(fenceline [a-z][^`]*)`", text):
            if command.startswith("fenceline error"):  # an error message, not a command
                continue
            parser, words = build_parser(), shlex.split(command)[1:]
            for word in words:
                if word.startswith("--"):
                    if word.split("=")[0] not in parser._option_string_actions:
                        wrong.append(f"{path.name}: `{command}`: no flag {word}")
                elif word in subcommands(parser):
                    parser = subcommands(parser)[word]
            if not words or words[0] not in subcommands(build_parser()):
                wrong.append(f"{path.name}: `{command}`: no such command")
            checked += 1
    assert checked > 10
    assert wrong == []


def _row(doc: str, start: str) -> str:
    return next(line for line in (ROOT / doc).read_text().splitlines() if line.startswith(start))


def test_gstreamer_timeout_limit_and_socket_order_are_the_services(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """docs/gstreamer.md's `timeout` range is the service's limit (and the element's), and its
    `socket` default names the paths in the order the service and the clients try them."""
    from fenceline.ipc.server import default_socket_path
    from fenceline.runtime.table import RuntimeSettings

    limit = RuntimeSettings().max_timeout_ms
    row = _row("docs/gstreamer.md", "| `timeout` |")
    assert f"1 to {limit}" in row and f"limit of {limit}" in row
    assert f"#define MAX_TIMEOUT_MS {limit}\n" in (ROOT / "native/gstreamer/filter.c").read_text()
    row = _row("docs/gstreamer.md", "| `socket` |")
    paths = ["$FENCELINE_SOCKET", "$XDG_RUNTIME_DIR/fenceline/fenceline.sock",
             "/tmp/fenceline-<uid>/fenceline/fenceline.sock"]
    assert [row.index(p) for p in paths] == sorted(row.index(p) for p in paths)
    monkeypatch.setenv("FENCELINE_SOCKET", str(tmp_path / "a.sock"))
    monkeypatch.setenv("XDG_RUNTIME_DIR", str(tmp_path))
    assert default_socket_path() == tmp_path / "a.sock"
    monkeypatch.delenv("FENCELINE_SOCKET")
    assert default_socket_path() == tmp_path / "fenceline" / "fenceline.sock"
    monkeypatch.delenv("XDG_RUNTIME_DIR")
    assert default_socket_path() == Path(f"/tmp/fenceline-{os.getuid()}/fenceline/fenceline.sock")


def test_c_api_sizes_program_name_and_sonames_are_the_builds() -> None:
    """docs/c-api.md: the 56-byte message is the 16-byte header and ipc.md's 40-byte RUN body,
    the reply 40 bytes; the example runs as the program the build commands make; the wheel's
    library has the unversioned SONAME, the standalone install the versioned one."""
    from fenceline.client.c_api import c_library_dir
    from fenceline.protocol import codec

    doc = (ROOT / "docs" / "c-api.md").read_text()
    assert codec.HEADER_SIZE + codec.RUN_BODY.size == 56 and "### RUN (40 bytes)" in (
        ROOT / "docs" / "ipc.md").read_text()
    assert codec.HEADER_SIZE + codec.RUN_REPLY_BODY.size == 40
    assert "one 56-byte message (the 16-byte frame header and the 40-byte RUN body" in doc
    assert "./example" not in doc and "-o renderer" in doc and "then `./renderer`" in doc
    if shutil.which("readelf") is None:
        pytest.skip("no readelf")
    out = subprocess.run(["readelf", "-d", str(c_library_dir() / "libfenceline_client.so")],
                         capture_output=True, text=True, check=True).stdout
    assert "Library soname: [libfenceline_client.so]" in out
    assert "its SONAME is `libfenceline_client.so`" in doc
    assert "its SONAME is `libfenceline_client.so.1`" in doc


def test_triton_md_names_the_model_settings_session_options_and_metrics_there_are() -> None:
    """docs/triton.md: every config.json key with its default, the session option fenceline
    sets on every onnxruntime session, and each nv_inference_* family the service exposes."""
    import dataclasses
    import json as json_module

    from fenceline.metrics import TRITON_COUNTERS, TRITON_FAILURE, TRITON_PENDING
    from fenceline.runtime.models import ModelSettings

    doc = (ROOT / "docs" / "triton.md").read_text()
    for f in dataclasses.fields(ModelSettings):
        assert f"| `{f.name}` | `{json_module.dumps(f.default)}` |" in doc, f.name
    from fenceline.runtime.ort_options import cpu_session_options, cuda_session_options

    for so in (cpu_session_options(), cuda_session_options()):
        assert so.get_session_config_entry("session.intra_op.allow_spinning") == "0"
    assert "`session.intra_op.allow_spinning` is `\"0\"` for CPU and CUDA sessions" in doc
    for name, _ in (*TRITON_COUNTERS, TRITON_FAILURE, TRITON_PENDING):
        assert f"`{name}`" in doc, name


def test_readme_is_a_first_page_that_the_docs_do_not_contradict() -> None:
    """README.md fits a screen or two, keeps the two commands, says what the first install
    compiles and needs, makes no absolute no-copy claim (KServe tensors are copied:
    docs/triton.md), and every document it links exists."""
    text = (ROOT / "README.md").read_text()
    assert len(text.splitlines()) <= 120
    for command in ("python3 -m venv .venv && .venv/bin/pip install . && .venv/bin/fenceline demo",
                    "python3 -m venv .venv && .venv/bin/pip install '.[test]' && .venv/bin/python -m pytest -n 2 --dist loadfile"):
        assert f"```sh\n{command}\n```" in text, command
    assert "CMake" in text and "C++17 compiler" in text and "a few minutes" in text
    assert "ever copied" not in text and "tensors are copied" in text
    for link in re.findall(r"\]\(([^)#]+)(?:#[^)]*)?\)", text):
        assert (ROOT / link).exists(), link
