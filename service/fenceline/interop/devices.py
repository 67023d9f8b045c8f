"""Where GPU objects live on a host with several GPUs (docs/gpu.md, "Several GPUs").

A renderer's exported memory and semaphores can only be imported on the GPU that made them, so
the service picks the CUDA device whose UUID is the renderer's Vulkan deviceUUID, and a session
runs on the device its memory and fences were imported on. The choices are plain Python over a
list of :class:`DeviceRecord`, so they are tested without a GPU; the native importer only does
what they decide.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Protocol, TypeVar

from fenceline.errors import InvalidArgument, ResourceExhausted

# Metric labels name devices by ordinal; hosts carry at most a handful of GPUs, and anything past
# this shares one label so a bad ordinal can never grow the label set.
MAX_DEVICE_LABELS = 64


@dataclass(frozen=True)
class DeviceRecord:
    """One CUDA device as the driver reports it."""

    ordinal: int
    name: str
    uuid: bytes
    total_memory_bytes: int = 0

    @property
    def label(self) -> str:
        return device_label(self.ordinal)

    def summary(self) -> str:
        return f"cuda:{self.ordinal} {self.name} {self.uuid.hex()}"


class OnDevice(Protocol):
    """Anything placed on a CUDA device: a DeviceRecord or a native CudaDevice."""

    @property
    def ordinal(self) -> int: ...

    @property
    def uuid(self) -> bytes: ...


D = TypeVar("D", bound=OnDevice)


def device_label(ordinal: int) -> str:
    """The bounded ``device`` label of metrics: ``cuda:N``, or ``cuda:other`` past the bound."""
    if 0 <= ordinal < MAX_DEVICE_LABELS:
        return f"cuda:{ordinal}"
    return "cuda:other"


def inventory() -> list[DeviceRecord]:
    """Every CUDA device here (empty without CUDA)."""
    from fenceline import _native

    return [
        DeviceRecord(int(d["ordinal"]), str(d["name"]), bytes(d["uuid"]), int(d["total_memory"]))
        for d in _native.cuda_devices()
    ]


def _listing(devices: Sequence[DeviceRecord]) -> str:
    if not devices:
        return "this machine has no CUDA device"
    return "CUDA devices here: " + "; ".join(d.summary() for d in devices)


def select_device(
    devices: Sequence[DeviceRecord], *, uuid: bytes | None = None, ordinal: int | None = None
) -> DeviceRecord:
    """The device with ``uuid`` (the renderer's VkPhysicalDeviceIDProperties.deviceUUID), else
    the one with ``ordinal``. A UUID wins over an ordinal; when both are given they must agree.
    InvalidArgument, listing the devices, when none matches."""
    if uuid is not None:
        if len(uuid) != 16:
            raise InvalidArgument(f"a device UUID is 16 bytes, not {len(uuid)}")
        match = next((d for d in devices if d.uuid == uuid), None)
        if match is None:
            raise InvalidArgument(
                f"no CUDA device here has the renderer's device UUID {uuid.hex()} (the service "
                f"and the renderer must use the same GPU; {_listing(devices)})"
            )
        if ordinal is not None and ordinal != match.ordinal:
            raise InvalidArgument(
                f"device_id {ordinal} and device_uuid {uuid.hex()} name different GPUs "
                f"(that UUID is cuda:{match.ordinal}); send one of them"
            )
        return match
    if ordinal is None:
        raise InvalidArgument("name the GPU: device_uuid (or device_id, the CUDA ordinal)")
    match = next((d for d in devices if d.ordinal == ordinal), None)
    if match is None:
        raise InvalidArgument(f"CUDA device {ordinal} does not exist ({_listing(devices)})")
    return match


def _where(d: OnDevice) -> str:
    return f"cuda:{d.ordinal} ({bytes(d.uuid).hex()})"


def session_device(
    tensors: Iterable[tuple[str, D]], fences: Iterable[tuple[str, OnDevice]]
) -> D:
    """The device a session runs on: the one every tensor and both fences were imported on.
    ``tensors``: (what, device) pairs such as ("input 'x'", device), in binding order; the first
    one places the session. InvalidArgument, saying which objects differ, otherwise."""
    tensors = list(tensors)
    if not tensors:
        raise InvalidArgument("a GPU session binds at least one tensor")
    first_what, device = tensors[0]
    for what, d in tensors[1:]:
        if d.ordinal != device.ordinal:
            raise InvalidArgument(
                f"{what} is on {_where(d)} but {first_what} is on {_where(device)}: every "
                "tensor of a session must live on one GPU (import them with the same device_uuid)"
            )
    for what, f in fences:
        if f.ordinal != device.ordinal:
            raise InvalidArgument(
                f"{what} was imported on {_where(f)} but the session's memory is on "
                f"{_where(device)}: a session's memory and fences must sit on one GPU (import "
                "the renderer's semaphores with the device_uuid of its memory)"
            )
    return device


def check_device_quota(label: str, sessions_on_device: int, limit: int) -> None:
    if sessions_on_device >= limit:
        raise ResourceExhausted(
            f"{label} already has {sessions_on_device} sessions, the most allowed per GPU "
            "(--max-sessions-per-device); release sessions on it first"
        )
