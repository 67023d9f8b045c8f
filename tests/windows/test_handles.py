"""Handles instead of names over the named pipe (docs/windows.md, "Handles"): a renderer process
creates an unnamed section and an unnamed fence, sends their handle values, and the service
duplicates them from the identified pipe client, checks their object types and sizes, and
closes them when the import is released or the connection dies. Bad or foreign handle values
are refused with invalid_argument, and the service's handle count shows nothing is left."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from fenceline import _native
from fenceline.client import Fence, IpcClient, ServiceError, SharedFrame
from fenceline.protocol.codec import Kind
from tests.unit.test_nt_handle_rules import *  # noqa: F403  (the same rules, in this process)
from tests.windows.kernel import close_handle, event_handle
from tests.windows.test_service import FRAMES, WinService, finish, renderer


def test_the_kernel_types_the_rules_expect_are_what_windows_reports() -> None:
    """The host roles' type names, checked on real objects (the D3D12 ones cannot be made here:
    docs/windows.md lists them as never run)."""
    win: object = _native
    object_type_name: Callable[[int], str] = getattr(win, "object_type_name")  # noqa: B009
    with SharedFrame(4096, named=False) as frame, Fence(named=False) as fence:
        assert object_type_name(frame.handle.handle) == _native.nt_object_type("section")
        assert object_type_name(fence.handle.handle) == _native.nt_object_type("section")
        assert object_type_name(fence.handle.wake_handle) == _native.nt_object_type("wake")
    event = event_handle()
    try:
        assert object_type_name(event) == "Event"
    finally:
        close_handle(event)


def test_renderer_runs_200_frames_by_handle_with_outputs_equal_to_onnxruntime(service: WinService) -> None:
    result = finish(renderer(service, "pipe", "--unnamed"))
    assert result == {"frames": FRAMES, "mismatches": 0, "seconds": result["seconds"]}
    # The renderer quit: the service released every import it made from its handles.
    assert service.metric("fenceline_interop_imported_handles") == 0
    assert service.metric("fenceline_ipc_open_connections") == 0


def test_a_by_handle_renderer_leaves_no_handle_in_the_service(service: WinService) -> None:
    before = service.baseline_handles()
    finish(renderer(service, "pipe", "--unnamed"))
    service.assert_handles_back(before)


def test_a_released_handle_import_closes_the_services_duplicate(service: WinService) -> None:
    with IpcClient(service.pipe) as client, SharedFrame(65536, named=False) as frame:
        before = service.baseline_handles()
        mem = client.import_memory(frame)
        assert client.describe("memory", mem)["size_bytes"] == 65536
        assert service.settled_handles() > before  # the service's duplicate of the section
        client.release_memory(mem)
        service.assert_handles_back(before)


def refused(client: IpcClient, kind: Kind, body: dict[str, object]) -> ServiceError:
    with pytest.raises(ServiceError) as e:
        client._call(kind, body)
    return e.value


def test_bad_and_foreign_handle_values_are_refused_with_stable_codes(service: WinService) -> None:
    before = service.baseline_handles()
    event = event_handle()
    with IpcClient(service.pipe) as client, SharedFrame(4096, named=False) as frame, \
            Fence(named=False) as fence:
        section, wake = int(frame.handle.handle), int(fence.handle.wake_handle)
        cases: list[tuple[Kind, dict[str, object], str]] = [
            (Kind.IMPORT_MEMORY, {"handle_type": "host_shm", "handle": 0}, "is 0"),
            (Kind.IMPORT_MEMORY, {"handle_type": "host_shm", "handle": 2**64 - 1}, "pseudo-handle"),
            (Kind.IMPORT_MEMORY, {"handle_type": "host_shm", "handle": 0x3FFFFFC}, "has no handle"),
            (Kind.IMPORT_MEMORY, {"handle_type": "host_shm", "handle": event}, "not a section"),
            (Kind.IMPORT_MEMORY, {"handle_type": "host_shm", "handle": wake}, "'Semaphore'"),
            (Kind.IMPORT_MEMORY, {"handle_type": "host_shm", "handle": section, "size_bytes": 8192},
             "outside"),
            (Kind.IMPORT_MEMORY, {"handle_type": "host_shm", "handle": section, "name": "Local\\x"},
             "exactly one"),
            (Kind.IMPORT_FENCE, {"fence_type": "host_timeline", "handle": section}, "needs both"),
            (Kind.IMPORT_FENCE, {"fence_type": "host_timeline", "handle": fence.handle.handle,
                                 "wake_handle": section}, "not the fence's wake semaphore"),
            (Kind.IMPORT_FENCE, {"fence_type": "host_timeline", "handle": section,
                                 "wake_handle": wake}, "not a host_timeline fence"),
            # D3D12 by handle takes the same path, up to the object type (no D3D12 object can
            # be made under Wine: docs/windows.md lists the real one as never run).
            (Kind.IMPORT_MEMORY, {"handle_type": "d3d12_heap", "handle": section,
                                  "allocation_size_bytes": 1 << 20, "adapter_luid": 1},
             "not a shared D3D12 heap"),
            (Kind.IMPORT_FENCE, {"fence_type": "d3d12_fence", "handle": event, "adapter_luid": 1},
             "not a shared D3D12 fence"),
        ]
        for kind, body, fragment in cases:
            err = refused(client, kind, body)
            assert err.code == "invalid_argument" and fragment in str(err), (body, str(err))
        # Still one usable connection, and a good handle still imports after the refusals.
        assert client.import_fence(fence)
    close_handle(event)
    assert service.metric("fenceline_interop_imported_handles") == 0
    service.assert_handles_back(before)
