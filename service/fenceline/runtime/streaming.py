"""Streaming sessions: frames driven by the input fence alone, no message per frame
(docs/streaming.md).

A :class:`StreamWorker` owns one thread per running session and drives a backend's
:class:`StreamDriver` step by step: the host driver hands its frames to the run engine
(``HostSession.run_frames``), which waits on the input fence on the CPU (adaptive spin, then
futex, ended early when the worker pauses or stops), runs the model and signals the output
fence with the value it ran. A failed frame is still signalled, with the output fence's status
set to error, so a renderer waiting on it never stalls; the next good frame sets the status back
to live (the engine does, before it signals).

Backends with their own queues implement :class:`StreamDriver` to enqueue wait/run/signal per
value instead of waiting on the CPU (runtime/gpu_streaming.py: CUDA sessions), and register it
for their fence type with :func:`register_driver`.
"""

from __future__ import annotations

import contextlib
import logging
import threading
from abc import ABC, abstractmethod
from dataclasses import dataclass
from typing import Any, Literal

from fenceline import logs
from fenceline.errors import Conflict, DeviceLost, FencelineError, ModelError, Unsupported
from fenceline.metrics import Metrics
from fenceline.runtime.host_session import HostSession
from fenceline.runtime.session import Session
from fenceline.waiting import AdaptiveSpin

log = logging.getLogger("fenceline.streaming")

Mode = Literal["request", "streaming"]
Policy = Literal["latest", "every"]
State = Literal["running", "paused", "stopped", "failed"]

STATUS_LIVE, STATUS_ABANDONED, STATUS_ERROR = 0, 1, 2
# How long one step of a driver that waits in Python waits before it looks at its control flags
# again: the latency of pause and stop. The native wait cannot be interrupted by another thread,
# so waits come in slices. (A host session's frame waits in the run engine, which asks its
# ``halting`` flag between slices of its own, 0.1 s.)
SLICE_NS = 50_000_000
# An every-value session that falls this far behind drops the oldest values (counted as
# skipped) instead of running an unbounded backlog after one huge jump of the input fence.
MAX_BACKLOG = 1024
# How often a host session's worker counts the frames the run engine ran meanwhile, at most.
STEP_NS = 10_000_000


@dataclass
class StreamStats:
    frames: int = 0  # ran and signalled live
    skipped: int = 0
    failed: int = 0  # signalled with status error
    last_value: int = 0  # the last value signalled on the output fence
    last_error: str = ""


class StreamDriver(ABC):
    """One backend's way of turning input fence values into runs and output fence values.

    ``step`` is called in a loop on the session's worker thread; it handles the next value(s)
    or returns within ``slice_ns`` with nothing done, so pause and stop are seen. ``drain``
    returns once no frame is in flight. A GPU driver enqueues wait(input, N) / run / signal
    (output, N) on its stream for each value, keeps at most a bounded number in flight, and
    blocks in ``step`` only on the oldest frame's completion, never on the input fence.
    """

    def __init__(
        self, session: Session, policy: Policy, spin: AdaptiveSpin, stats: StreamStats,
        metrics: Metrics,
    ) -> None:
        self.session = session
        self.policy = policy
        self.spin = spin
        self.stats = stats
        self.metrics = metrics
        # Set while the worker pauses or stops: a wait in progress ends early.
        self.halting = threading.Event()

    @abstractmethod
    def step(self, slice_ns: int) -> None: ...

    def resume(self) -> None:  # noqa: B027 - optional hook
        """Called on the worker thread each time the session starts, before the first step."""

    def drain(self) -> None:  # noqa: B027 - the host driver has nothing in flight
        """Returns once every frame this driver started is signalled."""

    def abandon(self) -> None:  # noqa: B027 - fences without a status have nothing to tell
        """The worker ended on its own: tell the output fence's waiters, where the fence can."""

    def revive(self) -> None:  # noqa: B027 - likewise
        """Called by start, before it returns: undo what ``abandon`` told the output fence."""


