"""Streaming on CUDA sessions (docs/streaming.md, "GPU sessions"): the worker enqueues, per
input value N, wait(input >= N) / the model / signal(output := N) on the session's CUDA stream,
keeps up to ``DEPTH`` frames queued ahead of the renderer, and never waits on the CPU for the
input fence: the GPU does. Vulkan timeline semaphores (Linux) and D3D12 fences (Windows) go
through the same code; only the import differs (interop/vk_fence.py, interop/d3d12.py).

The service cannot read a GPU fence's value (CUDA has no query for an imported semaphore), so it
cannot skip to the newest value: a GPU streaming session runs every value (policy ``every``).
What it can see is when the stream has passed a completion event; :class:`InFlight` decides
which enqueued frames one event covers and when to record the next one, so that the stream
always has frames queued while the worker waits on the CPU for the oldest ones.
"""

from __future__ import annotations

import logging
import time

from fenceline.errors import Conflict, ModelError, Unsupported
from fenceline.metrics import Metrics
from fenceline.runtime.cuda_session import DRAIN_GRACE_NS, CudaSession
from fenceline.runtime.session import RunResult, Session
from fenceline.runtime.streaming import Policy, StreamDriver, StreamStats
from fenceline.waiting import AdaptiveSpin

log = logging.getLogger("fenceline.streaming")

# Frames enqueued and not yet seen complete, at most. Every frame of a session reads and writes
# the same bound memory, so more would only queue waits for values the renderer cannot have
# produced yet (it paces itself on the output fence); 4 keeps 2 queued while the worker waits
# for the other 2.
DEPTH = 4

GPU_FENCE_KINDS: tuple[str, ...] = ("vk_timeline_opaque_fd", "d3d12_fence")

# Input fences a CUDA wait may be enqueued on only once the signal it waits for has been issued:
# "the signal must be issued before this wait can be issued" (CUDA Programming Guide, Direct3D 12
# Interoperability, "Signaling/Waiting on Imported Synchronization Objects"). A streaming session
# enqueues its waits ahead of the renderer's signals, so it cannot run on them; a RUN sent after
# the renderer's ID3D12CommandQueue::Signal can (docs/windows.md). Vulkan timeline semaphores
# allow wait-before-signal (the Vulkan specification's timeline semaphores).
SIGNAL_BEFORE_WAIT_KINDS: tuple[str, ...] = ("d3d12_fence",)


def check_gpu_policy(policy: Policy) -> None:
    """A GPU streaming session runs every value; anything else is refused before a session is
    built."""
    if policy != "every":
        raise Unsupported(
            f'a streaming session on GPU fences runs every input value (policy "every"), not '
            f"{policy!r}: the service never reads a GPU fence on the CPU, so it cannot skip to "
            "the newest value; create it with policy \"every\""
        )


def check_gpu_stream(policy: Policy, wait_kind: str) -> None:
    """Refuses a GPU streaming session it cannot run: a policy other than "every", or an input
    fence that CUDA may wait on only after its signal was issued."""
    check_gpu_policy(policy)
    if wait_kind in SIGNAL_BEFORE_WAIT_KINDS:
        raise Unsupported(
            f"a streaming session cannot wait on a {wait_kind}: CUDA requires the D3D12 signal "
            "of a value to be issued before a wait for it is enqueued (CUDA Programming Guide, "
            "Direct3D 12 interoperability), and a streaming session enqueues its waits ahead of "
            "the renderer; send RUN_ASYNC after ID3D12CommandQueue::Signal instead "
            "(docs/windows.md)"
        )


