"""Every mistake a renderer can make with the native helpers (SharedFrame, Fence) is a
fenceline.errors class with a stable code and a message that says what to fix: never a
TypeError listing the binding's signatures, never a hang, never a crash."""

from __future__ import annotations

import resource
from collections.abc import Callable, Iterator
from typing import Any

import numpy as np
import pytest

from fenceline.client import Fence, SharedFrame
from fenceline.errors import Conflict, FencelineError, InvalidArgument, ResourceExhausted


@pytest.fixture
def frame() -> Iterator[SharedFrame]:
    with SharedFrame(64) as f:
        yield f


@pytest.fixture
def fence() -> Iterator[Fence]:
    with Fence() as f:
        f.signal(5)
        yield f


def closed_frame() -> SharedFrame:
    f = SharedFrame(64)
    f.close()
    return f


def closed_fence() -> Fence:
    f = Fence()
    f.close()
    return f


CASES: list[tuple[str, Callable[[SharedFrame, Fence], Any], type[FencelineError], str]] = [
    ("size-zero", lambda fr, fe: SharedFrame(0), InvalidArgument, "size in bytes must be from 1"),
    ("size-negative", lambda fr, fe: SharedFrame(-1), InvalidArgument, "size in bytes must be from 1"),
    ("size-over-64-bit", lambda fr, fe: SharedFrame(2**70), InvalidArgument, "size in bytes must be from 1"),
    ("size-not-a-number", lambda fr, fe: SharedFrame("64"), InvalidArgument, "must be an integer, not '64'"),  # type: ignore[arg-type]
    ("name-without-slash", lambda fr, fe: SharedFrame(64, name="frame"), InvalidArgument, "'/' followed by 1 to"),
    ("name-with-slash", lambda fr, fe: SharedFrame(64, name="/a/b"), InvalidArgument, "only letters, digits"),
    ("name-not-a-string", lambda fr, fe: SharedFrame(64, name=7), InvalidArgument, "name is a string"),  # type: ignore[arg-type]
    ("array-past-end", lambda fr, fe: fr.array(np.float32, [100]), InvalidArgument, "outside the 64 bytes"),
    ("array-offset-past-end", lambda fr, fe: fr.array(np.float32, [1], 100), InvalidArgument, "outside the 64 bytes"),
    ("array-negative-offset", lambda fr, fe: fr.array(np.float32, [1], -4), InvalidArgument, "offset must be from 0"),
    ("array-negative-dim", lambda fr, fe: fr.array(np.float32, [-1]), InvalidArgument, "must not be negative"),
    ("array-overflowing-shape", lambda fr, fe: fr.array(np.float32, [2**40, 2**40]), InvalidArgument, "overflows"),
    ("array-float-dim", lambda fr, fe: fr.array(np.float32, [1.5]), InvalidArgument, "sequence of integers"),
    ("array-unknown-dtype", lambda fr, fe: fr.array("nope", [1]), InvalidArgument, "'nope' is not a numpy dtype"),
    ("array-object-dtype", lambda fr, fe: fr.array(object, [1]), InvalidArgument, "plain numbers"),
    ("array-after-close", lambda fr, fe: closed_frame().array(np.float32, [1]), InvalidArgument, "frame is closed"),
    ("fd-after-close", lambda fr, fe: closed_frame().fd, InvalidArgument, "frame is closed"),
    ("signal-backwards", lambda fr, fe: fe.signal(3), Conflict, "not above the fence's current value 5"),
    ("signal-same-value", lambda fr, fe: fe.signal(5), Conflict, "not above"),
    ("signal-negative", lambda fr, fe: fe.signal(-1), InvalidArgument, "fence value must be from 0 to"),
    ("signal-over-64-bit", lambda fr, fe: fe.signal(2**64), InvalidArgument, "fence value must be from 0 to"),
    ("signal-not-a-number", lambda fr, fe: fe.signal("6"), InvalidArgument, "must be an integer, not '6'"),  # type: ignore[arg-type]
    ("status-unknown", lambda fr, fe: fe.set_status(3), InvalidArgument, "status must be from 0 to 2"),
    ("status-negative", lambda fr, fe: fe.set_status(-1), InvalidArgument, "status must be from 0 to 2"),
    ("wait-negative-value", lambda fr, fe: fe.wait(-1, 0), InvalidArgument, "fence value must be from 0"),
    ("wait-negative-timeout", lambda fr, fe: fe.wait(6, -1), InvalidArgument, "0 or more seconds"),
    ("wait-nan-timeout", lambda fr, fe: fe.wait(6, float("nan")), InvalidArgument, "0 or more seconds"),
    ("wait-text-timeout", lambda fr, fe: fe.wait(6, "1"), InvalidArgument, "number of seconds"),  # type: ignore[arg-type]
    ("value-after-close", lambda fr, fe: closed_fence().value, InvalidArgument, "fence is closed"),
    ("signal-after-close", lambda fr, fe: closed_fence().signal(9), InvalidArgument, "fence is closed"),
    ("wait-after-close", lambda fr, fe: closed_fence().wait(9, 0), InvalidArgument, "fence is closed"),
    ("fence-name-without-slash", lambda fr, fe: Fence(name="fence"), InvalidArgument, "'/' followed by 1 to"),
    ("fence-negative-spin", lambda fr, fe: Fence(max_spin_ns=-5), InvalidArgument, "max_spin_ns must be from 0"),
]


@pytest.mark.parametrize("call, error, phrase", [c[1:] for c in CASES], ids=[c[0] for c in CASES])
def test_helper_mistakes_raise_a_coded_fenceline_error(
    frame: SharedFrame, fence: Fence, call: Callable[[SharedFrame, Fence], Any],
    error: type[FencelineError], phrase: str,
) -> None:
    with pytest.raises(FencelineError) as e:
        call(frame, fence)
    assert type(e.value) is error, repr(e.value)
    assert e.value.code == error.code
    assert phrase in str(e.value), str(e.value)
    assert fence.value == 5  # nothing half-done on the fence


@pytest.mark.parametrize("make", [lambda n: SharedFrame(64, name=n), lambda n: Fence(name=n)],
                         ids=["frame", "fence"])
def test_a_name_that_exists_is_a_conflict_and_the_first_owner_keeps_it(
    make: Callable[[str], Any],
) -> None:
    with SharedFrame(64, named=True) as first:
        assert first.name is not None
        with pytest.raises(Conflict, match="exists"):
            make(first.name)
        first.array(np.uint8, [64])[:] = 7  # still mapped and usable
        assert first.array(np.uint8, [64])[0] == 7


def test_no_descriptor_left_is_resource_exhausted() -> None:
    """A renderer at its fd limit gets resource_exhausted, not an OSError."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (64, hard))
    held: list[Any] = []
    try:
        with pytest.raises(ResourceExhausted) as e:
            for _ in range(128):
                held.append(SharedFrame(64))
        assert e.value.code == "resource_exhausted"
    finally:
        for f in held:
            f.close()
        resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))


def test_valid_edge_values_still_work(fence: Fence, frame: SharedFrame) -> None:
    fence.signal(2**64 - 1)
    assert fence.value == 2**64 - 1
    assert fence.wait(2**64 - 1, 0)
    assert not Fence().wait(1, 0)  # a zero timeout polls
    fence.set_status(2)
    assert fence.status == 2
    a = frame.array(np.float32, [16], 0)
    assert a.shape == (16,)
    assert frame.array(np.uint8, [1], 63).shape == (1,)
