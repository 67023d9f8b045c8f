"""The C client (libfenceline_client): its header, its example renderer and its C test program,
compiled with the system C compiler against the installed library and run as separate processes
against a real service."""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
from pathlib import Path

import numpy as np
import onnxruntime as ort
import pytest

from fenceline.client import c_api
from fenceline.client.c_api import find_c_compiler
from fenceline.models import build_repository
from tests.support.helpers import ensure_user, shared_dir
from tests.support.metrics import metric
from tests.support.service import Service, running, start_service, stop_service
from tests.support.waiting import wait_until

ROOT = Path(__file__).resolve().parents[2]
CLIENT_SRC = ROOT / "native" / "client"

CC = find_c_compiler()
NEEDS_CC = pytest.mark.skipif(
    CC is None, reason="no C compiler (cc, gcc or clang; or $CC) to build the C client programs"
)
pytestmark = NEEDS_CC

# Every check of native/client/tests/test_client.c; test_every_c_check_is_run keeps this in sync.
CHECKS = [
    "api_version",
    "release_accepts_null",
    "fence_signal_and_wait",
    "fence_wakes_waiter_in_other_thread",
    "fence_abandoned_ends_wait",
    "named_fence_is_unlinked_by_creator",
    "open_fence_rejects_non_fence",
    "frames",
    "default_socket_path",
    "connect_to_missing_socket_fails",
    "hello",
    "run_by_fd",
    "run_by_name",
    "run_with_explicit_signal_value",
    "unknown_session",
    "session_of_other_client_is_not_found",
    "out_of_bounds_view",
    "bad_session_requests",
    "read_only_memory_cannot_be_output",
    "fence_timeout",
    "abandoned_input_fence",
    "import_errors",
    "d3d12_imports_are_refused_off_windows",
    "release_order_does_not_matter",
    "use_after_client_release",
    "imported_memfd_is_sealed_against_shrinking",
    "client_threads",
    "run_async_on_a_host_session_completes",
    "streaming_session_start_pause_stop",
    "request_session_cannot_start",
]

STRICT = ["-std=c11", "-Wall", "-Wextra", "-Werror", "-pedantic"]


def compile_c(sources: list[Path], out: Path, *extra: str) -> Path:
    assert CC is not None
    cmd = [CC, *STRICT, "-O2", *c_api.c_compile_flags(), *map(str, sources), "-o", str(out),
           *extra]
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, f"{' '.join(cmd)}\n{r.stderr}"
    return out


@pytest.fixture(scope="module")
def programs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    out = tmp_path_factory.mktemp("c-programs")
    link = [*c_api.c_link_flags(), "-lm", "-lpthread"]
    return {
        "renderer": compile_c([CLIENT_SRC / "examples" / "renderer.c"], out / "renderer", *link),
        "test_client": compile_c([CLIENT_SRC / "tests" / "test_client.c"], out / "test_client",
                                 *link),
    }


def run(cmd: list[str | Path], timeout: float = 60) -> subprocess.CompletedProcess[str]:
    return subprocess.run([str(c) for c in cmd], capture_output=True, text=True, timeout=timeout)


# -- the header and the library ---------------------------------------------------------------


def test_header_is_strict_c11(tmp_path: Path) -> None:
    compile_c([CLIENT_SRC / "tests" / "header_check.c"], tmp_path / "check.o", "-c")


def test_header_compiles_as_cxx(tmp_path: Path) -> None:
    cxx = shutil.which("c++") or shutil.which("g++") or shutil.which("clang++")
    if cxx is None:
        pytest.skip("no C++ compiler")
    r = run([cxx, "-std=c++11", "-Wall", "-Wextra", "-Werror", "-pedantic",
             *c_api.c_compile_flags(), "-c", CLIENT_SRC / "tests" / "header_check_cxx.cpp",
             "-o", tmp_path / "check.o"])
    assert r.returncode == 0, r.stderr


def test_shared_library_exports_only_the_entry_point() -> None:
    nm = shutil.which("nm")
    if nm is None:
        pytest.skip("no nm")
    r = run([nm, "-D", "--defined-only", c_api.c_library_dir() / c_api.LIBRARY])
    assert r.returncode == 0, r.stderr
    assert [line.split()[-1] for line in r.stdout.splitlines()] == ["FlGetApi"]


