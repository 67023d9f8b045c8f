"""Session objects and the layout helper: what most renderers need instead of ids and byte
offsets. Both work with :class:`~fenceline.client.IpcClient` and
:class:`~fenceline.client.HttpClient`."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import numpy as np

from fenceline.client.errors import ClientError, UsageError
from fenceline.client.views import View, datatype_name
from fenceline.interop.datatypes import DATATYPES as BY_NAME

if TYPE_CHECKING:
    from fenceline.client.frames import SharedFrame


class Session:
    """A session on the service. ``run`` and ``run_async`` (IPC only) take the value to wait
    for; ``close()`` releases it on the service and is safe twice (and after the client is
    closed, when the service has released it already). ``info`` is the service's description
    at creation; ``session["id"]`` reads it as the dict ``create_session`` returns did."""

    def __init__(self, client: Any, info: dict[str, Any]) -> None:
        self._client = client
        self.info = info
        self.id: str = str(info["id"])
        self._closed = False

    def __getitem__(self, key: str) -> Any:
        return self.info[key]

    def _check(self) -> None:
        if self._closed:
            raise UsageError(f"session {self.id[:8]} is closed")

    def run(self, wait_value: int, signal_value: int | None = None, *,
            timeout_s: float | None = None) -> Any:
        """Waits for the input fence to reach ``wait_value``, runs, signals; returns the reply
        (``signal_value`` and timings)."""
        self._check()
        return self._client.run(self.id, wait_value, signal_value, timeout_s=timeout_s)

    def run_async(self, wait_value: int, signal_value: int | None = None) -> Any:
        """Returns once the work is enqueued (CUDA sessions; docs/gpu.md)."""
        self._check()
        run_async = getattr(self._client, "run_async", None)
        if run_async is None:
            raise UsageError("run_async needs the IPC client")
        return run_async(self.id, wait_value, signal_value)

    def describe(self) -> dict[str, Any]:
        self._check()
        return dict(self._client.describe("session", self.id))

    def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        try:
            self._client.release_session(self.id)
        except ClientError:
            if not getattr(self._client, "closed", False):
                raise

    def __enter__(self) -> Session:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"Session({self.id[:8]}, model={self.info.get('model')!r})"


@dataclass(frozen=True)
class Slot:
    name: str
    datatype: str
    shape: list[int]
    offset_bytes: int
    size_bytes: int


@dataclass(frozen=True)
class Layout:
    """Where each input and output of a model lives in one shared buffer: inputs first, then
    outputs, each at an ``align``-byte boundary. Build it from a model's metadata
    (``client.model_metadata(name)``) with :meth:`of`."""

    inputs: dict[str, Slot]
    outputs: dict[str, Slot]
    size_bytes: int
    align: int = field(default=64)

    @classmethod
    def of(cls, metadata: dict[str, Any], shapes: dict[str, list[int]] | None = None,
           align: int = 64) -> Layout:
        """``shapes`` fixes the free (-1) dimensions, by tensor name; every other tensor keeps
        the model's shape."""
        if align <= 0 or align & (align - 1):
            raise UsageError(f"align must be a power of two, not {align}")
        shapes = shapes or {}
        offset = 0
        parts: list[dict[str, Slot]] = [{}, {}]
        for part, key in zip(parts, ("inputs", "outputs"), strict=True):
            for t in metadata[key]:
                shape = list(shapes.get(t["name"], t["shape"]))
                if len(shape) != len(t["shape"]) or any(d < 0 for d in shape):
                    raise UsageError(
                        f"{key[:-1]} {t['name']!r} has shape {t['shape']} in the model: give its "
                        f"free dimensions in shapes={{{t['name']!r}: [...]}}"
                    )
                dt = BY_NAME.get(t["datatype"])
                if dt is None:
                    raise UsageError(f"{t['name']!r}: datatype {t['datatype']} has no numpy type")
                size = int(np.prod(shape, dtype=np.int64)) * dt.numpy.itemsize
                offset = -(-offset // align) * align
                part[t["name"]] = Slot(t["name"], t["datatype"], shape, offset, size)
                offset += size
        return cls(parts[0], parts[1], offset, align)

    def views(self, memory: str) -> tuple[dict[str, View], dict[str, View]]:
        """Input and output views into ``memory`` (an imported buffer of at least
        ``size_bytes``), ready for ``create_session`` / ``session``."""
        def make(slots: dict[str, Slot]) -> dict[str, View]:
            return {n: View(memory, s.datatype, s.shape, s.offset_bytes) for n, s in slots.items()}

        return make(self.inputs), make(self.outputs)

    def array(self, frame: SharedFrame, name: str) -> np.ndarray:
        """The numpy array over ``frame`` for tensor ``name`` (the frame owns the memory)."""
        slot = self.inputs.get(name) or self.outputs.get(name)
        if slot is None:
            raise UsageError(f"no tensor {name!r}; the model has "
                             f"{sorted([*self.inputs, *self.outputs])}")
        return frame.array(BY_NAME[slot.datatype].numpy, slot.shape, slot.offset_bytes)


__all__ = ["Layout", "Session", "Slot", "datatype_name"]
