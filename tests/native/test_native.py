"""The native importer on its own: host memory, views, host fences across processes."""

from __future__ import annotations

import os
import struct
import subprocess
import sys
import textwrap
import threading
import time

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from fenceline import _native, errors
from fenceline.client import Fence, SharedFrame
from tests.support.waiting import wait_until

U64 = st.integers(min_value=0, max_value=2**64 - 1)


def shm_entries() -> set[str]:
    """This process's /dev/shm objects (the client puts its pid in each name): other tests and
    suites running beside this one create and unlink their own meanwhile."""
    return {n for n in os.listdir("/dev/shm") if f"-{os.getpid()}-" in n}


def test_creator_unlinks_named_memory_on_close() -> None:
    before = shm_entries()
    frame = SharedFrame(4096, named=True)
    assert frame.name is not None and frame.name[1:] in shm_entries()
    frame.close()
    frame.close()  # safe twice
    assert shm_entries() == before


def test_array_keeps_mapping_alive_after_close() -> None:
    frame = SharedFrame(64)
    a = frame.array(np.uint8, [64])
    a[:] = 7
    frame.close()
    assert int(a.sum()) == 7 * 64  # still mapped: the array owns a reference


def test_import_sees_writes_of_the_creator_without_copy() -> None:
    frame = SharedFrame(1024, named=True)
    try:
        imp = _native.HostMemory.open_shm(frame.name, 0, 0, False)
        view = imp.array(np.dtype(np.float32), [4], 16)
        frame.array(np.float32, [4], 16)[:] = [1, 2, 3, 4]
        assert view.tolist() == [1, 2, 3, 4]
        assert not view.flags.writeable  # read_only import
        imp.close()
    finally:
        frame.close()


def test_open_missing_shm_is_not_found() -> None:
    with pytest.raises(errors.NotFound):
        _native.HostMemory.open_shm("/fenceline-does-not-exist", 0, 0, True)


@pytest.mark.parametrize("name", ["", "/", "noslash", "/a/b", "/..", "/x" * 200, "/a b", "//"])
def test_shm_names_are_restricted(name: str) -> None:
    with pytest.raises(errors.InvalidArgument):
        _native.HostMemory.open_shm(name, 0, 0, True)


@given(offset=U64, size=U64)
def test_import_range_checks_never_overflow(offset: int, size: int) -> None:
    frame = SharedFrame(8192)
    try:
        fd = os.dup(frame.fd)
        if size != 0 and offset + size <= 8192 or size == 0 and offset < 8192:
            m = _native.HostMemory.from_fd(fd, offset, size, True)
            assert m.size == (size or 8192 - offset)
            m.close()
        else:
            with pytest.raises(errors.InvalidArgument):
                _native.HostMemory.from_fd(fd, offset, size, True)
    finally:
        frame.close()


@given(
    offset=U64,
    shape=st.lists(st.integers(min_value=-2, max_value=2**40), min_size=0, max_size=5),
)
def test_views_are_bounds_checked_against_the_mapping(offset: int, shape: list[int]) -> None:
    frame = SharedFrame(4096)
    try:
        n = 4
        for d in shape:
            n *= max(d, 0)
        ok = all(d >= 0 for d in shape) and offset % 4 == 0 and offset + n <= 4096
        if ok:
            v = _native.TensorView(frame.handle, offset, 4, shape, True)
            assert v.nbytes == n
        else:
            with pytest.raises(errors.InvalidArgument):
                _native.TensorView(frame.handle, offset, 4, shape, True)
    finally:
        frame.close()


def test_output_view_needs_writable_memory() -> None:
    frame = SharedFrame(4096, named=True)
    try:
        ro = _native.HostMemory.open_shm(frame.name, 0, 0, False)
        with pytest.raises(errors.InvalidArgument, match="read_write"):
            _native.TensorView(ro, 0, 4, [4], True)
        ro.close()
    finally:
        frame.close()


def test_fence_signal_is_monotonic() -> None:
    with Fence() as f:
        f.signal(5)
        with pytest.raises(errors.Conflict):
            f.signal(5)
        with pytest.raises(errors.Conflict):
            f.signal(4)
        assert f.value == 5


def test_fence_wait_times_out_then_sees_value() -> None:
    with Fence() as f:
        assert f.wait(1, timeout_s=0.02) is False
        f.signal(1)
        assert f.wait(1, timeout_s=0.02) is True


def test_open_rejects_a_page_that_is_not_a_fence() -> None:
    frame = SharedFrame(4096, named=True)
    try:
        with pytest.raises(errors.InvalidArgument, match="magic"):
            _native.HostFence.open_shm(frame.name)
    finally:
        frame.close()


