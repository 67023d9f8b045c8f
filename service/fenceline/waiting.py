"""Adaptive spin-then-block waiting (docs/streaming.md, "Waiting").

A blocking wakeup across CPUs costs ~70 us on a small machine, more than a small model's run,
while spinning costs a core. A waiter spins only when the event it waits for has recently come
sooner than its budget: it keeps a moving average of observed waits (the frame interval minus
the work, for a renderer's frame loop) and spins for twice that, never past ``max_spin_ns``;
when waits are longer than the budget it blocks at once. Blocking inflates the observed waits
by the wakeup itself, so a blocked waiter probes with a full budget every ``PROBE_EVERY`` waits
and returns to spinning when the probe finds the event fast. A budget of zero always blocks.

Spinning is rationed per process by a :class:`SpinGate`: at most ``slots`` waiters spin at
once (by default half the CPUs this process may run on, at least one); the others block at
once instead of taking the cores that the producers they wait for need.
"""

from __future__ import annotations

import os
import threading
import time
from typing import Protocol

from fenceline import _native

_WAIT_TIMED_OUT = _native.WAIT_TIMED_OUT
PROBE_EVERY = 64
SPIN_SLACK_NS = 10_000


class _Waitable(Protocol):
    def wait(self, value: int, timeout_ns: int, spin_ns: int) -> int: ...


def default_spinners() -> int:
    """Half the CPUs this process may run on (sched affinity), at least one."""
    try:
        cpus = len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        cpus = os.cpu_count() or 1
    return max(1, cpus // 2)


class SpinGate:
    """At most ``slots`` concurrent spinners. Slots are plain locks taken without blocking, so
    entering costs one C call per slot tried and never waits."""

    def __init__(self, slots: int) -> None:
        if slots < 0:
            raise ValueError("spinner slots must not be negative")
        self._slots = tuple(threading.Lock() for _ in range(slots))

    @property
    def slots(self) -> int:
        return len(self._slots)

    def try_enter(self) -> threading.Lock | None:
        """A held slot (release it when the spin ends), or None when all are taken."""
        for slot in self._slots:
            if slot.acquire(False):
                return slot
        return None

    def spinning(self) -> int:
        return sum(s.locked() for s in self._slots)


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
    """The spin budget of one waiter (one fence wait loop, one socket). Not thread-safe: give
    each waiting thread its own."""

    __slots__ = ("max_spin_ns", "denied", "_avg_ns", "_blocked", "_probing", "_gate")

    def __init__(self, max_spin_ns: int, spin_gate: SpinGate | None = None) -> None:
        if max_spin_ns < 0:
            raise ValueError("max_spin_ns must not be negative")
        self.max_spin_ns = max_spin_ns
        self.denied = 0  # waits that blocked at once because every spinner slot was taken
        self._avg_ns: float | None = None
        self._blocked = 0
        self._probing = False
        self._gate = spin_gate

    @property
    def average_wait_ns(self) -> float:
        return self._avg_ns or 0.0

    def budget_ns(self) -> int:
        """How long the next wait should spin before it sleeps."""
        m = self.max_spin_ns
        if m == 0:
            return 0
        avg = self._avg_ns
        if avg is None:
            self._probing = True
            return m
        if avg <= m:
            # Generous against jitter: a miss costs a full wakeup (~70 us across CPUs), far
            # more than a few microseconds of extra spin on a hit.
            return int(min(m, 4 * avg + SPIN_SLACK_NS))
        self._blocked += 1
        if self._blocked >= PROBE_EVERY:
            self._blocked = 0
            self._probing = True
            return m
        return 0

    def observe(self, waited_ns: int, budget_ns: int = 0) -> None:
        """Feeds back how long the last wait took and the budget it was given."""
        if self._avg_ns is None or (self._probing and waited_ns <= budget_ns):
            self._avg_ns = float(waited_ns)
        else:
            self._avg_ns += (waited_ns - self._avg_ns) * 0.125
        self._probing = False

    def wait_fence(self, fence: _Waitable, value: int, timeout_ns: int = -1) -> int:
        """Waits for ``fence`` to reach ``value`` (``timeout_ns`` < 0: forever) and returns the
        native WAIT_* result. The spin runs as its own native call while this waiter holds a
        spinner slot; the slot is given back before the wait blocks on the futex, so a sleeping
        waiter never keeps another from spinning."""
        budget = self.budget_ns()
        t0 = time.perf_counter_ns()
        if budget:
            slot = (self._gate or _gate).try_enter()
            if slot is None:
                self.denied += 1
                budget = 0
            else:
                spin = budget if timeout_ns < 0 else min(budget, timeout_ns)
                try:
                    r = fence.wait(value, spin, spin)  # spins, never sleeps
                finally:
                    slot.release()
                if r != _WAIT_TIMED_OUT or 0 <= timeout_ns <= spin:
                    self.observe(time.perf_counter_ns() - t0, budget)
                    return r
                if timeout_ns >= 0:
                    timeout_ns = max(0, timeout_ns - (time.perf_counter_ns() - t0))
        r = fence.wait(value, timeout_ns, 0)
        self.observe(time.perf_counter_ns() - t0, budget)
        return r
