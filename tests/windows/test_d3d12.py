"""The D3D12 path in a Windows process (docs/windows.md, "D3D12"): the same rule tests as the
Linux lane, run against the win_amd64 build, then the capability answer and the ownership of a
refused import's NT handle. Under Wine there is no NVIDIA driver, so the answer is false with
the loader's reason; real hardware is listed in docs/windows.md as never run."""

from __future__ import annotations

import ctypes
import sys

import pytest

from fenceline import _native
from fenceline.errors import InvalidArgument, Unsupported
from fenceline.interop import d3d12
from fenceline.interop.capabilities import capabilities
from tests.unit.test_d3d12_rules import *  # noqa: F403  (the same rules, in this process)
from tests.windows.kernel import event_handle, handle_is_open


def nvidia_driver_present() -> bool:
    try:
        ctypes.WinDLL("nvcuda.dll")
    except OSError:
        return False
    return True


needs_no_driver = pytest.mark.skipif(
    sys.platform != "win32" or nvidia_driver_present(),
    reason="checks the answer of a Windows machine without the NVIDIA driver (the Wine lane)",
)


@needs_no_driver
def test_without_the_nvidia_driver_d3d12_is_false_with_the_loaders_reason() -> None:
    supported, reason = _native.d3d12_capability()
    assert supported is False and "nvcuda.dll" in reason
    caps = capabilities()
    for kind in ("d3d12_heap", "d3d12_resource"):
        assert caps["memory"][kind] is False and "nvcuda.dll" in caps["reasons"][kind]
    assert caps["fences"]["d3d12_fence"] is False and "nvcuda.dll" in caps["reasons"]["d3d12_fence"]
    for kind in ("host_fd", "opaque_fd", "cuda_ipc", "vk_timeline_opaque_fd"):
        assert "only on Linux" in caps["reasons"][kind]


@needs_no_driver
def test_a_refused_import_closes_the_nt_handle_it_was_given() -> None:
    h = event_handle()
    with pytest.raises(Unsupported, match="nvcuda.dll"):
        d3d12.import_d3d12_memory("d3d12_resource", nt_handle=h, allocation_size_bytes=1 << 20, adapter_luid=1)
    assert not handle_is_open(h)
    h = event_handle()
    with pytest.raises(Unsupported, match="nvcuda.dll"):
        _native.CudaSemaphore.import_d3d12_fence(None, handle=h)
    assert not handle_is_open(h)


@needs_no_driver
def test_a_request_that_breaks_a_rule_still_closes_its_handle() -> None:
    h = event_handle()
    with pytest.raises(InvalidArgument, match="exactly one"):
        _native.CudaMemory.import_d3d12(None, "d3d12_heap", name="h", handle=h, size=1 << 20)
    assert not handle_is_open(h)
