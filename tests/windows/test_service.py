"""The service on Windows, as separate Windows processes: `fenceline serve` with HTTP and its
named pipe, and renderers that share frames and fences by NT name (win_renderer.py, written
from docs/windows.md)."""

from __future__ import annotations

import ctypes
import json
import secrets
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import httpx
import pytest

from fenceline.cli.process import free_port
from fenceline.models import build_repository
from tests.support.metrics import metrics_text, total

HERE = Path(__file__).parent
FRAMES = 200


@dataclass
class WinService:
    proc: subprocess.Popen[str]
    url: str
    pipe: str
    model: Path
    log: list[str] = field(default_factory=list)
    warm: bool = False

    def metric(self, name: str) -> float:
        """Sum of a metric's samples on /metrics."""
        return total(metrics_text(self), name)

    def handle_count(self) -> int:
        """How many kernel handles the service process holds: GetProcessHandleCount, or where
        that answers 0 (Wine 8 does not implement it) the system handle table."""
        k32 = ctypes.WinDLL("kernel32", use_last_error=True)
        k32.OpenProcess.restype = ctypes.c_void_p
        h = k32.OpenProcess(0x1000, False, self.proc.pid)  # PROCESS_QUERY_LIMITED_INFORMATION
        assert h, ctypes.get_last_error()
        try:
            n = ctypes.c_ulong()
            assert k32.GetProcessHandleCount(ctypes.c_void_p(h), ctypes.byref(n)), ctypes.get_last_error()
        finally:
            k32.CloseHandle(ctypes.c_void_p(h))
        return n.value or system_handle_count(self.proc.pid)

    def assert_released(self, handles_before: int | None = None) -> None:
        """The renderers are gone and the service holds nothing of theirs: once their pipe
        connections closed (a killed renderer's closes a moment later), no import and no
        session, and with ``handles_before`` no more kernel handles than then."""
        deadline = time.monotonic() + 60
        while self.metric("fenceline_ipc_open_connections") != 0:
            assert time.monotonic() < deadline, "a renderer's pipe connection stayed open"
            time.sleep(0.2)
        assert self.metric("fenceline_interop_imported_handles") == 0
        assert self.metric("fenceline_session_active") == 0
        if handles_before is not None:
            self.assert_handles_back(handles_before)

    def assert_handles_back(self, before: int) -> None:
        """No more kernel handles than ``before``: a single one more fails too."""
        now = self.settled_handles()
        assert now <= before, f"{now} kernel handles in the service, {before} before"

    def assert_kill_releases(self, renderer: subprocess.Popen[str], hanging: int,
                             handles_before: int) -> None:
        """``renderer`` reports it hangs at run ``hanging`` holding its three imports; killed
        there, it leaves nothing in the service (:meth:`assert_released`)."""
        try:
            assert first_json(renderer) == {"hanging": hanging}
            assert self.metric("fenceline_interop_imported_handles") == 3
        finally:
            renderer.kill()
            renderer.communicate(timeout=60)
        self.assert_released(handles_before)

    def baseline_handles(self) -> int:
        """The handle count to compare a renderer's leftovers with. A fresh service allocates
        some handles once, for good, on first use, and they must not be blamed on whichever
        renderer comes first: its first pipe client and model run (onnxruntime's threads) add
        one, its first /metrics read (the thread that serves synchronous HTTP routes, which
        every check here reads) two. So the first baseline is taken after both."""
        if not self.warm:
            finish(renderer(self, "pipe", frames=3))
            self.metric("fenceline_ipc_open_connections")
            self.warm = True
        return self.settled_handles()

    def settled_handles(self, timeout_s: float = 30.0) -> int:
        """The handle count once it stopped changing for a moment."""
        last, since = self.handle_count(), time.monotonic()
        deadline = since + timeout_s
        while time.monotonic() < deadline:
            time.sleep(0.2)
            now = self.handle_count()
            if now != last:
                last, since = now, time.monotonic()
            elif time.monotonic() - since > 1.0:
                break
        return last


