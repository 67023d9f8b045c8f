"""The nap of a socket reply's wait (fenceline.waiting.AdaptiveSpin with ``nap``): when it
sleeps, how long, and that it never plans a nap that would end after the reply it expects."""

from __future__ import annotations

from fenceline.waiting import NAP_GUARD_NS, NAP_MAX_NS, NAP_MIN_NS, WINDOW_SHIFT, AdaptiveSpin

NOT_EXPLORING = 1 << WINDOW_SHIFT  # a clock reading outside the exploration windows
EXPLORING = 0


def waiter(max_spin_ns: int = 100_000, nap: bool = True) -> AdaptiveSpin:
    return AdaptiveSpin(max_spin_ns, clock=lambda: NOT_EXPLORING, nap=nap)


def fed(waits: list[int], late_ns: int = -1) -> AdaptiveSpin:
    """A waiter that has seen ``waits``, each after the nap it planned (ending ``late_ns`` late)."""
    w = waiter()
    for ns in waits:
        w.observe_planned(ns, w.plan(), late_ns)
    return w


def test_no_nap_before_any_wait_was_seen() -> None:
    assert waiter().plan()[0] == 0


def test_short_waits_are_left_to_the_spin() -> None:
    nap, spin = fed([NAP_MIN_NS // 2] * 50).plan()
    assert nap == 0


def test_long_waits_just_block() -> None:
    assert fed([NAP_MAX_NS * 2] * 50).plan()[0] == 0


def test_a_repeating_wait_gets_a_nap_that_ends_before_the_reply() -> None:
    nap, spin = fed([400_000] * 50, late_ns=60_000).plan()
    assert 0 < nap <= 400_000 - 60_000 - NAP_GUARD_NS
    # and the spin after it covers the rest of the expected wait
    assert nap + 60_000 + spin >= 400_000


def test_a_wait_that_varies_naps_less() -> None:
    steady = fed([400_000] * 50, late_ns=20_000).plan()[0]
    noisy = fed([250_000, 550_000] * 25, late_ns=20_000).plan()[0]
    assert noisy < steady


def test_naps_that_end_late_make_the_next_ones_shorter() -> None:
    prompt = fed([600_000] * 50, late_ns=10_000).plan()[0]
    late = fed([600_000] * 50, late_ns=150_000).plan()[0]
    assert late < prompt


def test_no_nap_without_a_spin_budget_or_when_not_asked() -> None:
    assert fed([400_000] * 50).plan()[0] > 0
    blocking = waiter(0)
    plain = waiter(nap=False)
    for w in (blocking, plain):
        for _ in range(50):
            w.observe_planned(400_000, w.plan(), -1)
        assert w.plan()[0] == 0


def test_napping_gives_way_to_blocking_when_blocked_waits_are_faster() -> None:
    """Where the spin after a nap takes a core the model's threads need, the napped waits get
    longer than blocked ones: the waiter then blocks, and naps again once that turns."""
    w = fed([400_000] * 20)
    w.clock = lambda: EXPLORING  # type: ignore[method-assign]
    assert w.plan() == (0, 0)  # an exploration window tries the other way: block
    for _ in range(20):
        w.observe_planned(300_000, w.plan(), -1)  # blocked waits: 300 us
    w.clock = lambda: NOT_EXPLORING  # type: ignore[method-assign]
    assert w.plan() == (0, 0)  # the window ended: blocking was faster
    for _ in range(40):  # blocked waits get slow (a wakeup of an idle VM)
        w.observe_planned(600_000, w.plan(), -1)
    assert w.plan()[0] > 0  # ... so it naps again
