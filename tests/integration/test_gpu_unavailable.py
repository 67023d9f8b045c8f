"""Where there is no CUDA driver: the GPU handle kinds are reported as not importable, and an
attempt is a clear ``unsupported`` error that closes the fd it carried."""

from __future__ import annotations

import os

import pytest

from fenceline import _native
from fenceline.client import IpcClient, ServiceError
from tests.support.service import Service

if _native.cuda_available():
    pytest.skip("this machine has CUDA: see test_gpu.py", allow_module_level=True)


def test_gpu_kinds_are_not_importable_without_cuda() -> None:
    assert not _native.can_import_memory("opaque_fd")
    assert not _native.can_import_memory("cuda_ipc")
    assert not _native.can_import_fence("vk_timeline_opaque_fd")
    assert "libcuda.so.1" in _native.cuda_unavailable_reason()


def test_gpu_imports_are_unsupported_and_close_their_fd(service: Service) -> None:
    fd = os.memfd_create("not-vulkan-memory")
    os.ftruncate(fd, 4096)
    try:
        with IpcClient(service.socket) as c:
            caps = c.server["capabilities"]
            assert caps["memory"]["opaque_fd"] is False
            assert caps["fences"]["vk_timeline_opaque_fd"] is False
            with pytest.raises(ServiceError) as mem_err:
                c.import_gpu_memory(fd, 4096, device_uuid="11" * 16)
            with pytest.raises(ServiceError) as fence_err:
                c.import_gpu_fence(fd, device_uuid="11" * 16)
            assert not any("not-vulkan-memory" in target for target in service.fds())
    finally:
        os.close(fd)
    for e in (mem_err.value, fence_err.value):
        assert e.code == "unsupported"
        assert "cannot be imported on this machine" in e.message
