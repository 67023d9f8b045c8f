"""Tensor views and the request bodies both clients send."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from fenceline.client.errors import UsageError
from fenceline.interop.datatypes import DATATYPES

_BY_NUMPY = {d.numpy: d.name for d in DATATYPES.values()}


def datatype_name(datatype: Any) -> str:
    """The KServe name ("FP32") of a datatype given as that name, a numpy dtype or a numpy
    scalar type (``np.float32``)."""
    if isinstance(datatype, str) and datatype in DATATYPES:
        return datatype
    try:
        dt = np.dtype(datatype)
    except TypeError:
        dt = None
    name = _BY_NUMPY.get(dt) if dt is not None else None
    if name is None:
        raise UsageError(
            f"datatype {datatype!r} is not one of {', '.join(DATATYPES)} or their numpy types"
        )
    return name


def timeout_ms_of(timeout_s: float | None, timeout_ms: int | None) -> int | None:
    """Seconds are the unit of every Python timeout; ``timeout_ms`` stays for older callers."""
    if timeout_s is not None and timeout_ms is not None:
        raise UsageError("give timeout_s or timeout_ms, not both")
    if timeout_s is not None:
        if timeout_s < 0:
            raise UsageError("timeout_s must not be negative")
        return max(1, round(timeout_s * 1000)) if timeout_s > 0 else 0
    return timeout_ms


@dataclass(frozen=True)
class View:
    """Where a tensor lives: an imported memory id, an offset inside it, datatype and shape.
    ``datatype`` is a KServe name ("FP32") or a numpy type (``np.float32``); it reads back as
    the name."""

    memory: str
    datatype: str
    shape: list[int]
    offset_bytes: int = 0

    def __post_init__(self) -> None:
        object.__setattr__(self, "datatype", datatype_name(self.datatype))
        object.__setattr__(self, "shape", [int(d) for d in self.shape])

    def body(self) -> dict[str, Any]:
        return {
            "memory": self.memory,
            "offset_bytes": self.offset_bytes,
            "datatype": self.datatype,
            "shape": list(self.shape),
        }


def session_body(
    model: str, inputs: dict[str, View], outputs: dict[str, View], wait_fence: str,
    signal_fence: str, *, mode: str = "request", policy: str = "latest",
    spin_us: int | None = None, start: bool = True,
) -> dict[str, Any]:
    """The session-create body, the same over IPC and HTTP. The streaming fields
    (docs/streaming.md) are sent only for a streaming session."""
    body: dict[str, Any] = {
        "model": model,
        "inputs": {k: v.body() for k, v in inputs.items()},
        "outputs": {k: v.body() for k, v in outputs.items()},
        "wait_fence": wait_fence,
        "signal_fence": signal_fence,
    }
    if mode != "request":
        body.update(mode=mode, policy=policy, start=start)
        if spin_us is not None:
            body["spin_us"] = spin_us
    return body


