"""Request and response bodies of the interop API (the IPC control messages use the same)."""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from fenceline.errors import InvalidArgument
from fenceline.runtime.table import ViewSpec

U64 = Field(ge=0, lt=2**64)


class Strict(BaseModel):
    model_config = ConfigDict(extra="forbid")


# Handles travel only over the Windows named pipe (docs/windows.md, "Handles"): the value is the
# handle in the renderer's process, which the service duplicates from the identified client.
HANDLE_DOC = (
    "Windows named pipe only, instead of name: the handle's value in the renderer's process; "
    "the service duplicates it from the pipe's client and checks its object type"
)
# The object type each field's handle must have (native nt_handles.cpp), per kind.
MEMORY_HANDLE_ROLES = {"host_shm": "section", "d3d12_heap": "d3d12_heap",
                       "d3d12_resource": "d3d12_resource"}
FENCE_HANDLE_ROLES = {"host_timeline": "section", "d3d12_fence": "d3d12_fence"}


def _no_handle_for(kind: str, roles: dict[str, str]) -> InvalidArgument:
    return InvalidArgument(
        f"{kind} takes no handle; handles are for {', '.join(roles)} over the Windows pipe"
    )


class MemoryImportRequest(Strict):
    handle_type: str = Field(description="host_shm over HTTP; host_fd over IPC; see capabilities")
    name: str | None = Field(None, description="shared-memory object name, e.g. /game-frame0")
    size_bytes: int = Field(0, ge=0, lt=2**64, description="0 maps to the end of the object")
    offset_bytes: int = Field(0, ge=0, lt=2**64)
    access: Literal["read_only", "read_write"] = "read_write"
    # GPU handle types (docs/gpu.md)
    allocation_size_bytes: int = Field(
        0, ge=0, lt=2**64, description="opaque_fd: the Vulkan allocation's size; d3d12_heap: "
        "D3D12_HEAP_DESC.SizeInBytes; d3d12_resource: its GetResourceAllocationInfo size"
    )
    dedicated: bool | None = Field(
        None, description="opaque_fd: a dedicated Vulkan allocation (default false); "
        "d3d12_resource needs it and d3d12_heap refuses it (default: what the kind needs)"
    )
    device_uuid: str | None = Field(
        None, description="32 hex digits: VkPhysicalDeviceIDProperties.deviceUUID"
    )
    device_id: int | None = Field(None, ge=0, description="cuda_ipc: the CUDA device ordinal")
    ipc_handle: str | None = Field(
        None, min_length=128, max_length=128, description="cuda_ipc: cudaIpcMemHandle_t as hex"
    )

    adapter_luid: int | None = Field(
        None, ge=0, lt=2**64, description="d3d12_heap, d3d12_resource: the renderer's "
        "ID3D12Device::GetAdapterLuid() as (HighPart << 32) | LowPart"
    )
    handle: int | None = Field(
        None, ge=0, lt=2**64, description=f"host_shm (a section), d3d12_heap, d3d12_resource: {HANDLE_DOC}"
    )

    def handle_roles(self) -> dict[str, tuple[int, str]]:
        """The handles to duplicate: runtime argument -> (value in the renderer, role)."""
        if self.handle is None:
            return {}
        role = MEMORY_HANDLE_ROLES.get(self.handle_type)
        if role is None:
            raise _no_handle_for(self.handle_type, MEMORY_HANDLE_ROLES)
        return {"nt_handle": (self.handle, role)}

    def gpu_fields(self) -> dict[str, Any]:
        """The GPU fields, for the GPU handle types only (interop/cuda_memory.py, d3d12.py)."""
        if self.handle_type in ("d3d12_heap", "d3d12_resource"):
            return {
                "allocation_size_bytes": self.allocation_size_bytes,
                "dedicated": self.dedicated, "adapter_luid": self.adapter_luid,
            }
        if self.handle_type not in ("opaque_fd", "cuda_ipc"):
            return {}
        return {
            "allocation_size_bytes": self.allocation_size_bytes,
            "dedicated": bool(self.dedicated), "device_uuid": self.device_uuid,
            "device_id": self.device_id, "ipc_handle": self.ipc_handle,
        }