class InFlight:
    """The frames enqueued on one stream whose completion is not seen yet, and which of them
    the one completion event covers.

    ``covered`` frames were enqueued before the event was last recorded; ``after`` ones since.
    The event is recorded when nothing is covered and ``half`` frames wait after it, so while
    the worker waits for the covered frames, the ones after them are queued on the GPU: the
    stream never runs dry for want of the CPU, as long as the worker wakes within ``half``
    frames. Pure bookkeeping: the driver does the CUDA calls it asks for."""

    def __init__(self, depth: int = DEPTH) -> None:
        if depth < 1:
            raise ValueError("depth is at least 1")
        self.depth = depth
        self.half = max(1, depth // 2)
        self.covered: list[int] = []
        self.after: list[int] = []

    @property
    def full(self) -> bool:
        return len(self.covered) + len(self.after) >= self.depth

    @property
    def waiting(self) -> bool:
        """Whether an event is recorded that covers frames not yet seen complete."""
        return bool(self.covered)

    def enqueued(self, value: int) -> bool:
        """Notes frame ``value`` as enqueued; True: record the event now, after it."""
        self.after.append(value)
        return self._cut()

    def reached(self) -> tuple[list[int], bool]:
        """The recorded event completed: the frames it covered, oldest first, and whether to
        record the event again now."""
        done, self.covered = self.covered, []
        return done, self._cut()

    def cover_all(self) -> bool:
        """Before a drain: every frame is to be covered by an event recorded now; True if
        there is any frame to record it for."""
        self.covered += self.after
        self.after = []
        return bool(self.covered)

    def _cut(self) -> bool:
        if not self.covered and len(self.after) >= self.half:
            self.covered, self.after = self.after, []
            return True
        return False


class CudaStreamDriver(StreamDriver):
    """GPU fences, CUDA sessions: enqueue per value, wait only for the oldest frames' event.

    A frame whose model fails is still signalled (its signal is enqueued after the failed
    launch), so the renderer never stalls; GPU fences have no error status, so it is reported
    in the session's ``stream.failed`` and ``last_error`` and in
    ``fenceline_stream_failed_frames_total{reason="model_error"}``."""

    def __init__(
        self, session: Session, policy: Policy, spin: AdaptiveSpin, stats: StreamStats,
        metrics: Metrics,
    ) -> None:
        super().__init__(session, policy, spin, stats, metrics)
        if not isinstance(session, CudaSession):
            raise Unsupported(
                f"a streaming session with a {session.wait_fence.kind!r} input fence needs GPU "
                "memory: a CUDA session"
            )
        check_gpu_policy(policy)
        self.cuda = session
        self.window = InFlight()
        self._next = 0
        self._failing = False
        # value -> (ns to enqueue it, whether the model ran) for the frames in the window
        self._frames: dict[int, tuple[int, bool]] = {}
        model = session.model.name
        self._m_frames = metrics.stream_series(model)  # counted: their times are the GPU's
        self._m_failed = metrics.stream_failed.labels(model, "model_error")

    def resume(self) -> None:
        # Frames still queued from before a pause stay in the window: they complete when the
        # input fence reaches them, and the next value follows the last one enqueued.
        self._next = self.cuda.signal_fence.enqueued_signal + 1

    def step(self, slice_ns: int) -> None:
        if not self.window.full:
            self._enqueue_next()
            return
        self._wait_oldest(slice_ns)

    def drain(self) -> None:
        """Covers every queued frame with one event and waits up to DRAIN_GRACE_NS for it. Frames
        whose input has not arrived by then stay queued on the GPU and complete once it does
        (a GPU wait cannot be taken back); the next start keeps counting them."""
        if self.window.cover_all():
            self.cuda.checkpoint()
            if not self._wait_oldest(DRAIN_GRACE_NS):
                log.info("worker ended with %d frames still queued on the GPU, for input values "
                         "up to %d", len(self.window.covered), self.window.covered[-1])

    def _enqueue_next(self) -> None:
        value = self._next
        self._next += 1
        entry = self.cuda.frame_entry
        if entry is None:
            raise Conflict("the session is closed")
        try:
            # Through the run engine, as every run: it admits and counts the frame and calls
            # CudaSession.enqueue_frame, the session's body (Runtime._register).
            self._frames[value] = (RunResult(*entry(value)).infer_ns, True)
        except ModelError as e:
            self._frames[value] = (0, False)
            self._fail(value, e.message)
        else:
            if self._failing:
                log.info("frame %d enqueued: the model runs again", value)
                self._failing = False
        if self.window.enqueued(value):
            self.cuda.checkpoint()

    def _wait_oldest(self, timeout_ns: int) -> bool:
        if not self.window.waiting:
            return True
        if not self.cuda.checkpoint_reached(timeout_ns, self.spin.max_spin_ns):
            return False
        end = time.perf_counter_ns()
        done, record = self.window.reached()
        if record:
            self.cuda.checkpoint()
        ran = 0
        for value in done:
            took, ok = self._frames.pop(value, (0, False))
            if ok:
                ran += 1
                # The status page's record: no request waited and the service never sees the
                # input arrive, so wait is 0 and infer and total are the time to enqueue.
                self.session.counts.note(end, value, 0, took, took)
        self.stats.frames += ran
        self.stats.last_value = done[-1]
        if ran:
            self._m_frames.count(ran)
        return True

    def _fail(self, value: int, message: str) -> None:
        if not self._failing:  # one line per run of failures, not one per frame
            log.warning("frame %d failed (model_error), and so may the next ones until one "
                        "runs; its output fence value is signalled all the same: %s",
                        value, message)
        self._failing = True
        self.stats.failed += 1
        self.stats.last_error = message
        self._m_failed.inc()
