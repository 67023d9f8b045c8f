"""Bounded waits for tests: every wait has a limit and fails with what it waited for."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import TypeVar

T = TypeVar("T")


def wait_until(check: Callable[[], T], timeout_s: float = 10.0, *,
               what: str | Callable[[], object] = "the condition") -> T:
    """``check()``'s first true value, asked every 50 ms; AssertionError naming ``what`` (a
    callable is asked only then, for the state at the time) when none came in ``timeout_s``.
    It polls slowly on purpose: a busy wait takes the CPU from the process it waits for."""
    deadline = time.monotonic() + timeout_s
    while True:
        value = check()
        if value:
            return value
        if time.monotonic() >= deadline:
            detail = what() if callable(what) else what
            raise AssertionError(f"not reached within {timeout_s:g} s: {detail}")
        time.sleep(0.05)
