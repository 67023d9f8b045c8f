"""The one spin rule (native/common/spin_rule.h), as Python waiters reach it through
fenceline.waiting.AdaptiveSpin: it spins for waits that a spin catches, with a budget that
follows them, blocks at once for waits that come later than any spin, and tries the other way
in the exploration windows of the clock."""

from __future__ import annotations

import pytest

from fenceline import _native
from fenceline.waiting import WINDOW_SHIFT, WINDOWS_PER_PERIOD, AdaptiveSpin, SpinGate

OUTSIDE = 3 << WINDOW_SHIFT  # a clock reading outside the exploration windows
INSIDE = WINDOWS_PER_PERIOD << WINDOW_SHIFT  # one inside a window

pytestmark = pytest.mark.skipif(not hasattr(_native, "ReceiveSpin"), reason="no native spin")


def _fed(spin: AdaptiveSpin, clock: list[int], waited: int, n: int = 40) -> list[int]:
    """The budgets of n waits of ``waited`` ns outside the windows."""
    budgets = []
    for i in range(n):
        clock[0] = OUTSIDE + i
        budget = spin.budget_ns()
        budgets.append(budget)
        spin.observe(waited, budget)
    return budgets


def test_the_rule_spins_for_waits_a_spin_catches_and_blocks_for_later_ones() -> None:
    clock = [OUTSIDE]
    spin = AdaptiveSpin(100_000, SpinGate(1), clock=lambda: clock[0])
    assert spin.budget_ns() == 100_000  # no wait yet: the whole budget
    budgets = _fed(spin, clock, 5_000)
    assert spin.spinning and spin.average_wait_ns == pytest.approx(5_000)
    # The budget follows the spun waits: four times their average and the slack, not the most.
    assert budgets[-1] == pytest.approx(4 * 5_000 + 10_000, abs=1)
    # In a window it tries blocking at once, to keep that way's average current.
    clock[0] = INSIDE
    assert spin.budget_ns() == 0
    # Waits that come later than any spin: it blocks at once from then on.
    budgets = _fed(spin, clock, 900_000)
    assert not spin.spinning and budgets[-5:] == [0] * 5
    clock[0] = INSIDE + (WINDOWS_PER_PERIOD << WINDOW_SHIFT)
    assert spin.budget_ns() > 0  # and tries a spin in the next window


def test_a_waiter_with_no_spin_budget_never_spins() -> None:
    clock = [OUTSIDE]
    spin = AdaptiveSpin(0, SpinGate(1), clock=lambda: clock[0])
    assert _fed(spin, clock, 5_000) == [0] * 40 and not spin.spinning
    clock[0] = INSIDE
    assert spin.budget_ns() == 0


def test_the_gate_is_shared_by_python_and_native_waiters() -> None:
    gate = SpinGate(2)
    slot = gate.try_enter()
    assert slot is not None
    assert gate.native.try_enter()  # as a native waiter takes one
    assert gate.try_enter() is None and gate.spinning() == 2
    gate.native.leave()
    slot.release()
    assert gate.spinning() == 0