def test_static_library_links_alone(tmp_path: Path) -> None:
    exe = compile_c([CLIENT_SRC / "tests" / "test_client.c"], tmp_path / "static_test",
                    str(c_api.c_library_dir() / "libfenceline_client.a"), "-lpthread")
    r = run([exe, "-", "fence_signal_and_wait"])
    assert r.returncode == 0, r.stderr
    ldd = shutil.which("ldd")
    if ldd is not None:
        assert "libfenceline_client" not in run([ldd, exe]).stdout


def test_pkg_config_file_finds_the_installed_library(tmp_path: Path) -> None:
    pkg_config = shutil.which("pkg-config")
    if pkg_config is None:
        pytest.skip("no pkg-config")
    env = dict(os.environ, PKG_CONFIG_PATH=str(c_api.c_pkgconfig_dir()))
    r = subprocess.run([pkg_config, "--cflags", "--libs", "fenceline-client"], env=env,
                       capture_output=True, text=True, timeout=30)
    assert r.returncode == 0, r.stderr
    flags = r.stdout.split()
    assert CC is not None
    exe = tmp_path / "pc_test"
    build = run([CC, "-std=c11", str(CLIENT_SRC / "tests" / "test_client.c"), "-o", exe, *flags,
                 f"-Wl,-rpath,{c_api.c_library_dir()}", "-lpthread"])
    assert build.returncode == 0, build.stderr
    assert run([exe, "-", "api_version"]).returncode == 0


def test_c_api_module_prints_build_flags() -> None:
    r = run([sys.executable, "-m", "fenceline.client.c_api", "--cflags", "--libs"])
    assert r.returncode == 0, r.stderr
    assert f"-I{c_api.c_include_dir()}" in r.stdout and "-lfenceline_client" in r.stdout
    assert (c_api.c_include_dir() / "fenceline" / "fenceline_client.h").is_file()


# -- the C test program ---------------------------------------------------------------------------


def test_every_c_check_is_run(programs: dict[str, Path]) -> None:
    r = run([programs["test_client"], "-", "list"])
    assert r.returncode == 0, r.stderr
    assert r.stdout.split() == CHECKS


@pytest.mark.parametrize("check", CHECKS)
def test_c_check(check: str, programs: dict[str, Path], service: Service) -> None:
    r = run([programs["test_client"], service.socket, check])
    assert r.returncode == 0, f"{r.stdout}\n{r.stderr}"
    assert r.stdout.startswith(f"ok {check}")


@pytest.mark.parametrize(
    ("check", "code", "words"),
    [
        ("unknown_session", "not_found", "no session with id '0123456789abcdef"),
        ("session_of_other_client_is_not_found", "not_found", "no session with id"),
        ("out_of_bounds_view", "invalid_argument", "is outside the 98304 bytes available"),
        ("fence_timeout", "timed_out", "did not reach 2 within 50 ms"),
    ],
)
def test_bad_input_reports_stable_code_and_service_message(
    check: str, code: str, words: str, programs: dict[str, Path], service: Service
) -> None:
    r = run([programs["test_client"], service.socket, check])
    assert r.returncode == 0, r.stderr
    # The C program asserted the FlErrorCode; it prints the code's name and the message.
    assert f"[{code}]" in r.stdout and words in r.stdout, r.stdout


def test_c_checks_pass_under_address_and_undefined_sanitizers(
    service: Service, tmp_path: Path
) -> None:
    """The library's sources built with ASan, UBSan and LeakSanitizer into the C test program."""
    assert CC is not None
    src = [*sorted((CLIENT_SRC / "src").glob("*.c")),
           *sorted((CLIENT_SRC / "src" / "platform" / "posix").glob("*.c"))]
    exe = tmp_path / "test_client_asan"
    cmd = [CC, "-std=c11", "-g", "-O1", "-fsanitize=address,undefined", "-fno-omit-frame-pointer",
           "-fno-sanitize-recover=undefined", "-D_GNU_SOURCE", f"-I{CLIENT_SRC / 'include'}",
           f"-I{CLIENT_SRC / 'src'}", f"-I{ROOT / 'native' / 'common'}",
           str(CLIENT_SRC / "tests" / "test_client.c"), *map(str, src),
           str(ROOT / "native" / "common" / "host_timeline.c"),
           str(ROOT / "native" / "common" / "spin_rule.c"),
           str(ROOT / "native" / "common" / "platform" / "posix" / "htl_wake.c"),
           "-o", str(exe), "-lpthread"]
    build = run(cmd, timeout=180)
    if build.returncode != 0 and "sanitize" in build.stderr:
        pytest.skip(f"the compiler cannot build with sanitizers: {build.stderr[:200]}")
    assert build.returncode == 0, build.stderr
    env = dict(os.environ, ASAN_OPTIONS="detect_leaks=1:abort_on_error=0",
               UBSAN_OPTIONS="print_stacktrace=1")
    r = subprocess.run([str(exe), str(service.socket), "all"], capture_output=True, text=True,
                       timeout=120, env=env)
    assert r.returncode == 0, f"{r.stdout}\n{r.stderr}"
    assert r.stdout.count("\nok ") + r.stdout.startswith("ok ") == len(CHECKS)
    assert "runtime error" not in r.stderr and "Sanitizer" not in r.stderr, r.stderr


