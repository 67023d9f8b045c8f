"""Adaptive spin-then-block waiting (docs/streaming.md, "Waiting").

On an idle small machine a blocking wakeup across CPUs costs ~70 us, more than a small model's
run, and spinning wins; on a loaded one the wakeup is cheap and a spinner only keeps the CPU
from the thread it waits for. Neither can be known in advance, so each waiter measures both:
it uses whichever of "spin, then block" and "block at once" has recently made its waits
shorter, re-checks the other now and then, and never spins when its events come later than the
spin budget (a 60 fps renderer). A budget of zero always blocks.

Spinning is rationed per process by a :class:`SpinGate`: at most ``slots`` waiters spin at
once (by default half the CPUs this process may run on, at least one); the others block at
once instead of taking the cores that the producers they wait for need. A slot is held through
a spin, never through a block.

The rule has one home, native/common/spin_rule.h: the run engine's fence waits, the service's
native receive, the Python IPC client's replies (``_native.ClientSocket``) and the C client
follow it in C, and :class:`AdaptiveSpin` is that rule (``_native.ReceiveSpin``) for waiters
that are Python calls already (a renderer's :meth:`Fence.wait <fenceline.client.Fence.wait>`)
and for a streaming worker, whose frames wait in the run engine by its rule (``native``).
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from typing import Protocol

from fenceline import _native

_WAIT_TIMED_OUT = _native.WAIT_TIMED_OUT
# The rule's constants, read from its one home (native/common/spin_rule.h).
WINDOW_SHIFT: int = _native.SPIN_WINDOW_SHIFT  # exploration windows of 2.1 ms ...
WINDOWS_PER_PERIOD: int = _native.SPIN_WINDOWS_PER_PERIOD  # ... one in every 16 (every 34 ms)


class Flag(Protocol):
    """What a long wait asks, between its slices, whether it must end: a ``threading.Event``,
    the service's shutdown flag (``_native.Shutdown``, ``Runtime.closing``) or a :class:`Cancel`."""

    def is_set(self) -> bool: ...


class Cancel:
    """Ends a long wait early: when the service shuts down (``closing``) or, for a wait done
    for one client, when ``gone()`` says that client is no longer there. ``run_options``:
    onnxruntime's RunOptions for that client's model runs (None: none), whose terminate flag
    ends a run in flight once the client is gone (fenceline.ipc.abandon)."""

    def __init__(self, closing: Flag, gone: Callable[[], bool],
                 run_options: object = None) -> None:
        self.closing = closing
        self._gone = gone
        self.run_options = run_options

    def is_set(self) -> bool:
        return self.closing.is_set() or self._gone()

    def reason(self) -> str:
        if self.closing.is_set():
            return "the service is shutting down"
        return "the client went away while its run waited"


class _Waitable(Protocol):
    def wait(self, value: int, timeout_ns: int, spin_ns: int) -> int: ...


