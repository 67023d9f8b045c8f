"""The D3D12 path's decisions (docs/windows.md, "D3D12") as inputs and outputs of the native
importer's pure functions: which CUDA handle type, flags, size and name each request becomes,
which names and handles are refused, which device a LUID picks, and the capability answer for
given platform facts. Nothing here needs Windows or a GPU: the Linux lane runs these tests, and
the Windows lane runs the same ones under Wine (tests/windows/test_d3d12.py)."""

from __future__ import annotations

from typing import Any

import pytest

from fenceline import _native
from fenceline.errors import InvalidArgument
from fenceline.interop.d3d12 import D3D12FenceImport
from fenceline.interop.vk_fence import VkFenceImport

MiB = 1 << 20
HEAP, RESOURCE, FENCE = 4, 5, 4  # cuda.h: CU_EXTERNAL_{MEMORY,SEMAPHORE}_HANDLE_TYPE_D3D12_*
DEDICATED = 0x1  # CUDA_EXTERNAL_MEMORY_DEDICATED


def rule(kind: str = "d3d12_heap", **kw: object) -> str:
    """The message of the rule a request breaks."""
    with pytest.raises(InvalidArgument) as e:
        _native.d3d12_memory_descriptor(kind, **kw)  # type: ignore[arg-type]
    return str(e.value)


# -- descriptors -------------------------------------------------------------------------------


def test_a_named_heap_becomes_a_d3d12_heap_import_without_the_dedicated_flag() -> None:
    d = _native.d3d12_memory_descriptor("d3d12_heap", name="Local\\game-frame", size=4 * MiB)
    assert d == {
        "handle_type": HEAP, "flags": 0, "size": 4 * MiB, "name": "Local\\game-frame",
        "handle": None, "offset": 0, "mapped_size": 4 * MiB,
    }


def test_a_committed_resource_is_imported_dedicated() -> None:
    d = _native.d3d12_memory_descriptor("d3d12_resource", name="frame", size=MiB)
    assert (d["handle_type"], d["flags"]) == (RESOURCE, DEDICATED)
    assert _native.d3d12_memory_descriptor("d3d12_resource", name="f", size=MiB, dedicated=True)["flags"] == DEDICATED


def test_a_handle_import_carries_the_handle_and_no_name() -> None:
    d = _native.d3d12_memory_descriptor("d3d12_resource", handle=0x1A4, size=MiB)
    assert (d["handle"], d["name"]) == (0x1A4, None)
    f = _native.d3d12_fence_descriptor(handle=0x2B0)
    assert f == {"handle_type": FENCE, "flags": 0, "name": None, "handle": 0x2B0}


def test_a_fence_is_a_d3d12_fence_semaphore_with_no_flags() -> None:
    assert _native.d3d12_fence_descriptor(name="Global\\game-fence") == {
        "handle_type": FENCE, "flags": 0, "name": "Global\\game-fence", "handle": None,
    }


def test_exactly_one_of_name_and_handle() -> None:
    assert "exactly one of name" in rule(size=MiB)
    assert "not both" in rule(name="a", handle=4, size=MiB)
    for kw in ({}, {"name": "a", "handle": 4}):
        with pytest.raises(InvalidArgument, match="exactly one of name"):
            _native.d3d12_fence_descriptor(**kw)  # type: ignore[arg-type]


def test_the_dedicated_flag_follows_cuda_rules() -> None:
    assert "dedicated flag" in rule("d3d12_resource", name="r", size=MiB, dedicated=False)
    assert "cannot be dedicated" in rule("d3d12_heap", name="h", size=MiB, dedicated=True)
    assert _native.d3d12_memory_descriptor("d3d12_heap", name="h", size=MiB, dedicated=False)["flags"] == 0


def test_the_size_is_mandatory_and_names_where_it_comes_from() -> None:
    assert "SizeInBytes" in rule("d3d12_heap", name="h")
    assert "GetResourceAllocationInfo" in rule("d3d12_resource", name="r")


def test_views_of_the_import_stay_inside_it() -> None:
    d = _native.d3d12_memory_descriptor("d3d12_heap", name="h", size=MiB, offset=64 * 1024)
    assert (d["offset"], d["mapped_size"]) == (64 * 1024, MiB - 64 * 1024)
    d = _native.d3d12_memory_descriptor("d3d12_heap", name="h", size=MiB, offset=4096, mapped_size=8192)
    assert (d["offset"], d["mapped_size"], d["size"]) == (4096, 8192, MiB)
    assert "not inside" in rule(name="h", size=MiB, offset=MiB)
    assert "ends past" in rule(name="h", size=MiB, offset=4096, mapped_size=MiB)
    assert "ends past" in rule(name="h", size=MiB, offset=1, mapped_size=2**64 - 1)


def test_only_d3d12_kinds_are_described() -> None:
    assert "not a D3D12 memory kind" in rule("opaque_fd", name="x", size=MiB)


# -- names and handles ---------------------------------------------------------------------------


