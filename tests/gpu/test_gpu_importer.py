"""The CUDA backend of the native importer on its own, without onnxruntime: Vulkan memory and
timeline semaphores exported as OPAQUE_FD, imported into CUDA, waited and signalled on a CUDA
stream around a CuPy kernel. Skipped, with the reason, where CUDA, Vulkan or CuPy is missing."""

from __future__ import annotations

import os

import numpy as np
import pytest

from fenceline import _native
from fenceline.errors import FencelineError, InvalidArgument
from tests.gpu.conftest import cuda_reason, cupy_reason, require, vulkan_reason

pytestmark = pytest.mark.gpu


require("GPU importer tests need CUDA + Vulkan + CuPy", cuda_reason, cupy_reason, vulkan_reason)

import cupy  # noqa: E402

from fenceline.client.vulkan import (  # noqa: E402
    Buffer,
    Submission,
    TimelineSemaphore,
    VulkanDevice,
    close_fd,
    copy_commands,
)

N = 1 << 20  # floats


DEVICE_TO_DEVICE = 3  # cudaMemcpyKind; a copy needs no kernel compiled at run time


def test_cuda_device_matches_the_vulkan_device_uuid(device: VulkanDevice) -> None:
    cuda = _native.CudaDevice.by_uuid(device.uuid)
    assert cuda.uuid == device.uuid
    assert any(d["uuid"] == device.uuid for d in _native.cuda_devices())
    with pytest.raises(InvalidArgument, match="device UUID 0000"):
        _native.CudaDevice.by_uuid(b"\0" * 16)


def test_vulkan_frame_round_trips_through_a_cuda_stream(device: VulkanDevice) -> None:
    cuda = _native.CudaDevice.by_uuid(device.uuid)
    src, dst = Buffer(device, N * 4), Buffer(device, N * 4)
    staging, result = Buffer(device, N * 4, exported=False), Buffer(device, N * 4, exported=False)
    ready, done = TimelineSemaphore(device), TimelineSemaphore(device)
    imports = []
    try:
        for buf in (src, dst):
            imports.append(
                _native.CudaMemory.import_opaque_fd(cuda, buf.export_fd(), buf.allocation_size, 0, N * 4, True)
            )
        sem_ready = _native.CudaSemaphore.import_timeline_fd(cuda, ready.export_fd())
        sem_done = _native.CudaSemaphore.import_timeline_fd(cuda, done.export_fd())
        stream = _native.CudaStream(cuda)
        frame = np.random.default_rng(1).standard_normal(N, dtype=np.float32)
        upload = Submission(device, copy_commands(staging, src, N * 4), signal=ready)
        readback = Submission(device, copy_commands(dst, result, N * 4), wait=done)
        for value in (1, 2, 3):
            stream.wait(sem_ready, value)  # enqueued before the renderer signals
            cupy.cuda.runtime.memcpyAsync(
                imports[1].pointer, imports[0].pointer, N * 4, DEVICE_TO_DEVICE, stream.handle
            )
            stream.signal(sem_done, value)
            stream.record()
            assert not stream.synchronize(20_000_000, 0), "the stream did not wait for the semaphore"
            staging.array(np.float32, [N])[:] = frame * value
            upload.submit(value)
            assert done.wait(value, 5.0)
            readback.submit(wait_value=value)
            device.wait_idle()
            np.testing.assert_array_equal(result.array(np.float32, [N]), frame * value)
            assert stream.synchronize(1_000_000_000, 0)
        for m in imports:
            m.close()
        sem_ready.close()
        sem_done.close()
    finally:
        device.wait_idle()
        for obj in (src, dst, staging, result, ready, done):
            obj.close()


def test_unsignalled_wait_times_out_then_completes_once_signalled(device: VulkanDevice) -> None:
    cuda = _native.CudaDevice.by_uuid(device.uuid)
    sem = TimelineSemaphore(device)
    try:
        imported = _native.CudaSemaphore.import_timeline_fd(cuda, sem.export_fd())
        stream = _native.CudaStream(cuda)
        stream.wait(imported, 5)
        stream.record()
        assert not stream.synchronize(50_000_000, 10_000)
        assert not stream.done()
        sem.signal(5)
        assert stream.synchronize(2_000_000_000, 0)
        imported.close()
    finally:
        sem.close()


def test_failed_import_closes_the_fd(device: VulkanDevice) -> None:
    cuda = _native.CudaDevice.by_uuid(device.uuid)
    fd = os.memfd_create("not-vulkan")
    os.ftruncate(fd, 4096)
    with pytest.raises(FencelineError):
        _native.CudaMemory.import_opaque_fd(cuda, fd, 4096, 0, 0, False)
    with pytest.raises(OSError):
        os.fstat(fd)


def test_views_are_bounds_checked(device: VulkanDevice) -> None:
    cuda = _native.CudaDevice.by_uuid(device.uuid)
    buf = Buffer(device, 4096)
    fd = buf.export_fd()
    try:
        mem = _native.CudaMemory.import_opaque_fd(cuda, fd, buf.allocation_size, 0, 4096, True)
        fd = -1
        view = _native.CudaTensorView(mem, 1024, 4, [256])
        assert view.address == mem.pointer + 1024 and view.nbytes == 1024
        with pytest.raises(InvalidArgument, match="outside"):
            _native.CudaTensorView(mem, 1028, 4, [768])
        with pytest.raises(InvalidArgument):
            _native.CudaMemory.import_opaque_fd(cuda, buf.export_fd(), buf.allocation_size, 0, 2**40, True)
        del view
        mem.close()
    finally:
        if fd >= 0:
            close_fd(fd)
        buf.close()