class _HandleEntry(ctypes.Structure):  # SYSTEM_HANDLE_TABLE_ENTRY_INFO_EX
    _fields_ = [
        ("Object", ctypes.c_void_p), ("UniqueProcessId", ctypes.c_size_t),
        ("HandleValue", ctypes.c_size_t), ("GrantedAccess", ctypes.c_ulong),
        ("CreatorBackTraceIndex", ctypes.c_ushort), ("ObjectTypeIndex", ctypes.c_ushort),
        ("HandleAttributes", ctypes.c_ulong), ("Reserved", ctypes.c_ulong),
    ]


def system_handle_count(pid: int) -> int:
    """Handles of process `pid` in NtQuerySystemInformation(SystemExtendedHandleInformation)."""
    ntdll = ctypes.WinDLL("ntdll")
    size = 1 << 20
    while True:
        buf = ctypes.create_string_buffer(size)
        status = ntdll.NtQuerySystemInformation(64, buf, size, None) & 0xFFFFFFFF
        if status == 0xC0000004:  # STATUS_INFO_LENGTH_MISMATCH: the table grew
            size *= 2
            continue
        assert status == 0, hex(status)
        count = ctypes.c_size_t.from_buffer(buf).value  # then one reserved word, then entries
        entries = (_HandleEntry * count).from_buffer(buf, 2 * ctypes.sizeof(ctypes.c_size_t))
        return sum(1 for e in entries if e.UniqueProcessId == pid)


def drain(proc: subprocess.Popen[str], into: list[str]) -> None:
    assert proc.stdout is not None
    for line in proc.stdout:
        into.append(line.rstrip())


def run_service(tmp_path_factory: pytest.TempPathFactory) -> Iterator[WinService]:
    """`fenceline serve` in its own Windows process: the session's `service` (conftest.py)."""
    # slow_add_64x64: runs long enough to kill a renderer during one (test_pipe_liveness.py).
    repo = build_repository(tmp_path_factory.mktemp("models"), ["add_64x64", "slow_add_64x64"])
    port = free_port()
    pipe = f"\\\\.\\pipe\\fenceline-test-{secrets.token_hex(4)}"
    # Output through a pipe: CPython under Wine 8 cannot start with a file as stdout.
    proc = subprocess.Popen(
        [sys.executable, "-m", "fenceline", "serve", "--port", str(port), "--socket", pipe,
         "--model-repository", str(repo)],
        stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
    )
    svc = WinService(proc, f"http://127.0.0.1:{port}", pipe, repo / "add_64x64" / "1" / "model.onnx")
    drainer = threading.Thread(target=drain, args=(proc, svc.log), daemon=True)
    drainer.start()
    deadline = time.monotonic() + 600  # Wine on a loaded 2-core machine starts slowly
    try:  # a service that never got ready is stopped too
        while True:
            assert proc.poll() is None, "\n".join(svc.log)
            try:
                if httpx.get(f"{svc.url}/v2/health/ready", timeout=5).status_code == 200:
                    break
            except httpx.HTTPError:
                pass
            assert time.monotonic() < deadline, "\n".join(svc.log)
            time.sleep(0.2)
        yield svc
    finally:
        proc.terminate()
        proc.wait(60)
        drainer.join(30)
        if not drainer.is_alive():  # else closing would wait for its read: leave it to exit
            assert proc.stdout is not None
            proc.stdout.close()


def renderer(service: WinService, transport: str, *extra: str,
             frames: int = FRAMES) -> subprocess.Popen[str]:
    where = service.url if transport == "http" else service.pipe  # pipe, stream
    return subprocess.Popen(
        [sys.executable, str(HERE / "win_renderer.py"), transport, where, str(frames),
         str(service.model), *extra],
        stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
    )


def first_json(p: subprocess.Popen[str]) -> dict[str, object]:
    """The first JSON line ``p`` prints (onnxruntime may print its own notices first)."""
    assert p.stdout is not None
    seen = []
    for line in p.stdout:
        seen.append(line)
        if line.startswith("{"):
            return dict(json.loads(line))
    raise AssertionError(f"no JSON line from the process: {seen}")