@pytest.mark.parametrize("name", ["frame", "Global\\frame", "Local\\frame", "a" * 259, "Local\\ä-帧-🎮", "Local\\a/b:c"])
def test_names_the_driver_accepts_reach_it_unchanged(name: str) -> None:
    assert _native.d3d12_shared_name(name) == name


@pytest.mark.parametrize(
    ("name", "why"),
    [
        ("", "empty"),
        ("a\0b", "NUL"),
        ("a" * 260, "at most 259"),
        ("🎮" * 130, "260 UTF-16 units"),  # 130 characters, but two UTF-16 units each
        ("Local\\", "no name after it"),
        ("Global\\", "no name after it"),
        ("Session\\1\\frame", "backslash"),
        ("Local\\a\\b", "backslash"),
        ("local\\frame", "backslash"),  # the namespace prefixes are spelled exactly
    ],
)
def test_names_the_driver_would_refuse_are_refused_here(name: str, why: str) -> None:
    with pytest.raises(InvalidArgument, match=why):
        _native.d3d12_shared_name(name)
    with pytest.raises(InvalidArgument, match=why):
        _native.d3d12_fence_descriptor(name=name)


@pytest.mark.parametrize(
    ("handle", "why"),
    [(0, "NULL"), (2**64 - 1, "pseudo-handle"), (2**64 - 2, "pseudo-handle"), (2**32, "32 bits")],
)
def test_handles_that_cannot_name_a_shared_object_are_refused(handle: int, why: str) -> None:
    assert why in rule(handle=handle, size=MiB)
    with pytest.raises(InvalidArgument, match=why):
        _native.d3d12_fence_descriptor(handle=handle)


# -- LUID matching -------------------------------------------------------------------------------


def test_a_luid_is_its_eight_bytes_read_little_endian() -> None:
    raw = bytes([0x01, 0x02, 0x03, 0x04, 0x05, 0x06, 0x07, 0x08])  # LowPart 0x04030201, HighPart 0x08070605
    assert _native.d3d12_luid_from_bytes(raw) == 0x0807060504030201
    assert _native.d3d12_luid_text(0x0807060504030201) == "08070605:04030201"
    with pytest.raises(InvalidArgument, match="8 bytes"):
        _native.d3d12_luid_from_bytes(b"\x01" * 16)


def test_the_device_with_the_renderers_adapter_luid_is_chosen() -> None:
    devices = [(0, "RTX A", 0x0000_0000_0000_C3A1), (1, "RTX B", 0x0000_0000_0000_D1F0), (2, "TCC card", None)]
    assert _native.d3d12_select_device(devices, 0xD1F0) == 1
    assert _native.d3d12_select_device(devices, 0xC3A1) == 0


def test_no_matching_luid_lists_every_device() -> None:
    devices = [(0, "RTX A", 0xC3A1), (1, "TCC card", None)]
    with pytest.raises(InvalidArgument) as e:
        _native.d3d12_select_device(devices, 0x1_0000_0042)
    msg = str(e.value)
    assert "00000001:00000042" in msg and "cuda:0 RTX A LUID 00000000:0000c3a1" in msg
    assert "cuda:1 TCC card LUID none" in msg
    with pytest.raises(InvalidArgument, match="no CUDA device"):
        _native.d3d12_select_device([], 1)


# -- capability ----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("facts", "answer"),
    [
        ((False, True, "", True, 1), (False, "only on Windows")),
        ((True, False, "the NVIDIA driver (nvcuda.dll) is not installed: LoadLibrary error 126", True, 0),
         (False, "nvcuda.dll")),
        ((True, False, "", False, 0), (False, "nvcuda.dll")),
        ((True, True, "", False, 1), (False, "cuDeviceGetLuid")),
        ((True, True, "", True, 0), (False, "no CUDA device")),
        ((True, True, "", True, 2), (True, "")),
    ],
)
def test_capability_is_true_only_on_windows_with_a_driver_and_a_device(
    facts: tuple[bool, bool, str, bool, int], answer: tuple[bool, str]
) -> None:
    supported, reason = _native.d3d12_capability_for(*facts)
    assert supported is answer[0] and answer[1] in reason
    assert (reason == "") is supported


# -- the output fence's starting value ---------------------------------------------------------


def test_a_gpu_fence_starts_at_the_value_the_renderer_stated_so_no_signal_goes_backwards() -> None:
    # CUDA cannot read an imported fence and its signal sets the value: the service's first
    # signal must go above what the renderer said the fence holds (a RUN at or below it is
    # refused with conflict, cuda_session.run). The CUDA objects are not used by the bookkeeping.
    cuda: Any = None
    assert D3D12FenceImport("d3d12_fence", cuda, cuda, 41).value == 41
    assert D3D12FenceImport("d3d12_fence", cuda, cuda).value == 0  # stated 0: a fresh fence
    assert VkFenceImport("vk_timeline_opaque_fd", cuda, cuda, 7).enqueued_signal == 7
