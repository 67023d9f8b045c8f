"""The Python client's nap rule (native/importer/transport/posix/client_runs.cpp, ReplyNap): where a nap ends
and how long the spin after it lasts, fed waits as a renderer's connection feeds it. Inside its
exploration window a rule that does not nap yet plans the nap it would take."""

from __future__ import annotations

import random

import pytest

from fenceline import _native
from fenceline.waiting import WINDOW_SHIFT, WINDOWS_PER_PERIOD

PERIOD = WINDOWS_PER_PERIOD << WINDOW_SHIFT
INSIDE = PERIOD + (WINDOWS_PER_PERIOD // 2 << WINDOW_SHIFT)  # inside the nap's exploration window
US = 1000
MAX_SPIN = 200 * US

pytestmark = pytest.mark.skipif(not hasattr(_native, "ReplyNap"),
                                reason="the nap is the Unix socket client's (no build of it here)")


def _blocked(nap: _native.ReplyNap, waits_us: list[float]) -> None:
    for w in waits_us:
        nap.observe(int(w * US), 0, -1, True)


@pytest.fixture
def nap(monkeypatch: pytest.MonkeyPatch) -> _native.ReplyNap:
    monkeypatch.delenv("FENCELINE_NAP", raising=False)
    return _native.ReplyNap()


def test_steady_waits_are_covered_from_before_the_earliest_to_past_the_latest(
        nap: _native.ReplyNap) -> None:
    _blocked(nap, [990, 1010] * 100)
    n, spin = nap.plan(INSIDE)
    assert 0 < n <= 980 * US and n + spin >= 1020 * US, (n, spin)
    assert spin < MAX_SPIN


def test_a_stall_among_steady_waits_leaves_the_next_naps_where_the_replies_come(
        nap: _native.ReplyNap) -> None:
    """One 4-ms wait among 1-ms ones (the renderer's thread descheduled) moves the plan by a
    few deviations at most: the next nap still ends before the reply is due and its spin lasts
    until after it. Counted whole, the stall ended the nap 400 us early, its spin at 800 us."""
    _blocked(nap, [990, 1010] * 100)
    before = nap.plan(INSIDE)
    _blocked(nap, [4000])
    n, spin = nap.plan(INSIDE)
    assert n <= 990 * US and n + spin >= 1010 * US, (before, (n, spin))
    assert abs(n - before[0]) <= 50 * US, (before, (n, spin))


def test_waits_spread_wider_than_a_spin_are_met_in_their_middle(nap: _native.ReplyNap) -> None:
    """Replies 1 ms +- 300 us apart: no spin of at most 200 us covers them all, so it covers
    the middle, where most of them come (not the 200 us after the nap that would end two
    deviations before the average)."""
    rng = random.Random(7)
    waits = [rng.uniform(700, 1300) for _ in range(400)]
    _blocked(nap, waits)
    n, spin = nap.plan(INSIDE)
    assert spin == MAX_SPIN
    assert n < 1000 * US < n + spin, (n, spin)
    caught = sum(n <= w * US <= n + spin for w in waits[-200:])
    assert caught >= 50, caught  # a third of a uniform spread of 600 us, give or take


def test_no_nap_for_waits_a_spin_catches_or_when_told_not_to(
        monkeypatch: pytest.MonkeyPatch) -> None:
    short = _native.ReplyNap()
    _blocked(short, [20] * 100)  # 20 us: the spin rule's
    assert short.plan(INSIDE) == (0, 0)
    monkeypatch.setenv("FENCELINE_NAP", "0")
    off = _native.ReplyNap()
    _blocked(off, [1000] * 100)
    assert off.plan(INSIDE) == (0, 0) and not off.napping


def _renderer(nap: _native.ReplyNap, frames: int, napped_us: float, blocked_us: float,
              in_spin_windows_us: float) -> list[bool]:
    """A renderer's frames, one after another on a simulated clock: the service takes 240 us a
    frame, the handoff (the wait less that) is `napped_us` or `blocked_us` by the way waited, and
    `in_spin_windows_us` longer in the spin rule's exploration windows, where the service
    explores its own receive's way. Whether each frame napped."""
    t, out = 3 * PERIOD + (1 << WINDOW_SHIFT), []  # just after a spin rule's window
    for _ in range(frames):
        n, _spin = nap.plan(t)
        explored = (t >> WINDOW_SHIFT) % WINDOWS_PER_PERIOD == 0
        waited = 240 + (napped_us if n else blocked_us) + (in_spin_windows_us if explored else 0)
        nap.observe(int(waited * US), n, 5 * US if n else -1, n == 0)
        nap.served(240)
        t += int((waited + 30) * US)  # and the renderer's own part of the frame
        out.append(n > 0)
    return out


def test_the_way_tried_while_the_service_explores_is_not_judged_on_the_handoffs_it_lengthens(
        nap: _native.ReplyNap) -> None:
    """Napping hands the reply over 12 us sooner, but in the spin rule's windows every handoff
    is 30 us longer (the service's receive blocks there). A nap tried in those windows looked 18
    us worse than blocking, and the renderer never napped; tried half a period later, it naps in
    all but its own exploration windows."""
    napped = _renderer(nap, 4000, napped_us=8, blocked_us=20, in_spin_windows_us=30)
    share = sum(napped[-2000:]) / 2000
    assert share > 0.85, share
    assert nap.napping


def test_napping_stops_where_it_hands_over_no_sooner(nap: _native.ReplyNap) -> None:
    napped = _renderer(nap, 4000, napped_us=20, blocked_us=20, in_spin_windows_us=30)
    share = sum(napped[-2000:]) / 2000
    assert share < 0.15, share
    assert not nap.napping


def test_no_nap_while_the_service_says_its_cores_are_shared_nor_a_judgement_of_those_waits(
        nap: _native.ReplyNap) -> None:
    """While the replies say the service's cores are shared (FL_WIRE_REPLY_CPUS_SHARED) the rule
    plans no nap, in its exploration windows too; the waits meanwhile (blocked, and handed over
    sooner than any nap: other renderers' runs set their pace) are not judged, so the rule naps
    again as before once the cores are the renderer's again."""
    _renderer(nap, 4000, napped_us=8, blocked_us=20, in_spin_windows_us=30)
    assert nap.napping
    t = 10 * PERIOD
    for _ in range(3000):  # a whole period and more, its windows included
        assert nap.plan(t, shared=True) == (0, 0)
        nap.observe(241 * US, 0, -1, True)
        nap.served(240)
        t += 271 * US
    t = (t // PERIOD + 2) * PERIOD
    nap.plan(t + INSIDE - PERIOD)  # the nap's own window, then past it: it judges
    n, _spin = nap.plan(t + PERIOD - (1 << WINDOW_SHIFT))
    assert nap.napping and n > 0, n
