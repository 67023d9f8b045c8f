"""A Vulkan renderer's frames shared with the service (docs/gpu.md): per slot an input and an
output buffer exported as OPAQUE_FD, an input and an output timeline semaphore, and a CUDA session
over them. The renderer writes the input on its queue and signals; the service waits for that on
the GPU, runs the model into the output buffer and signals the output semaphore.

Used by ``examples/vulkan_renderer.py``, the GPU tests and ``fenceline bench --gpu``.
"""

from __future__ import annotations

import contextlib
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from fenceline.client.errors import ClientError
from fenceline.client.ipc import IpcClient, View
from fenceline.client.vulkan import (
    Buffer,
    Submission,
    TimelineSemaphore,
    VulkanDevice,
    close_fd,
    copy_commands,
    fill_commands,
)


@dataclass
class Slot:
    """One frame's worth of shared objects, and the submissions that use them."""

    input: Buffer
    output: Buffer
    ready: TimelineSemaphore  # renderer -> service: input written
    done: TimelineSemaphore  # service -> renderer: output written
    session: str = ""
    ids: dict[str, str] = field(default_factory=dict)
    upload: Submission | None = None
    fill: Submission | None = None
    readback: Submission | None = None


class VkRenderer:
    """``slots`` frames of ``shape`` FP32 for a model with one input ``x`` and one output ``y``
    (the builtin add_* models). ``session_options`` go to each session's creation, for example
    ``{"mode": "streaming", "policy": "every"}`` (docs/streaming.md). ``close()`` releases the
    service's objects, then the Vulkan ones."""

    def __init__(
        self,
        client: IpcClient,
        model: str,
        shape: list[int],
        *,
        slots: int = 1,
        dedicated: bool = True,
        fill_value: float = 0.5,
        device: VulkanDevice | None = None,
        session_options: dict[str, Any] | None = None,
    ) -> None:
        self.client = client
        self.session_options = dict(session_options or {})
        self.model = model
        self.shape = list(shape)
        self.nbytes = int(np.prod(shape)) * 4
        self.own_device = device is None
        self.dev = device or VulkanDevice()
        self.slots: list[Slot] = []
        self.staging = Buffer(self.dev, self.nbytes, exported=False)
        self.result = Buffer(self.dev, self.nbytes, exported=False)
        self.fill_value = fill_value
        try:
            for _ in range(slots):
                self.slots.append(self._slot(dedicated))
        except Exception:
            self.close()
            raise

    def _share_memory(self, buf: Buffer) -> str:
        fd = buf.export_fd()
        try:
            return self.client.import_gpu_memory(
                fd, buf.allocation_size, device_uuid=self.dev.uuid_hex, dedicated=buf.dedicated,
                size_bytes=self.nbytes,
            )
        finally:
            close_fd(fd)

    def _share_fence(self, sem: TimelineSemaphore) -> str:
        fd = sem.export_fd()
        try:
            return self.client.import_gpu_fence(fd, device_uuid=self.dev.uuid_hex)
        finally:
            close_fd(fd)

    def _slot(self, dedicated: bool) -> Slot:
        dev = self.dev
        s = Slot(
            Buffer(dev, self.nbytes, dedicated=dedicated),
            Buffer(dev, self.nbytes, dedicated=dedicated),
            TimelineSemaphore(dev),
            TimelineSemaphore(dev),
        )
        self.slots.append(s)  # so that close() frees it if the rest fails
        s.ids = {
            "input": self._share_memory(s.input),
            "output": self._share_memory(s.output),
            "ready": self._share_fence(s.ready),
            "done": self._share_fence(s.done),
        }
        info = self.client.create_session(
            self.model,
            {"x": View(s.ids["input"], "FP32", self.shape)},
            {"y": View(s.ids["output"], "FP32", self.shape)},
            s.ids["ready"],
            s.ids["done"],
            **self.session_options,
        )
        s.session = str(info["id"])
        s.upload = Submission(dev, copy_commands(self.staging, s.input, self.nbytes), signal=s.ready)
        word = int(np.float32(self.fill_value).view(np.uint32))
        s.fill = Submission(dev, fill_commands(s.input, word), signal=s.ready)
        s.readback = Submission(dev, copy_commands(s.output, self.result, self.nbytes), wait=s.done)
        self.slots.pop()
        return s

    def upload(self, slot: int, frame: np.ndarray, value: int) -> None:
        """Copies ``frame`` into the slot's input on the GPU queue, then signals ``value``. Waits
        for the staging buffer to be free first."""
        self.dev.wait_idle()
        self.staging.array(np.float32, self.shape)[...] = frame
        s = self.slots[slot]
        assert s.upload is not None
        s.upload.submit(value)

    def fill(self, slot: int, value: int) -> None:
        """Fills the slot's input with ``fill_value`` on the GPU, then signals ``value``."""
        s = self.slots[slot]
        assert s.fill is not None
        s.fill.submit(value)

    def wait_output(self, slot: int, value: int, timeout_s: float | None = 10.0) -> bool:
        return self.slots[slot].done.wait(value, timeout_s)

    def read_output(self, slot: int, value: int) -> np.ndarray:
        """The slot's output once its semaphore reaches ``value``, copied back on the renderer's
        own queue (the service never reads it on the CPU)."""
        s = self.slots[slot]
        assert s.readback is not None
        s.readback.submit(wait_value=value)
        self.dev.wait_idle()
        return self.result.array(np.float32, self.shape).copy()

    def close(self) -> None:
        # A closed connection has already released everything on the service's side.
        with contextlib.suppress(ClientError):
            for s in self.slots:
                if s.session:
                    self.client.release_session(s.session)
                    s.session = ""
                for role, id_ in s.ids.items():
                    if role in ("ready", "done"):
                        self.client.release_fence(id_)
                    else:
                        self.client.release_memory(id_)
                s.ids = {}
        if self.dev.device is not None:
            self.dev.wait_idle()
        for s in self.slots:
            for obj in (s.input, s.output, s.ready, s.done):
                obj.close()
        self.slots = []
        self.staging.close()
        self.result.close()
        if self.own_device:
            self.dev.close()

    def __enter__(self) -> VkRenderer:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()
