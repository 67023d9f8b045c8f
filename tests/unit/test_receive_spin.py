"""The native receive spin (the IPC connection's wait in native code) decides as
fenceline.waiting.AdaptiveSpin does: fed the same waits, both give the same budgets."""

from __future__ import annotations

import random

import pytest

from fenceline import _native
from fenceline.waiting import WINDOW_SHIFT, WINDOWS_PER_PERIOD, AdaptiveSpin, SpinGate

OUTSIDE = 3 << WINDOW_SHIFT  # a clock reading outside the exploration windows
INSIDE = WINDOWS_PER_PERIOD << WINDOW_SHIFT  # one inside a window

pytestmark = pytest.mark.skipif(not hasattr(_native, "ReceiveSpin"), reason="no native spin")


def test_native_and_python_spins_choose_alike() -> None:
    rng = random.Random(7)
    for max_spin in (0, 50_000, 100_000):
        clock = [OUTSIDE]
        python = AdaptiveSpin(max_spin, SpinGate(1), clock=lambda c=clock: c[0])
        native = _native.ReceiveSpin(max_spin)
        seen: set[tuple[bool, bool]] = set()
        for i in range(2000):
            # Phases: waits the spin catches, waits longer than any spin, and a window.
            clock[0] = INSIDE if i % 300 < 20 else OUTSIDE + i
            budget = python.budget_ns()
            assert native.budget_ns(clock[0]) == budget, (max_spin, i)
            slow = (i // 500) % 2 == 1
            waited = rng.randint(150_000, 900_000) if slow else rng.randint(2_000, 30_000)
            python.observe(waited, budget)
            native.observe(waited, budget)
            assert native.spinning == python.spinning, (max_spin, i)
            seen.add((native.spinning, budget > 0))
        assert native.average_wait_ns == pytest.approx(python.average_wait_ns)
        # Both ways were chosen (a spinner needs a budget: with none it never spins).
        assert seen == ({(False, False)} if max_spin == 0 else
                        {(True, True), (False, False), (True, False), (False, True)}), seen


def test_the_gate_is_shared_by_python_and_native_waiters() -> None:
    gate = SpinGate(2)
    slot = gate.try_enter()
    assert slot is not None
    assert gate.native.try_enter()  # as a native waiter takes one
    assert gate.try_enter() is None and gate.spinning() == 2
    gate.native.leave()
    slot.release()
    assert gate.spinning() == 0
