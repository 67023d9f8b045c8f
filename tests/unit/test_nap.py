"""The IPC client's nap before a long reply (fenceline.waiting.Nap): when it sleeps, how long,
and that it never plans a nap that would end after the reply it expects."""

from __future__ import annotations

from fenceline.waiting import NAP_GUARD_NS, NAP_MAX_NS, NAP_MIN_NS, Nap


def fed(waits: list[int], late_ns: int | None = None) -> Nap:
    nap = Nap()
    for w in waits:
        nap.observe_wait(w)
        if late_ns is not None:
            nap.observe_late(late_ns)
    return nap


def test_no_nap_before_any_wait_was_seen() -> None:
    assert Nap().plan_ns() == 0


def test_short_waits_are_left_to_the_spin() -> None:
    assert fed([NAP_MIN_NS // 2] * 50).plan_ns() == 0


def test_long_waits_just_block() -> None:
    assert fed([NAP_MAX_NS * 2] * 50).plan_ns() == 0


def test_a_repeating_wait_gets_a_nap_that_ends_before_the_reply() -> None:
    nap = fed([400_000] * 50, late_ns=60_000)
    planned = nap.plan_ns()
    assert 0 < planned <= 400_000 - 60_000 - NAP_GUARD_NS
    # and the spin after it covers the rest of the expected wait
    assert nap.spin_after_ns(planned + 60_000) >= 400_000 - (planned + 60_000)


def test_a_wait_that_varies_naps_less() -> None:
    steady = fed([400_000] * 50, late_ns=20_000).plan_ns()
    noisy = fed([250_000, 550_000] * 25, late_ns=20_000).plan_ns()
    assert noisy < steady


def test_naps_that_end_late_make_the_next_ones_shorter() -> None:
    prompt = fed([600_000] * 50, late_ns=10_000).plan_ns()
    late = fed([600_000] * 50, late_ns=150_000).plan_ns()
    assert late < prompt
