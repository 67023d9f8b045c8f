"""Named sections and host timeline fences on Windows, across separate Windows processes."""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest

from fenceline import _native
from fenceline.errors import Conflict, InvalidArgument, NotFound
from fenceline.interop.capabilities import capabilities

PEER = Path(__file__).with_name("win_peer.py")


def peer(*args: str) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, str(PEER), *args], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT, text=True,
    )


def test_capabilities_report_linux_only_kinds_false() -> None:
    caps = capabilities()
    assert caps["memory"]["host_shm"] is True
    assert caps["fences"]["host_timeline"] is True
    for kind in ("host_fd", "opaque_fd", "cuda_ipc"):
        assert caps["memory"][kind] is False
    assert caps["fences"]["vk_timeline_opaque_fd"] is False
    assert _native.PLATFORM == "win32"


def test_section_made_by_another_process_is_mapped_by_name(unique: str) -> None:
    p = peer("hold", f"Local\\{unique}-frame", "65536", f"Local\\{unique}-fence")
    try:
        assert p.stdout is not None and p.stdout.readline().strip() == "ready"
        mem = _native.HostMemory.open_shm(f"Local\\{unique}-frame", 0, 0, False)
        assert mem.size == 65536
        assert list(mem.array(np.dtype("u1"), [4])) == [1, 2, 3, 4]
        assert not mem.array(np.dtype("u1"), [4]).flags.writeable
        fence = _native.HostFence.open_shm(f"Local\\{unique}-fence")
        assert fence.value == 0
    finally:
        p.communicate("quit\n", timeout=60)
    assert p.returncode == 0


def test_fence_signalled_in_another_process_wakes_a_sleeping_waiter(unique: str) -> None:
    name = f"Local\\{unique}-fence"
    fence = _native.HostFence.create_shm(name)
    p = peer("signal", name, "7", "0.5")
    try:
        # No spin: the waiter sleeps on the wake semaphore until the other process signals.
        assert fence.wait(7, 60_000_000_000, 0) == _native.WAIT_REACHED
        assert fence.value == 7
    finally:
        p.communicate(timeout=60)
    assert p.returncode == 0


def test_fence_wait_times_out_when_nobody_signals(unique: str) -> None:
    fence = _native.HostFence.create_shm(f"Local\\{unique}-fence")
    assert fence.wait(1, 50_000_000, 0) == _native.WAIT_TIMED_OUT


@pytest.mark.parametrize(
    ("name", "fragment"),
    [
        ("local\\x", "must be written exactly 'Local\\'"),
        ("GLOBAL\\x", "must be written exactly 'Global\\'"),
        ("Session\\1\\x", "reserved"),
        ("plain-name", "Local\\NAME or Global\\NAME"),
        ("/posix-name", "Local\\NAME or Global\\NAME"),
        ("Local\\a\\b", "no '\\'"),
        ("Local\\", "Local\\NAME or Global\\NAME"),
        ("Local\\" + "x" * 241, "at most 240"),
    ],
)
def test_bad_section_names_are_rejected_with_a_clear_message(name: str, fragment: str) -> None:
    with pytest.raises(InvalidArgument, match=None) as e:
        _native.HostMemory.open_shm(name, 0, 0, True)
    assert fragment in str(e.value)


def test_missing_section_is_not_found(unique: str) -> None:
    with pytest.raises(NotFound):
        _native.HostMemory.open_shm(f"Local\\{unique}-missing", 0, 0, True)


def test_name_of_another_object_type_is_rejected(unique: str) -> None:
    fence = _native.HostFence.create_shm(f"Local\\{unique}-f")
    with pytest.raises(InvalidArgument, match="another kind of object"):
        _native.HostMemory.open_shm(f"Local\\{unique}-f.wake", 0, 0, True)
    fence.close()


def test_creator_refuses_a_squatted_name(unique: str) -> None:
    p = peer("hold", f"Local\\{unique}-frame", "4096", f"Local\\{unique}-fence")
    try:
        assert p.stdout is not None and p.stdout.readline().strip() == "ready"
        with pytest.raises(Conflict, match="already exists"):
            _native.HostMemory.create_shm(f"Local\\{unique}-frame", 4096)
        with pytest.raises(Conflict, match="already exists"):
            _native.HostFence.create_shm(f"Local\\{unique}-fence")
    finally:
        p.communicate("quit\n", timeout=60)


def test_names_die_with_their_last_handle(unique: str) -> None:
    name = f"Local\\{unique}-frame"
    mem = _native.HostMemory.create_shm(name, 4096)
    mem.close()
    deadline = time.monotonic() + 5
    while True:
        try:
            _native.HostMemory.open_shm(name, 0, 0, True).close()
        except NotFound:
            break
        assert time.monotonic() < deadline
        time.sleep(0.05)


def test_view_past_the_end_of_a_section_is_rejected(unique: str) -> None:
    mem = _native.HostMemory.create_shm(f"Local\\{unique}-frame", 4096)
    with pytest.raises(InvalidArgument, match="outside"):
        _native.TensorView(mem, 4000, 4, [100], False)
    with pytest.raises(InvalidArgument, match="outside"):
        _native.HostMemory.open_shm(f"Local\\{unique}-frame", 4096 - 8, 4096, True)
