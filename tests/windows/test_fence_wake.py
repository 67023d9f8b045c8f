"""A host fence's wake semaphore must be able to wake every sleeper: its maximum count is
0x7FFFFFFF (docs/fences.md, Windows), since a signaller releases it once per sleeper and a
release past the maximum fails whole, waking nobody. One with another maximum is refused at
import, by name and by handle, with a message that says how to create it."""

from __future__ import annotations

import ctypes
import struct

import numpy as np
import pytest

from fenceline import _native
from fenceline.client import Fence, IpcClient, ServiceError
from fenceline.protocol.codec import Kind
from tests.windows.kernel import close_handle
from tests.windows.test_service import WinService

MAGIC, VERSION = 0x46544C46, 1


def semaphore(maximum: int, name: str | None = None) -> int:
    kernel32 = ctypes.WinDLL("kernel32", use_last_error=True)
    kernel32.CreateSemaphoreW.restype = ctypes.c_void_p
    kernel32.CreateSemaphoreW.argtypes = [ctypes.c_void_p, ctypes.c_long, ctypes.c_long, ctypes.c_wchar_p]
    handle = kernel32.CreateSemaphoreW(None, 0, maximum, name)
    assert handle, ctypes.get_last_error()
    return int(handle)


@pytest.mark.parametrize("maximum", [1, 64])
def test_a_named_fence_whose_wake_semaphore_cannot_wake_every_waiter_is_refused(
    service: WinService, unique: str, maximum: int
) -> None:
    name = f"Local\\{unique}-fence"
    page = _native.HostMemory.create_shm(name, 4096)
    page.array(np.dtype("u1"))[:6] = np.frombuffer(struct.pack("<IH", MAGIC, VERSION), np.uint8)
    wake = semaphore(maximum, name + ".wake")
    try:
        with IpcClient(service.pipe) as client, pytest.raises(ServiceError, match="maximum count") as e:
            client.import_fence(name=name)
        assert e.value.code == "invalid_argument" and "0x7FFFFFFF" in str(e.value)
        # The same rule where a renderer opens a fence by name itself.
        with pytest.raises(Exception, match="maximum count"):
            _native.HostFence.open_shm(name)
    finally:
        close_handle(wake)
        page.close()
    service.assert_released()


def test_a_fence_sent_by_handle_with_a_wake_semaphore_of_maximum_1_is_refused(service: WinService) -> None:
    with Fence(named=False) as good, IpcClient(service.pipe) as client:
        wake = semaphore(1)
        try:
            body = {"fence_type": "host_timeline", "handle": int(good.handle.handle), "wake_handle": wake}
            with pytest.raises(ServiceError, match="maximum count") as e:
                client._call(Kind.IMPORT_FENCE, body, [])
            assert e.value.code == "invalid_argument"
            # The fence with its own wake semaphore (0x7FFFFFFF) is taken.
            assert client.import_fence(good)
        finally:
            close_handle(wake)
    service.assert_released()
