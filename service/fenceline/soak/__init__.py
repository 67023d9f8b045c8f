"""``fenceline soak``: renderers at full rate against one service for a bounded time, with
random kills and restarts, reporting the service's resources at start and end."""

from fenceline.soak.runner import SoakReport, run_soak

__all__ = ["SoakReport", "run_soak"]