class FenceImportRequest(Strict):
    fence_type: str = Field(description="host_timeline; see capabilities")
    name: str | None = None
    device_uuid: str | None = Field(
        None, description="vk_timeline_opaque_fd: VkPhysicalDeviceIDProperties.deviceUUID (hex)"
    )
    adapter_luid: int | None = Field(
        None, ge=0, lt=2**64,
        description="d3d12_fence: ID3D12Device::GetAdapterLuid() as (HighPart << 32) | LowPart",
    )
    handle: int | None = Field(
        None, ge=0, lt=2**64,
        description=f"host_timeline (the page's section), d3d12_fence: {HANDLE_DOC}",
    )
    wake_handle: int | None = Field(
        None, ge=0, lt=2**64,
        description="host_timeline by handle: the page's wake semaphore, as handle",
    )
    current_value: int = Field(
        0, ge=0, lt=2**64,
        description=(
            "GPU fences (d3d12_fence, vk_timeline_opaque_fd): the fence's value now "
            "(ID3D12Fence::GetCompletedValue(), vkGetSemaphoreCounterValue); the service cannot "
            "read it, and signals only values above it, so it never moves the fence backwards"
        ),
    )

    def handle_roles(self) -> dict[str, tuple[int, str]]:
        """The handles to duplicate: runtime argument -> (value in the renderer, role)."""
        if self.handle is None and self.wake_handle is None:
            return {}
        role = FENCE_HANDLE_ROLES.get(self.fence_type)
        if role is None:
            raise _no_handle_for(self.fence_type, FENCE_HANDLE_ROLES)
        if self.fence_type == "host_timeline":
            if self.handle is None or self.wake_handle is None:
                raise InvalidArgument(
                    "a host_timeline fence by handle needs both handle (its page's section) and "
                    "wake_handle (its wake semaphore)"
                )
            return {"nt_handle": (self.handle, role), "wake_handle": (self.wake_handle, "wake")}
        if self.wake_handle is not None:
            raise InvalidArgument(f"{self.fence_type} takes no wake_handle")
        assert self.handle is not None
        return {"nt_handle": (self.handle, role)}


class ViewRequest(Strict):
    memory: str = Field(description="id of an imported memory")
    offset_bytes: int = Field(0, ge=0, lt=2**64, description="offset inside the import")
    datatype: str = Field(description="KServe datatype name: FP32, FP16, UINT8, INT64, ...")
    shape: list[Annotated[int, Field(lt=2**63)]] = Field(max_length=16)

    def spec(self) -> ViewSpec:
        return ViewSpec(self.memory, self.offset_bytes, self.datatype, list(self.shape))


class SessionCreateRequest(Strict):
    model: str
    inputs: dict[str, ViewRequest] = Field(max_length=256)
    outputs: dict[str, ViewRequest] = Field(max_length=256)
    wait_fence: str
    signal_fence: str
    mode: Literal["request", "streaming"] = Field(
        "request",
        description="request: one run per RUN request; streaming: the service runs each new "
        "input fence value by itself and signals the output fence with it (docs/streaming.md)",
    )
    policy: Literal["latest", "every"] = Field(
        "latest",
        description="streaming only: latest runs the newest value and skips those passed over; "
        "every runs each value in order (the only policy of sessions on GPU fences)",
    )
    spin_us: int | None = Field(
        None, ge=0, description="streaming only: longest spin per input wait; 0 always blocks; "
        "default: the service's --fence-spin-us",
    )
    start: bool = Field(True, description="streaming only: start at once (else paused)")

    def input_specs(self) -> dict[str, ViewSpec]:
        return {name: v.spec() for name, v in self.inputs.items()}

    def output_specs(self) -> dict[str, ViewSpec]:
        return {name: v.spec() for name, v in self.outputs.items()}


class RunRequest(Strict):
    wait_value: int = U64
    signal_value: int | None = Field(None, gt=0, lt=2**64, description="defaults to wait_value")
    timeout_ms: int | None = Field(None, ge=0)


class RunResponse(BaseModel):
    signal_value: int
    timings_us: dict[str, float]
