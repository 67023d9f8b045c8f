"""The one place a session implementation is chosen. A session over GPU memory (Vulkan, CUDA IPC,
D3D12) or GPU fences (Vulkan timeline semaphores, D3D12 fences) is a :class:`CudaSession`;
everything else is a :class:`HostSession`. A new backend (another GPU API, another platform's
fences) adds a branch here and a module beside them; the runtime and the transports only see the
:class:`Session` protocol."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Literal

from fenceline.interop.devices import device_label
from fenceline.interop.handles import Binding, FenceHandle
from fenceline.runtime.cuda_session import CudaSession, check_gpu_session, uses_gpu
from fenceline.runtime.gpu_streaming import GPU_FENCE_KINDS, CudaStreamDriver, check_gpu_stream
from fenceline.runtime.host_session import HostSession
from fenceline.runtime.models import Model
from fenceline.runtime.session import Session
from fenceline.runtime.streaming import Policy, register_driver

# Streaming sessions pick their driver by the input fence's kind (runtime/streaming.py).
for _kind in GPU_FENCE_KINDS:
    register_driver(_kind, CudaStreamDriver)


@dataclass(frozen=True)
class Backend:
    name: Literal["host", "cuda"]
    device_label: str  # the GPU a CUDA session runs on, as a metrics label; "" on the host

    def check_streaming(self, policy: Policy, wait_kind: str) -> None:
        """Refuses, before anything is built, a streaming session this backend cannot run: a
        CUDA session runs every value, and not on an input fence whose signal must come before
        the wait (runtime/gpu_streaming.py)."""
        if self.name == "cuda":
            check_gpu_stream(policy, wait_kind)

    def build(
        self,
        model: Model,
        inputs: Mapping[str, Binding],
        outputs: Mapping[str, Binding],
        wait_fence: FenceHandle,
        signal_fence: FenceHandle,
    ) -> Session:
        """Builds the session (an onnxruntime IOBinding, for CUDA also a stream and an
        onnxruntime session): slow, so the runtime calls it outside its table lock."""
        # select() has checked which concrete kinds these are.
        args: tuple[Any, ...] = (model, dict(inputs), dict(outputs), wait_fence, signal_fence)
        if self.name == "cuda":
            return CudaSession(*args)
        return HostSession(*args)


def select(
    model: Model,
    inputs: Mapping[str, Binding],
    outputs: Mapping[str, Binding],
    wait_fence: FenceHandle,
    signal_fence: FenceHandle,
) -> Backend:
    """The backend for a session over these objects, with everything it needs checked before
    anything is built (the runtime calls this under its table lock, to count sessions per
    GPU)."""
    if not uses_gpu([*inputs.values(), *outputs.values()], [wait_fence, signal_fence]):
        return Backend("host", "")
    device = check_gpu_session(model, dict(inputs), dict(outputs), wait_fence, signal_fence)
    return Backend("cuda", device_label(device.ordinal))
