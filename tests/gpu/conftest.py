"""What the GPU test modules share: the probes that say why a module is skipped, and the real
service (its own process) they run against.

A module names what it needs at its top, before it imports anything that needs it:

    require("GPU tests need CUDA + Vulkan here", cuda_reason, cuda_ep_reason, vulkan_reason)

Each probe returns "" when its part works here, else the reason; ``require`` runs them in order
(later probes may rely on earlier ones) and skips the whole module with the first reason."""

from __future__ import annotations

import json
import warnings
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

from fenceline import _native
from fenceline.models import build_repository
from tests.support.service import Service, running

if TYPE_CHECKING:
    from fenceline.client import IpcClient
    from fenceline.client.vulkan import VulkanDevice

# The models the GPU modules run: the add_* ones on the CUDA EP, add_720p left on the CPU EP
# (the Triton module mixes host and device regions).
CUDA_MODELS = ["add_1080p", "add_64x64"]
CPU_MODELS = ["add_720p"]


def cuda_reason() -> str:
    if not _native.cuda_available():
        return f"no CUDA backend: {_native.cuda_unavailable_reason()}"
    if not _native.cuda_devices():
        return "the CUDA driver sees no device"
    return ""


def cuda_ep_reason() -> str:
    try:
        import onnxruntime as ort
    except ImportError as e:
        return f"no onnxruntime: {e}"
    if "CUDAExecutionProvider" not in ort.get_available_providers():
        return "onnxruntime has no CUDAExecutionProvider (needs onnxruntime-gpu)"
    return ""


def _vulkan_device_reason(uuid: bytes | None) -> str:
    from fenceline.client import vulkan

    ok, why = vulkan.available()
    if not ok:
        return why
    try:
        with vulkan.VulkanDevice(uuid=uuid) as dev:
            if not dev.can_export_semaphores:
                return f"{dev.name} cannot export timeline semaphores as OPAQUE_FD"
    except vulkan.VulkanError as e:
        return f"no usable Vulkan device: {e}"
    return ""


def vulkan_reason() -> str:
    """A Vulkan device (the first) that exports memory and timeline semaphores."""
    return _vulkan_device_reason(None)


def two_gpus_reason() -> str:
    """Two CUDA devices, each with a Vulkan device that exports timeline semaphores."""
    devices = _native.cuda_devices()
    if len(devices) < 2:
        return f"this machine has {len(devices)} CUDA device(s)"
    for d in devices[:2]:
        why = _vulkan_device_reason(bytes(d["uuid"]))
        if why:
            return f"CUDA device {d['ordinal']}: {why}"
    return ""


def cupy_reason() -> str:
    try:
        import cupy  # noqa: F401
    except ImportError:
        return "CuPy is not installed"
    return ""


def triton_cuda_shm_reason() -> str:
    try:
        with warnings.catch_warnings():  # the helpers' imports warn about deprecations
            warnings.simplefilter("ignore")
            import tritonclient.utils.cuda_shared_memory  # noqa: F401
    except Exception as e:  # RuntimeError without cuda-python; ImportError for the rest
        return f"tritonclient.utils.cuda_shared_memory does not import: {e}"
    return ""


def require(what: str, *probes: Callable[[], str]) -> None:
    """Skips the calling module, at import, with ``what`` and the first probe's reason."""
    for probe in probes:
        reason = probe()
        if reason:
            pytest.skip(f"{what}: {reason}", allow_module_level=True)


@pytest.fixture(scope="session")
def gpu_repo(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = build_repository(tmp_path_factory.mktemp("gpu-models"), CUDA_MODELS + CPU_MODELS)
    for name in CUDA_MODELS:
        (root / name / "config.json").write_text(json.dumps({"execution_provider": "cuda"}))
    return root


@pytest.fixture(scope="module")
def gpu_service(gpu_repo: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Service]:
    """One service per module: a module's checks of the service's fds and maps see only its
    own objects."""
    with running(gpu_repo, tmp_path_factory.mktemp("gpu-service")) as svc:
        yield svc


@pytest.fixture(scope="module")
def device() -> Iterator[VulkanDevice]:
    from fenceline.client.vulkan import VulkanDevice

    with VulkanDevice() as dev:
        yield dev


@pytest.fixture
def client(gpu_service: Service) -> Iterator[IpcClient]:
    from fenceline.client import IpcClient

    with IpcClient(gpu_service.socket) as c:
        yield c