# -- the examples ---------------------------------------------------------------------------------


def test_docs_example_compiles_and_runs(service: Service, tmp_path: Path) -> None:
    text = (ROOT / "docs" / "c-api.md").read_text()
    section = text[text.index("## A complete example"):]
    source = section[section.index("```c\n") + 5:section.index("\n```\n")]
    (tmp_path / "example.c").write_text(source)
    exe = compile_c([tmp_path / "example.c"], tmp_path / "example", *c_api.c_link_flags())
    r = run([exe, service.socket])
    assert r.returncode == 0, r.stderr
    assert [line.split(" us")[0].rsplit(",", 1)[0] for line in r.stdout.splitlines()] == [
        f"frame {i}: y = x + 1" for i in (1, 2, 3)
    ]



def reference(model_repo: Path, model: str, x: np.ndarray) -> np.ndarray:
    sess = ort.InferenceSession(str(model_repo / model / "1" / "model.onnx"),
                                providers=["CPUExecutionProvider"])
    name = sess.get_inputs()[0].name
    return np.asarray(sess.run(None, {name: x})[0])


@pytest.mark.parametrize(
    ("model", "shape", "named"),
    [("add_64x64", (1, 3, 64, 64), False), ("add_64x64", (1, 3, 64, 64), True),
     ("image_filter", (1, 3, 720, 1280), False)],
)
def test_renderer_output_matches_onnxruntime(
    model: str, shape: tuple[int, ...], named: bool, programs: dict[str, Path], service: Service,
    model_repo: Path, tmp_path: Path,
) -> None:
    frames = "40" if model == "add_64x64" else "3"
    cmd = [programs["renderer"], "--socket", service.socket, "--model", model, "--frames", frames,
           "--warmup", "1", "--dump", tmp_path]
    r = run(cmd + (["--named"] if named else []), timeout=120)
    assert r.returncode == 0, f"{r.stdout}\n{r.stderr}"
    assert "outputs verified" in r.stdout and "fps" in r.stdout and "p99" in r.stdout
    x = np.fromfile(tmp_path / "input.bin", dtype=np.float32).reshape(shape)
    y = np.fromfile(tmp_path / "output.bin", dtype=np.float32).reshape(shape)
    assert x.std() > 0.1  # a real gradient, not an empty frame
    np.testing.assert_allclose(y, reference(model_repo, model, x), rtol=1e-6, atol=1e-6)


def test_renderer_reports_missing_service(programs: dict[str, Path], tmp_path: Path) -> None:
    r = run([programs["renderer"], "--socket", tmp_path / "none.sock"])
    assert r.returncode == 2
    assert "[transport] cannot connect to the fenceline socket" in r.stderr


# -- the client-side deadline: a hung service never hangs the caller --------------------------


@pytest.mark.parametrize(("mode", "check"), [("mute", "silent-hello"), ("hello", "silent-run")])
def test_c_client_calls_time_out_against_a_service_that_never_answers(
    mode: str, check: str, programs: dict[str, Path], tmp_path: Path
) -> None:
    """A real process accepts the connection and never answers (or answers only HELLO): every
    call fails with timed_out within its deadline, and the connection is closed afterwards."""
    sock = tmp_path / "silent.sock"
    silent = subprocess.Popen(
        [sys.executable, "-m", "tests.support.silent_service", str(sock), mode], cwd=ROOT,
        stdout=subprocess.PIPE, text=True,
    )
    try:
        assert silent.stdout is not None and silent.stdout.readline().strip() == "ready"
        # The subprocess limit only catches a hang; the program checks codes and messages.
        r = run([programs["test_client"], sock, check], timeout=60)
        assert r.returncode == 0, f"{r.stdout}\n{r.stderr}"
        assert "[timed_out] the service did not answer within" in r.stdout, r.stdout
        assert silent.poll() is None  # hung, not dead: the client gave up on its own
    finally:
        silent.kill()
        silent.communicate(timeout=30)