def default_spinners() -> int:
    """``$FENCELINE_MAX_SPINNERS`` (renderers and the service alike; 0: never spin), else half
    the CPUs this process may run on (sched affinity), at least one."""
    explicit = os.environ.get("FENCELINE_MAX_SPINNERS", "").strip()
    if explicit.isdigit():
        return int(explicit)
    try:
        cpus = len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        cpus = os.cpu_count() or 1
    return max(1, cpus // 2)


class SpinSlot:
    """A held spinner slot: ``release()`` gives it back."""

    __slots__ = ("release",)

    def __init__(self, release: Callable[[], None]) -> None:
        self.release = release


class SpinGate:
    """At most ``slots`` concurrent spinners, counted natively so that waits done in native
    code (the IPC connection's receive, docs/ipc.md "The run path") share the count. Entering
    is one C call and never waits."""

    def __init__(self, slots: int) -> None:
        if slots < 0:
            raise ValueError("spinner slots must not be negative")
        self.native = _native.SpinGate(slots)
        self._slot = SpinSlot(self.native.leave)

    @property
    def slots(self) -> int:
        return int(self.native.slots)

    def try_enter(self) -> SpinSlot | None:
        """A held slot (release it when the spin ends), or None when all are taken."""
        return self._slot if self.native.try_enter() else None

    def spinning(self) -> int:
        return int(self.native.spinning)


_gate = SpinGate(default_spinners())


def gate() -> SpinGate:
    """This process's gate; every AdaptiveSpin without its own gate uses it."""
    return _gate


def set_spinners(slots: int | None) -> SpinGate:
    """Replaces the process gate (None: the default for this machine; 0: nobody spins).
    Waits in progress finish under the old gate."""
    global _gate
    _gate = SpinGate(default_spinners() if slots is None else slots)
    return _gate


class AdaptiveSpin:
    """The spin budget of one waiter (one fence wait loop, one socket), by the one spin rule
    (native/common/spin_rule.h, through ``_native.ReceiveSpin``). Not thread-safe: give each
    waiting thread its own.

    The rule keeps two moving averages of how long its waits took, one for waits that spun
    first and one for waits that blocked at once, and uses whichever has been faster. During
    one window of ``2**WINDOW_SHIFT`` ns in every ``WINDOWS_PER_PERIOD`` of the monotonic clock
    it uses the other way, to keep both averages current, and decides again when the window
    ends. The windows come from the system-wide clock, so a renderer and the service, both
    waiting on each other, try the other way at the same time: spinning pays only when both
    sides spin, which two waiters exploring at different times would never see. Spinning is
    chosen only while spun waits average within the budget, and the budget follows them:
    ``min(max_spin_ns, 4 * average + 10 us)``. ``clock``: CLOCK_MONOTONIC in ns (None: the
    native clock's, one call fewer).
    """

    __slots__ = ("gate", "clock", "native")

    def __init__(
        self, max_spin_ns: int, spin_gate: SpinGate | None = None,
        clock: Callable[[], int] | None = None,
    ) -> None:
        if max_spin_ns < 0:
            raise ValueError("max_spin_ns must not be negative")
        # The rule's state, for native waits by this rule too (a streaming frame's in the run
        # engine: runtime/streaming.py).
        self.native = _native.ReceiveSpin(max_spin_ns)
        self.gate = spin_gate  # None: the process gate
        self.clock = clock

    @property
    def denied(self) -> int:
        """Waits that blocked at once because every spinner slot was taken (native waits by
        this rule included)."""
        return int(self.native.denied)

    @property
    def max_spin_ns(self) -> int:
        return int(self.native.max_spin_ns)

    @property
    def average_wait_ns(self) -> float:
        """The moving average of the waits of the way now preferred."""
        return float(self.native.average_wait_ns)

    @property
    def spinning(self) -> bool:
        """Whether spinning is preferred now."""
        return bool(self.native.spinning) and self.max_spin_ns > 0

    def budget_ns(self) -> int:
        """How long the next wait should spin before it sleeps."""
        return int(self.native.budget_ns(-1 if self.clock is None else self.clock()))

    def observe(self, waited_ns: int, budget_ns: int = 0) -> None:
        """Feeds back how long the last wait took and the budget it was given."""
        self.native.observe(waited_ns, budget_ns)

    def _slot(self) -> SpinSlot | None:
        """A spinner slot to hold while this wait spins (release it before blocking), or
        None, counted in ``denied``: every slot is taken, so this wait blocks at once."""
        slot = (self.gate or _gate).try_enter()
        if slot is None:
            self.native.denied += 1
        return slot

    def wait_fence(
        self, fence: _Waitable, value: int, timeout_ns: int = -1,
        sleep: Callable[[int, int], int] | None = None,
    ) -> int:
        """Waits for ``fence`` to reach ``value`` (``timeout_ns`` < 0: forever) and returns the
        native WAIT_* result. The spin runs as its own native call while this waiter holds a
        spinner slot; the slot is given back before the wait blocks on the futex, so a sleeping
        waiter never keeps another from spinning. ``sleep(value, timeout_ns)``, when given, does
        the blocking part instead of one plain native wait."""
        budget = self.budget_ns()
        t0 = time.perf_counter_ns()
        if budget:
            slot = self._slot()
            if slot is None:
                budget = 0
            else:
                spin = budget if timeout_ns < 0 else min(budget, timeout_ns)
                try:
                    r = fence.wait(value, spin, spin)  # spins, never sleeps
                finally:
                    slot.release()
                if r != _WAIT_TIMED_OUT:
                    self.observe(time.perf_counter_ns() - t0, budget)
                    return r
                if 0 <= timeout_ns <= spin:
                    return r
                if timeout_ns >= 0:
                    timeout_ns = max(0, timeout_ns - (time.perf_counter_ns() - t0))
        r = fence.wait(value, timeout_ns, 0) if sleep is None else sleep(value, timeout_ns)
        if r != _WAIT_TIMED_OUT:  # a timeout says how long nothing came, not how fast it comes
            self.observe(time.perf_counter_ns() - t0, budget)
        return r