def finish_lines(p: subprocess.Popen[str]) -> str:
    """What ``p`` printed, once it exited 0 (killed if it runs past 300 s)."""
    try:
        out, _ = p.communicate(timeout=300)
    finally:
        if p.poll() is None:
            p.kill()
            p.communicate()
    assert p.returncode == 0, out
    return out


def finish(p: subprocess.Popen[str]) -> dict[str, object]:
    """:func:`finish_lines`' last line, a JSON object."""
    return dict(json.loads(finish_lines(p).strip().splitlines()[-1]))


def test_capabilities_over_http_report_linux_only_kinds_false(service: WinService) -> None:
    caps = httpx.get(f"{service.url}/v2/interop/capabilities", timeout=30).json()
    assert caps["memory"]["host_shm"] is True and caps["fences"]["host_timeline"] is True
    assert caps["memory"]["host_fd"] is False and caps["memory"]["opaque_fd"] is False
    assert caps["fences"]["vk_timeline_opaque_fd"] is False


@pytest.mark.parametrize("transport", ["http", "pipe"])
def test_renderer_runs_200_frames_by_name_with_outputs_equal_to_onnxruntime(
    service: WinService, transport: str
) -> None:
    before = service.baseline_handles()
    result = finish(renderer(service, transport))
    assert result == {"frames": FRAMES, "mismatches": 0, "seconds": result["seconds"]}
    service.assert_released(before)


def test_renderer_killed_mid_run_leaks_nothing_in_the_service(service: WinService) -> None:
    before = service.baseline_handles()
    service.assert_kill_releases(renderer(service, "pipe", "--hang-after", "5"), 6, before)


def test_bad_names_over_http_are_rejected_with_stable_codes(service: WinService) -> None:
    cases = {
        "local\\x": (400, "invalid_argument"),
        "Session\\1\\x": (400, "invalid_argument"),
        "/posix-style": (400, "invalid_argument"),
        f"Local\\missing-{secrets.token_hex(4)}": (404, "not_found"),
    }
    for name, (status, code) in cases.items():
        r = httpx.post(f"{service.url}/v2/interop/memory", json={"handle_type": "host_shm", "name": name}, timeout=30)
        assert r.status_code == status, (name, r.text)
        assert r.json()["code"] == code and "Traceback" not in r.text


def doc_examples() -> list[str]:
    text = (HERE.parents[1] / "docs" / "windows.md").read_text(encoding="utf-8")
    blocks = text.split("```python\n")[1:]
    return [b.split("```", 1)[0] for b in blocks]


@pytest.mark.parametrize("index", [0, 1], ids=["pipe", "http"])
def test_docs_renderer_examples_run_as_written(service: WinService, index: int) -> None:
    """docs/windows.md's renderers, run in their own process, with only the service's address
    and the object names made unique (the lane's service is not on the default port and pipe)."""
    code = doc_examples()[index]
    tag = secrets.token_hex(4)
    code = (code.replace("http://127.0.0.1:8000", service.url)
            .replace("IpcClient()", f"IpcClient({service.pipe!r})")
            .replace("Local\\\\game-", f"Local\\\\game-{tag}-"))
    before = service.baseline_handles()
    p = subprocess.run([sys.executable, "-c", code], stdin=subprocess.DEVNULL, capture_output=True,
                       text=True, timeout=300)
    assert p.returncode == 0, p.stdout + p.stderr
    service.assert_released(before)


def test_streaming_session_over_the_pipe_runs_every_frame_without_a_message(service: WinService) -> None:
    """The service waits on the renderer's fence itself (docs/streaming.md): the renderer only
    signals and waits, across processes, through the fences' wake semaphores."""
    before = service.baseline_handles()
    result = finish(renderer(service, "stream"))
    assert result == {"frames": FRAMES, "mismatches": 0, "seconds": result["seconds"]}
    assert service.metric("fenceline_interop_imported_handles") == 0
    assert service.metric("fenceline_stream_running_sessions") == 0
    service.assert_handles_back(before)