class HostStreamDriver(StreamDriver):
    """Host timeline fences, any model: each frame is one entry into the run engine, which
    waits on the CPU, runs and signals; the policy is its ``backlog``."""

    def __init__(
        self, session: Session, policy: Policy, spin: AdaptiveSpin, stats: StreamStats,
        metrics: Metrics,
    ) -> None:
        super().__init__(session, policy, spin, stats, metrics)
        assert isinstance(session, HostSession)  # DRIVERS maps host_timeline here
        self.host = session
        if session.signal_fence.kind != "host_timeline":
            raise Unsupported(
                f"a streaming session with a host_timeline input fence needs a host_timeline "
                f"output fence, not {session.signal_fence.kind!r}"
            )
        self._out = session.signal_fence.handle
        # How far behind the input fence a frame may run: "latest" runs the newest value only.
        self._backlog = 1 if policy == "latest" else MAX_BACKLOG
        self._errored = True
        model = session.model.name
        self._m_skipped = metrics.stream_skipped.labels(model)
        self._m_failed = {r: metrics.stream_failed.labels(model, r) for r in
                          ("model_error", "input_error", "conflict")}

    def resume(self) -> None:
        self._errored = self._out.status != STATUS_LIVE

    def step(self, slice_ns: int) -> None:
        nxt = self._out.value + 1
        # The frames through the run engine, as every run: the waits, the model, the signals,
        # the session's counters and the frames' metrics, with no Python step between frames
        # (on two CPUs one cost a 64x64 frame 5-7 us). It comes back here at least every
        # STEP_NS, so the counters below follow the frames.
        frames, skipped, last, failure = self.host.run_frames(
            nxt, self._backlog, self.spin.native, self.halting, STEP_NS)
        if frames:
            self._skip(skipped)
            if self._errored:
                self._errored = False
                if self.stats.failed:
                    log.info("frame %d ran: the output fence is live again", last)
            self.stats.frames += frames
            self.stats.last_value = last
            nxt = last + 1
        if failure is None:
            return  # the worker pauses or stops, or STEP_NS passed
        if isinstance(failure, ModelError):
            self._fail(nxt, failure, "model_error")
        elif isinstance(failure, DeviceLost) and "signal_value" in failure.details:
            self._fail(nxt, failure, "input_error")  # the input fence reports an error
        elif isinstance(failure, Conflict):  # another signalled the output fence this far
            self._conflict(failure)
        else:
            raise failure  # the input fence abandoned, memory lost: the worker ends

    def _skip(self, skipped: int) -> None:
        if skipped:
            self.stats.skipped += skipped
            self._m_skipped.inc(skipped)

    def _fail(self, nxt: int, e: FencelineError, reason: str) -> None:
        """A frame that failed (the engine's error names it), signalled with status error."""
        target = int(e.details["signal_value"])
        message = e.message
        self._skip(target - nxt)
        if not self._errored:  # one line per run of failures, not one per frame
            log.warning("frame %d failed (%s), and so may the next ones until one runs: %s",
                        target, reason, message)
        # The status goes first, so a waiter woken by the value sees error, not live.
        self._out.set_status(STATUS_ERROR)
        self._errored = True
        self.stats.failed += 1
        self.stats.last_error = message
        self._m_failed[reason].inc()
        self._signal(target)

    def abandon(self) -> None:
        self._out.set_status(STATUS_ABANDONED)

    def revive(self) -> None:
        # Abandoned when the worker last ended on its own; live again before start returns,
        # so the renderer's next wait does not end on the old status.
        if self._out.status == STATUS_ABANDONED:
            self._out.set_status(STATUS_LIVE)

    def _signal(self, target: int) -> None:
        """A failed frame's value, signalled with the error status set."""
        try:
            self._out.signal(target)
        except Conflict as e:
            self._conflict(e)
            return
        self.stats.last_value = target
        self.session.counts.signalled(target)

    def _conflict(self, e: Conflict) -> None:
        self.stats.failed += 1
        self.stats.last_error = e.message
        self._m_failed["conflict"].inc()


DRIVERS: dict[str, type[StreamDriver]] = {"host_timeline": HostStreamDriver}


