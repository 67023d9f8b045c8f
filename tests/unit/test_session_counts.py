"""A session's counters (_native.SessionCounts, native/importer/engine/run_metrics.h): the one
home of every session kind's runs, last value and recent runs, which the run engine records
without the interpreter and the status page reads."""

from __future__ import annotations

from fenceline import _native
from fenceline.runtime.session import RECENT_RUNS


def test_a_run_recorded_is_counted_and_kept_with_its_times() -> None:
    c = _native.SessionCounts()
    c.record(100, 7, 1, 2, 3)
    c.record(200, 8, 4, 5, 9, single_thread=True)
    assert (c.runs, c.single_thread_runs, c.last_signal_value) == (2, 1, 8)
    assert c.recent() == [(100, 7, 1, 2, 3), (200, 8, 4, 5, 9)]


def test_a_cuda_run_is_counted_when_enqueued_and_its_times_kept_later() -> None:
    c = _native.SessionCounts()
    c.ran(5)
    assert (c.runs, c.last_signal_value, c.recent()) == (1, 5, [])
    c.note(300, 5, 10, 20, 30)
    assert (c.runs, c.recent()) == (1, [(300, 5, 10, 20, 30)])


def test_a_value_signalled_without_a_run_is_not_counted() -> None:
    c = _native.SessionCounts()
    c.record(1, 3, 0, 0, 0)
    c.signalled(4)
    assert (c.runs, c.last_signal_value, len(c.recent())) == (1, 4, 1)


def test_the_recent_runs_are_the_last_ones_oldest_first() -> None:
    c = _native.SessionCounts()
    for v in range(1, 3 * RECENT_RUNS + 6):
        c.record(v, v, 0, 0, v)
    got = c.recent()
    assert len(got) == RECENT_RUNS
    assert [r[1] for r in got] == list(range(2 * RECENT_RUNS + 6, 3 * RECENT_RUNS + 6))
    assert c.runs == 3 * RECENT_RUNS + 5
