"""The C client on Windows (fenceline_client.dll over the named pipe), as separate Windows
processes: win_c_renderer.c, a renderer written in C and built by the lane with mingw-w64
against the wheel's header and import library, run against `fenceline serve`."""

from __future__ import annotations

import os
import secrets
import subprocess
import sys
from pathlib import Path

import numpy as np
import onnxruntime as ort
import pytest

from tests.windows.test_service import FRAMES, WinService, finish, finish_lines

HERE = Path(__file__).parent
# Set by .ci/windows, which builds the programs; outside the lane these tests cannot run.
PROGRAMS = os.environ.get("FENCELINE_WIN_C_PROGRAMS", "")
pytestmark = pytest.mark.skipif(
    not PROGRAMS, reason="FENCELINE_WIN_C_PROGRAMS is unset: .ci/windows builds the C programs"
)


def c_renderer(*args: str, program: str = "win_c_renderer.exe") -> subprocess.Popen[str]:
    import fenceline

    # fenceline_client.dll lives in the installed package, as for any C program using the wheel.
    dll_dir = Path(fenceline.__file__).parent / "lib"
    env = dict(os.environ, PATH=f"{dll_dir}{os.pathsep}{os.environ.get('PATH', '')}")
    return subprocess.Popen(
        [str(Path(PROGRAMS) / program), *args], stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT, text=True, env=env,
    )


def test_c_renderer_runs_200_frames_by_name_over_the_pipe_with_outputs_equal_to_onnxruntime(
    service: WinService, tmp_path: Path
) -> None:
    before = service.baseline_handles()
    result = finish(c_renderer("run", service.pipe, str(FRAMES), str(tmp_path)))
    assert result == {"frames": FRAMES, "mismatches": 0}
    x = np.fromfile(tmp_path / "input.bin", dtype=np.float32).reshape(1, 3, 64, 64)
    y = np.fromfile(tmp_path / "output.bin", dtype=np.float32).reshape(1, 3, 64, 64)
    direct = ort.InferenceSession(str(service.model), providers=["CPUExecutionProvider"])
    assert x.std() > 0.1
    np.testing.assert_array_equal(y, direct.run(None, {"x": x})[0])
    # The renderer is gone: the service holds nothing of it.
    service.assert_released(before)


def test_docs_c_renderer_runs_as_written(service: WinService) -> None:
    """docs/windows.md's C renderer, compiled as written by the lane, given the lane's pipe."""
    before = service.baseline_handles()
    out = finish_lines(c_renderer(service.pipe, program="docs_renderer.exe"))
    assert "200 frames, 0 wrong outputs" in out, out
    service.assert_released(before)


def test_c_renderer_killed_mid_run_leaks_nothing_in_the_service(
    service: WinService, tmp_path: Path
) -> None:
    before = service.baseline_handles()
    p = c_renderer("run", service.pipe, str(FRAMES), str(tmp_path), "5")
    service.assert_kill_releases(p, 5, before)


def test_c_client_rejects_bad_names_with_stable_codes(service: WinService) -> None:
    out = finish_lines(c_renderer("names", service.pipe))
    for what, code in [
        ("prefix_case", "invalid_argument"), ("session_reserved", "invalid_argument"),
        ("posix_name", "invalid_argument"), ("backslash", "invalid_argument"),
        ("anonymous_frame", "unsupported"), ("squatted_frame", "conflict"),
        ("squatted_fence", "conflict"), ("not_a_fence", "invalid_argument"),
        ("missing_fence", "not_found"), ("fence_by_fd", "unsupported"),
        ("import_missing", "not_found"), ("import_prefix_case", "invalid_argument"),
        ("import_fd", "unsupported"),
    ]:
        assert f"ok {what}: [{code}]" in out, out
    assert "ok default_pipe: \\\\.\\pipe\\fenceline-S-1-" in out, out


def test_c_client_call_times_out_against_a_pipe_that_never_answers() -> None:
    pipe = f"\\\\.\\pipe\\fenceline-silent-{secrets.token_hex(4)}"
    silent = subprocess.Popen(
        [sys.executable, str(HERE / "win_silent_pipe.py"), pipe], stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
    )
    try:
        assert silent.stdout is not None
        seen = []
        for line in silent.stdout:  # onnxruntime may print its own notices first
            seen.append(line)
            if line.strip() == "ready":
                break
        assert seen and seen[-1].strip() == "ready", seen
        out = finish_lines(c_renderer("silent", pipe))
        assert "ok silent_hello: [timed_out] the service did not answer within 0.300 s" in out, out
        assert silent.poll() is None  # hung, not dead: the client gave up on its own
    finally:
        silent.kill()
        silent.communicate(timeout=60)
