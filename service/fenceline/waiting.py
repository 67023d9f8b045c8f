"""Adaptive spin-then-block waiting.

A blocking wakeup across CPUs costs ~70 us on a small machine, more than a small model's run,
while spinning costs a core. A waiter spins only when the event it waits for has recently come
sooner than the budget: it keeps a moving average of observed waits and spins for twice that,
never past ``max_spin_ns``; when waits are longer than the budget it blocks at once. A budget of
zero always blocks.
"""

from __future__ import annotations


class AdaptiveSpin:
    __slots__ = ("max_spin_ns", "_avg_ns")

    def __init__(self, max_spin_ns: int) -> None:
        if max_spin_ns < 0:
            raise ValueError("max_spin_ns must not be negative")
        self.max_spin_ns = max_spin_ns
        self._avg_ns = 0.0

    def budget_ns(self) -> int:
        """How long the next wait should spin before it sleeps."""
        if self.max_spin_ns == 0 or self._avg_ns > self.max_spin_ns:
            return 0
        return int(min(self.max_spin_ns, max(2 * self._avg_ns, 2_000)))

    def observe(self, waited_ns: int) -> None:
        """Feeds back how long the last wait actually took."""
        self._avg_ns += (waited_ns - self._avg_ns) * 0.125