def test_a_run_whose_c_client_gave_up_is_stopped_not_run_to_its_end(
    programs: dict[str, Path], tmp_path: Path
) -> None:
    """A C client whose deadline passes during a slow run closes its connection (and lives on):
    the service stops the run at its model's next node or Loop iteration (docs/ipc.md, "A client
    that gives up"). Counted on the client's output fence, which every run that ends signals:
    the first run (waited for) reaches 1; the run given up on never brings it to 2, also once
    the service has let the connection go, which it can only do after the run ended."""
    repo = build_repository(tmp_path / "models", ["slow_add_64x64"])
    (tmp_path / "svc").mkdir()
    with running(repo, tmp_path / "svc") as svc, subprocess.Popen(
        [str(programs["test_client"]), str(svc.socket), "give-up"],
        stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    ) as proc:
        try:
            assert proc.stdout is not None and proc.stdin is not None
            gave_up = proc.stdout.readline().split()
            if gave_up != ["gave-up", "1"]:
                proc.kill()
                raise AssertionError(f"{gave_up}: {proc.communicate(timeout=30)[1]}")
            wait_until(lambda: metric(svc, "fenceline_ipc_open_connections") == 0,
                       timeout_s=120, what="the service letting the connection go")
            assert proc.poll() is None  # the client closed its connection; it did not exit
            out, err = proc.communicate(timeout=30)
        finally:
            if proc.poll() is None:
                proc.kill()
        assert proc.returncode == 0, err
        assert out.split() == ["done", "1"], out  # the run given up on did not end: no 2


# -- lifetime -------------------------------------------------------------------------------------


def test_killed_c_client_leaks_nothing_in_service(
    programs: dict[str, Path], service: Service
) -> None:
    fds, maps_before = service.settled()
    fds_before = set(fds)
    with subprocess.Popen([str(programs["test_client"]), str(service.socket), "hold"],
                          stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) as proc:
        try:
            assert proc.stdout is not None and proc.stderr is not None
            line = proc.stdout.readline()
            assert line.startswith("ready"), proc.stderr.read()
            # Two connections, two sessions and their memfd and named memory and fences.
            assert len(service.maps()) >= len(maps_before) + 4, service.maps()
            assert len(set(service.fds()) - fds_before) >= 2
            proc.send_signal(signal.SIGKILL)
            proc.wait(10)
        finally:
            if proc.poll() is None:
                proc.kill()
            for p in Path("/dev/shm").glob(f"fl-ctest-{proc.pid}-*"):  # the killed creator's
                p.unlink()

    # An HTTP connection of the fixture's readiness check may close meanwhile, so "nothing
    # leaked" is: no fd the service did not have before is left.
    def clean() -> bool:
        return not set(service.fds()) - fds_before and sorted(service.maps()) == maps_before

    wait_until(clean, what=lambda: (set(service.fds()) - fds_before, service.maps()))


@pytest.mark.skipif(os.geteuid() != 0 or shutil.which("useradd") is None,
                    reason="running the renderer as a second Unix user needs root and useradd")
def test_refused_connection_reports_permission_denied(
    programs: dict[str, Path], model_repo: Path
) -> None:
    allowed, other = ensure_user("fenceline-test-a"), ensure_user("fenceline-test-b")
    with shared_dir() as d:
        # The other user may not read the build tree: the program and its library go along.
        for f in (programs["renderer"], *c_api.c_library_dir().glob("libfenceline_client.so*")):
            shutil.copy(f, d / f.name)
            os.chmod(d / f.name, 0o755)
        svc = start_service(model_repo, d, "--allow-uid", str(allowed.pw_uid))
        try:
            r = subprocess.run(
                ["setpriv", f"--reuid={other.pw_uid}", f"--regid={other.pw_gid}", "--clear-groups",
                 str(d / "renderer"), "--socket", str(svc.socket), "--frames", "1"],
                capture_output=True, text=True, timeout=60, env={**os.environ, "LD_LIBRARY_PATH": str(d)},
            )
        finally:
            stop_service(svc)
    assert r.returncode == 2
    assert "CreateClient failed: [permission_denied] uid" in r.stderr, r.stderr