def test_fence_wakes_a_waiter_in_another_process() -> None:
    """The futex is shared, not private: a signal here wakes a waiter in a child process."""
    with Fence(named=True) as f:
        child = subprocess.Popen(
            [sys.executable, "-c", textwrap.dedent(f"""
                from fenceline import _native
                f = _native.HostFence.open_shm({f.name!r})
                print("waiting", flush=True)
                r = f.wait(3, 10_000_000_000, 0)
                print("result", r, f.value, flush=True)
            """)],
            stdout=subprocess.PIPE, text=True,
        )
        assert child.stdout is not None
        assert child.stdout.readline().strip() == "waiting"
        f.signal(1)
        f.signal(3)
        out, _ = child.communicate(timeout=10)
        assert out.split() == ["result", str(_native.WAIT_REACHED), "3"]


@pytest.mark.skipif(sys.platform == "win32", reason="builds its page in a memfd (Linux)")
@pytest.mark.parametrize("flags", [1, 0])
def test_a_sleeper_counts_itself_while_it_sleeps_and_is_woken_on_either_kind_of_page(
    flags: int,
) -> None:
    """docs/fences.md, "Signal": a sleeper counts itself in ``waiters`` while it sleeps. On a
    page marked counted (flags 1, fenceline's own) a signal with no sleeper skips the wake; a
    plain page (flags 0, another implementation's) is woken always. Both wake a sleeper, and
    neither wakes it before its value."""
    fd = os.memfd_create("counted-fence", os.MFD_CLOEXEC)
    os.ftruncate(fd, 4096)
    os.pwrite(fd, struct.pack("<IHHQII", 0x46544C46, 1, flags, 0, 0, 0), 0)
    reader = os.dup(fd)
    fence = _native.HostFence.from_fd(fd)
    try:
        def waiters() -> int:
            return int.from_bytes(os.pread(reader, 4, 24), "little")

        assert waiters() == 0
        fence.signal(1)  # nobody sleeps: on a counted page no wake at all
        result: list[int] = []
        t = threading.Thread(target=lambda: result.append(fence.wait(3, 10_000_000_000, 0)))
        t.start()
        wait_until(lambda: waiters() == 1, 10, what="the sleeper counted in waiters")
        fence.signal(2)
        time.sleep(0.05)
        assert t.is_alive() and waiters() == 1  # woken, checked, asleep again
        fence.signal(3)
        t.join(10)
        assert result == [_native.WAIT_REACHED] and waiters() == 0
    finally:
        fence.close()
        os.close(reader)


def test_abandoned_status_ends_a_wait() -> None:
    with Fence() as f:
        result: list[int] = []
        t = threading.Thread(target=lambda: result.append(f.handle.wait(10, 5_000_000_000, 0)))
        t.start()
        time.sleep(0.05)
        f.handle.set_status(1)
        t.join(5)
        assert result == [_native.WAIT_ABANDONED]


def test_wait_releases_the_gil() -> None:
    """Only Python code that needs the interpreter lock can end the wait: a wait that held the
    lock would time out instead."""
    with Fence() as f:
        waiting = threading.Event()

        def signal_when_waiting() -> None:
            waiting.wait(60)
            time.sleep(0.05)  # into the native wait, most likely; either way it must end
            f.signal(1)

        t = threading.Thread(target=signal_when_waiting)
        t.start()
        waiting.set()
        got = f.handle.wait(1, 60_000_000_000, 0)
        t.join()
        assert got == _native.WAIT_REACHED


def test_fence_page_layout_matches_the_spec() -> None:
    """docs/fences.md: magic @0, version @4, flags @6, value @8, seq @16, status @20."""
    with Fence(named=True) as f:
        m = _native.HostMemory.open_shm(f.name, 0, 0, False)
        page = m.array(np.dtype(np.uint8), [4096]).tobytes()
        f.signal(0x1122334455667788)
        page2 = m.array(np.dtype(np.uint8), [4096]).tobytes()
        assert int.from_bytes(page[0:4], "little") == 0x46544C46
        assert int.from_bytes(page[4:6], "little") == 1
        assert int.from_bytes(page[6:8], "little") == 1  # waiters counted
        assert int.from_bytes(page2[8:16], "little") == 0x1122334455667788
        assert int.from_bytes(page2[16:20], "little") == int.from_bytes(page[16:20], "little") + 1
        assert int.from_bytes(page2[20:24], "little") == 0
        m.close()
