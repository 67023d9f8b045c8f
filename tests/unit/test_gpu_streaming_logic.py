"""The decisions of GPU streaming that need no GPU (runtime/gpu_streaming.py): which frames one
completion event covers and when it is recorded, which policies a CUDA session streams with,
and which driver each fence kind gets. The GPU runs are tests/gpu/test_gpu_streaming.py."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from fenceline import _native, waiting
from fenceline.errors import Conflict, Unsupported
from fenceline.metrics import Metrics
from fenceline.runtime import backends
from fenceline.runtime.gpu_streaming import (
    DEPTH,
    GPU_FENCE_KINDS,
    CudaStreamDriver,
    InFlight,
    check_gpu_policy,
    check_gpu_stream,
)
from fenceline.runtime.service import _python_body
from fenceline.runtime.session import RunResult
from fenceline.runtime.streaming import DRIVERS, HostStreamDriver


def test_the_first_event_is_recorded_after_half_the_depth_and_the_rest_queue_behind_it() -> None:
    w = InFlight(4)
    assert w.enqueued(1) is False
    assert w.enqueued(2) is True  # record now: it covers 1 and 2
    assert w.covered == [1, 2] and w.waiting
    assert w.enqueued(3) is False and w.enqueued(4) is False
    assert w.full and w.after == [3, 4]
    done, record = w.reached()
    assert done == [1, 2] and record is True  # 3 and 4 queued while the worker waited
    assert w.covered == [3, 4] and not w.full


def test_a_depth_of_one_records_after_every_frame() -> None:
    w = InFlight(1)
    for v in range(1, 5):
        assert w.enqueued(v) is True and w.full
        assert w.reached() == ([v], False)


def test_a_drain_covers_every_queued_frame_with_one_event() -> None:
    w = InFlight(4)
    w.enqueued(1)
    w.enqueued(2)
    w.enqueued(3)
    assert w.cover_all() is True
    assert w.covered == [1, 2, 3] and w.after == []
    assert w.reached() == ([1, 2, 3], False)
    assert InFlight(4).cover_all() is False  # nothing queued: no event to record


def test_a_depth_below_one_is_refused() -> None:
    with pytest.raises(ValueError, match="at least 1"):
        InFlight(0)


@given(depth=st.integers(1, 16), frames=st.integers(1, 200),
       slow=st.lists(st.booleans(), min_size=1, max_size=50))
def test_the_window_stays_bounded_completes_every_frame_in_order_and_keeps_the_stream_fed(
    depth: int, frames: int, slow: list[bool]
) -> None:
    """The driver's loop with a GPU that completes the covered frames whenever asked (``slow``
    says when the worker's wait times out instead): at most ``depth`` in flight, each frame
    seen complete once and in order, an event recorded whenever frames are covered, and while
    the worker waits with a full window, frames are queued behind the ones it waits for."""
    w = InFlight(depth)
    timeouts = iter(slow)
    nxt, seen, recorded = 1, [], False
    while len(seen) < frames:
        if not w.full and nxt <= frames:
            if w.enqueued(nxt):
                recorded = True
            nxt += 1
        elif w.waiting:
            assert recorded
            if depth >= 2 and w.full:
                assert w.after, "the stream would run dry while the worker waits"
            if next(timeouts, False):
                continue  # the wait timed out: nothing changes
            done, recorded = w.reached()
            seen += done
        else:  # the last frames, fewer than half the depth: a drain covers them
            recorded = w.cover_all()
            assert recorded
        assert len(w.covered) + len(w.after) <= depth
    assert seen == list(range(1, frames + 1))


def test_gpu_streaming_runs_every_value_only() -> None:
    check_gpu_policy("every")
    with pytest.raises(Unsupported) as e:
        check_gpu_policy("latest")
    assert 'policy "every"' in e.value.message and "never reads a GPU fence" in e.value.message


def test_cuda_sessions_refuse_the_latest_policy_before_a_session_is_built() -> None:
    backends.Backend("cuda", "cuda:0").check_streaming("every", "vk_timeline_opaque_fd")
    with pytest.raises(Unsupported):
        backends.Backend("cuda", "cuda:0").check_streaming("latest", "vk_timeline_opaque_fd")
    backends.Backend("host", "").check_streaming("latest", "host_timeline")
    backends.Backend("host", "").check_streaming("every", "host_timeline")


def test_a_streaming_session_never_waits_on_a_d3d12_fence_before_its_signal_was_issued() -> None:
    # CUDA's D3D12 interop: the D3D12 signal must be issued before the CUDA wait on it; a
    # streaming session would enqueue its waits ahead of the renderer's signals.
    with pytest.raises(Unsupported) as e:
        backends.Backend("cuda", "cuda:0").check_streaming("every", "d3d12_fence")
    assert "issued before" in e.value.message and "RUN_ASYNC" in e.value.message
    with pytest.raises(Unsupported):
        check_gpu_stream("every", "d3d12_fence")
    check_gpu_stream("every", "vk_timeline_opaque_fd")  # Vulkan timelines wait before signal


def test_each_fence_kind_streams_through_its_backends_driver() -> None:
    assert set(GPU_FENCE_KINDS) == {"vk_timeline_opaque_fd", "d3d12_fence"}
    for kind in GPU_FENCE_KINDS:
        assert DRIVERS[kind] is CudaStreamDriver
    assert DRIVERS["host_timeline"] is HostStreamDriver
    assert DEPTH >= 2  # below 2 the stream runs dry at every event


class Enqueues:
    """A CUDA session's frame body, recorded: what the run engine hands it."""

    def __init__(self) -> None:
        self.values: list[int] = []
        self.device_label = "cuda:0"

    def enqueue_frame(self, value: int) -> int:
        self.values.append(value)
        return 7_000


def test_a_streaming_cuda_frame_enters_the_run_engine_which_calls_its_enqueue() -> None:
    """A streaming CUDA session's body as Runtime._register hands it to the engine: each frame
    its driver enters is admitted and counted there, then enqueued by the session (no model
    runs here); a client's RUN of that session is refused before the body."""
    table = _native.RunTable(_native.Shutdown(), 60_000, 10_000, 0, 4)
    session = Enqueues()
    sid = "ab" * 16
    table.add(bytes.fromhex(sid), _native.SessionRunner.python(
        "owner", _python_body(session, 0, Metrics(), True), None, True))  # type: ignore[arg-type]
    for value in (1, 2):
        got = RunResult(*table.run("owner", sid, value, value, None, waiting.gate().native,
                                   asynchronous=True, stream=True))
        assert (got.signal_value, got.infer_ns) == (value, 7_000)
    with pytest.raises(Conflict, match="this session streams"):
        table.run("owner", sid, 3, 3, None, waiting.gate().native)
    assert session.values == [1, 2]
    assert table.counts() == {"answered": 2, "failed": 1, "waited": 0}