def register_driver(fence_type: str, driver: type[StreamDriver]) -> None:
    """Makes sessions whose input fence is of ``fence_type`` stream through ``driver``."""
    DRIVERS[fence_type] = driver


class StreamWorker:
    """The control of one streaming session: start, pause, stop, and its counters.

    The worker thread exists only while the session runs; pause and stop return after the
    frame in flight is signalled and the thread has ended. After stop the worker cannot start
    again (the runtime then releases the session)."""

    def __init__(
        self, session: Session, policy: Policy, max_spin_ns: int, metrics: Metrics,
        slice_ns: int = SLICE_NS,
    ) -> None:
        driver = DRIVERS.get(session.wait_fence.kind)
        if driver is None:
            raise Unsupported(
                f"sessions with a {session.wait_fence.kind!r} input fence cannot stream on this "
                f"build; streaming fence types: {', '.join(sorted(DRIVERS))}"
            )
        self.label = ""  # for thread names and logs: the session id's first digits
        self.owner = ""
        self.policy: Policy = policy
        self.spin = AdaptiveSpin(max_spin_ns)
        self.stats = StreamStats()
        self.metrics = metrics
        self.slice_ns = slice_ns
        self.state: State = "paused"
        self._driver: StreamDriver | None = driver(session, policy, self.spin, self.stats, metrics)
        self._thread: threading.Thread | None = None
        self._control = threading.Lock()

    def start(self) -> None:
        with self._control:
            if self.state == "stopped":
                raise Conflict("the streaming session is stopped")
            if self._thread is not None and self._thread.is_alive():
                return
            assert self._driver is not None  # only stop drops it
            self._driver.revive()
            self._driver.halting.clear()
            self.state = "running"
            self._thread = threading.Thread(
                target=self._loop, name=f"fenceline-stream-{self.label}", daemon=True
            )
            self.metrics.stream_running.inc()
            self._thread.start()

    def pause(self) -> None:
        with self._control:
            if self.state == "stopped":
                raise Conflict("the streaming session is stopped")
            self._join()
            if self.state == "running":
                self.state = "paused"

    def stop(self) -> None:
        """Ends the worker for good. Safe to call twice."""
        with self._control:
            self._join()
            self.state = "stopped"
            # The driver refers back to the session; dropping it breaks the cycle so the
            # session's views (and the renderer's mappings) go as soon as the runtime lets go.
            self._driver = None

    def _join(self) -> None:
        if self._driver is not None:
            self._driver.halting.set()
        if self._thread is not None:
            self._thread.join()
            self._thread = None

    def _loop(self) -> None:
        driver = self._driver
        assert driver is not None
        logs.owner.set(self.owner)  # this thread's context: every record it logs carries them
        logs.session_id.set(self.label)
        try:
            driver.resume()
            while not driver.halting.is_set():
                driver.step(self.slice_ns)
            driver.drain()
        except FencelineError as e:
            self._end(driver, e.message)
        except Exception as e:
            log.exception("streaming session %s failed", self.label)
            self._end(driver, f"internal error: {e}")
        finally:
            self.metrics.stream_running.dec()

    def _end(self, driver: StreamDriver, message: str) -> None:
        # The worker ended on its own (abandoned input, a broken fence): wake anyone waiting on
        # the output fence rather than leave them to their timeouts.
        self.state = "failed"
        self.stats.last_error = message
        log.warning("streaming session %s ended: %s", self.label, message)
        with contextlib.suppress(FencelineError):
            driver.abandon()

    def describe(self) -> dict[str, Any]:
        s = self.stats
        return {
            "state": self.state,
            "policy": self.policy,
            "frames": s.frames,
            "skipped": s.skipped,
            "failed": s.failed,
            "last_value": s.last_value,
            "last_error": s.last_error,
            "spin": {
                "max_us": self.spin.max_spin_ns / 1e3,
                "spinning": self.spin.spinning,
                "average_wait_us": round(self.spin.average_wait_ns / 1e3, 3),
                "denied": self.spin.denied,
            },
        }
