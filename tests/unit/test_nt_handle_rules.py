"""Handles passed over the Windows pipe instead of names (docs/windows.md, "Handles"): which
handle values a renderer may send, which object type each role needs, and which requests carry
which handles. Pure functions, so the Linux lane runs them and the Windows lane runs the same
ones under Wine (tests/windows/test_handles.py), where the object types are also checked
against what Windows reports for real objects."""

from __future__ import annotations

import pytest

from fenceline import _native
from fenceline.errors import InvalidArgument
from fenceline.protocol.schemas import FenceImportRequest, MemoryImportRequest

ROLES = {
    "section": "Section",
    "wake": "Semaphore",
    "d3d12_heap": "DxgkSharedResource",
    "d3d12_resource": "DxgkSharedResource",
    "d3d12_fence": "DxgkSharedSyncObject",
}


@pytest.mark.parametrize(("role", "kernel_type"), sorted(ROLES.items()))
def test_each_role_needs_its_kernel_object_type(role: str, kernel_type: str) -> None:
    assert _native.nt_object_type(role) == kernel_type
    _native.nt_check_object_type(role, kernel_type, 0x44)  # accepted: no error


def test_a_handle_of_another_type_is_refused_naming_both_types_and_the_handle() -> None:
    with pytest.raises(InvalidArgument) as e:
        _native.nt_check_object_type("section", "Semaphore", 0x1F4)
    assert "0x1f4" in str(e.value) and "'Semaphore'" in str(e.value) and "'Section'" in str(e.value)
    with pytest.raises(InvalidArgument, match="unknown type"):
        _native.nt_check_object_type("wake", "", 8)
    with pytest.raises(InvalidArgument, match="not a shared D3D12 fence"):
        _native.nt_check_object_type("d3d12_fence", "DxgkSharedResource", 8)


def test_type_names_are_compared_exactly() -> None:
    with pytest.raises(InvalidArgument):
        _native.nt_check_object_type("section", "section", 8)


def test_an_unknown_role_is_refused() -> None:
    with pytest.raises(InvalidArgument, match="no handle role 'event'"):
        _native.nt_object_type("event")


@pytest.mark.parametrize(
    ("value", "why"),
    [
        (0, "is 0"),
        (2**64 - 1, "pseudo-handle"),  # INVALID_HANDLE_VALUE, GetCurrentProcess()
        (2**64 - 2, "pseudo-handle"),  # GetCurrentThread()
        (2**32, "32 bits"),
    ],
)
def test_handle_values_that_cannot_name_a_renderers_object_are_refused(value: int, why: str) -> None:
    with pytest.raises(InvalidArgument, match=why):
        _native.nt_handle_value(value)


def test_a_plain_handle_value_is_accepted() -> None:
    assert _native.nt_handle_value(0x2C) == 0x2C


# -- which requests carry which handles ----------------------------------------------------------


@pytest.mark.parametrize(
    ("kind", "role"),
    [("host_shm", "section"), ("d3d12_heap", "d3d12_heap"), ("d3d12_resource", "d3d12_resource")],
)
def test_memory_by_handle_names_the_role_of_its_handle(kind: str, role: str) -> None:
    req = MemoryImportRequest(handle_type=kind, handle=0x40)
    assert req.handle_roles() == {"nt_handle": (0x40, role)}
    assert MemoryImportRequest(handle_type=kind, name="x").handle_roles() == {}


@pytest.mark.parametrize("kind", ["host_fd", "opaque_fd", "cuda_ipc"])
def test_memory_kinds_without_handles_refuse_one(kind: str) -> None:
    with pytest.raises(InvalidArgument, match=f"{kind} takes no handle"):
        MemoryImportRequest(handle_type=kind, handle=0x40).handle_roles()


def test_a_host_fence_by_handle_sends_its_section_and_its_wake_semaphore() -> None:
    req = FenceImportRequest(fence_type="host_timeline", handle=0x40, wake_handle=0x44)
    assert req.handle_roles() == {"nt_handle": (0x40, "section"), "wake_handle": (0x44, "wake")}
    for one in ({"handle": 0x40}, {"wake_handle": 0x44}):
        with pytest.raises(InvalidArgument, match="needs both"):
            FenceImportRequest(fence_type="host_timeline", **one).handle_roles()  # type: ignore[arg-type]


def test_a_d3d12_fence_by_handle_has_no_wake_semaphore() -> None:
    req = FenceImportRequest(fence_type="d3d12_fence", handle=0x40)
    assert req.handle_roles() == {"nt_handle": (0x40, "d3d12_fence")}
    with pytest.raises(InvalidArgument, match="no wake_handle"):
        FenceImportRequest(fence_type="d3d12_fence", handle=0x40, wake_handle=0x44).handle_roles()
    with pytest.raises(InvalidArgument, match="takes no handle"):
        FenceImportRequest(fence_type="vk_timeline_opaque_fd", handle=0x40).handle_roles()
