"""The scenario matrix: frame sizes, datatypes, concurrent renderers, sync or pipelined, and
which transports each scenario runs, with the budget of every row.

Not the full cross product: the sweep over sizes runs every transport; datatypes, concurrency
and pipelining run on the sizes and transports where they say something, so the default run
stays within a few minutes on two cores."""

from __future__ import annotations

from dataclasses import dataclass, replace
from pathlib import Path

from fenceline.bench.buffers import Signature
from fenceline.bench.engine import Budget

SIZES: dict[str, tuple[int, int]] = {
    "64x64": (64, 64), "720p": (720, 1280), "1080p": (1080, 1920), "4K": (2160, 3840),
}
MODELS: dict[tuple[str, str], str] = {  # (size, datatype) -> builtin model
    ("64x64", "FP32"): "add_64x64", ("720p", "FP32"): "add_720p",
    ("1080p", "FP32"): "add_1080p", ("4K", "FP32"): "add_4k",
    ("64x64", "FP16"): "add_64x64_fp16", ("720p", "FP16"): "add_720p_fp16",
    ("1080p", "FP16"): "add_1080p_fp16", ("4K", "FP16"): "add_4k_fp16",
}
BUDGETS: dict[str, Budget] = {
    "64x64": Budget(5000, 200, 1.5),
    "720p": Budget(1800, 10, 1.5),
    "1080p": Budget(900, 6, 2.0),
    "4K": Budget(240, 3, 2.5),
    "real": Budget(45, 1, 9.0),
}
QUICK_BUDGETS: dict[str, Budget] = {
    "64x64": Budget(100, 10, 0.2), "720p": Budget(8, 2, 0.2), "1080p": Budget(5, 1, 0.2),
    "4K": Budget(3, 1, 0.2), "real": Budget(3, 1, 0.5),
}

# Every transport that a single renderer can use, in table order.
SINGLE = ("in-process", "ipc", "ipc-traced", "http", "kserve-binary", "system-shm", "c-client", "streaming",
          "streaming-blocking",
          "triton-binary", "triton-shm")
# The frame's move between two cores' caches, measured where the issue asked (720p).
CROSS_CORE = ("in-process-cross-core", "ipc-written")
CONCURRENT = ("in-process", "ipc", "http", "triton-shm")
PIPELINED = ("in-process", "ipc", "triton-shm")
# One frame at a time in the rounds of the 64x64 pipelined rows: the baseline of the goal of
# frames in flight (a sync scenario's row, minutes before, also measured the machine's drift).
ONE_AT_A_TIME = ("ipc-one",)
# The floor and IPC in turn, 8 frames each (mode "alternating"), at the largest frame: a 4K
# frame takes milliseconds, and the machine's speed moves between one round's rows more than
# the 4K goal's 5% (registry._alternating).
ALTERNATING = ("alternating",)
REAL = ("in-process", "ipc", "http", "kserve-binary", "system-shm", "triton-binary",
        "triton-shm")


@dataclass(frozen=True)
class Scenario:
    model: str  # the name fenceline and Triton serve it under
    size: str
    datatype: str
    renderers: int
    # "sync": one frame in flight per renderer; "pipelined": two (double buffering);
    # "alternating": one renderer runs the floor and IPC in turn (ALTERNATING)
    mode: str
    transports: tuple[str, ...]
    budget: Budget
    sig: Signature | None = None  # filled in once the model is built
    fill: str = "random"
    # Rows are measured in rounds that take turns across the scenario's transports, so a
    # machine that gets busier or quieter meanwhile skews every row alike and the ratios hold.
    # Large frames take more, shorter rounds (see plan).
    rounds: int = 3

    @property
    def depth(self) -> int:
        return 2 if self.mode == "pipelined" else 1

    @property
    def label(self) -> str:
        who = "1 renderer" if self.renderers == 1 else f"{self.renderers} renderers"
        return f"{self.size} {self.datatype}, {who}, {self.mode}"


@dataclass(frozen=True)
class RealModel:
    name: str
    path: Path
    image: tuple[int, int]
    fill: str = "text-frame"


def plan(*, quick: bool = False, sizes: list[str] | None = None,
         real: RealModel | None = None, seconds: float | None = None) -> list[Scenario]:
    budgets = QUICK_BUDGETS if quick else BUDGETS
    if seconds is not None:
        budgets = {k: replace(b, seconds=seconds) for k, b in budgets.items()}
    chosen = [s for s in SIZES if sizes is None or s in sizes]
    out: list[Scenario] = []

    # A large frame's run drifts with the machine by more than the goals' margins (on the
    # 16-core machine a 1080p floor read 250-370 us in runs a minute apart, p99 up to 2 ms):
    # six rounds, and three for several renderers, whose one round left the ratio of 1080p
    # with four renderers at 1.07-1.33 in three runs there.
    def rounds(size: str, renderers: int) -> int:
        if quick:
            return 1
        if size == "64x64":
            return 3 if renderers == 1 else 1
        return 6 if renderers == 1 else 3

    def add(size: str, dt: str, renderers: int, mode: str, transports: tuple[str, ...]) -> None:
        if size in chosen:
            budget, n = budgets[size], rounds(size, renderers)
            if mode == "alternating":
                # Two frames a step, in the time of each; measured side by side already: three
                # rounds, each on new buffers, for the frame's place in memory.
                budget, n = replace(budget, seconds=2 * budget.seconds), 1 if quick else 3
            out.append(Scenario(MODELS[(size, dt)], size, dt, renderers, mode, transports,
                                budget, rounds=n))

    big = "720p" if quick else "1080p"
    for size in SIZES:
        add(size, "FP32", 1, "sync", SINGLE + (CROSS_CORE if size == "720p" else ()))
    add("720p" if quick else "4K", "FP32", 1, "alternating", ALTERNATING)
    for size in ("64x64",) if quick else ("64x64", "1080p"):
        add(size, "FP16", 1, "sync", ("in-process", "ipc", "triton-shm"))
    for size in ("64x64", big):
        add(size, "FP32", 1, "pipelined", PIPELINED + (ONE_AT_A_TIME if size == "64x64" else ()))
        add(size, "FP32", 4, "sync", CONCURRENT)
    if not quick:
        add("1080p", "FP32", 4, "pipelined", PIPELINED)
    if real is not None:
        # A frame costs far more than a lane's setup: more, shorter rounds for a steadier ratio.
        out.append(Scenario(real.name, f"{real.name} {real.image[0]}x{real.image[1]}", "FP32", 1,
                            "sync", REAL, budgets["real"], fill=real.fill,
                            rounds=1 if quick else 6))
    return out
