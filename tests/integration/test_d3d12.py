"""D3D12 on a machine where it cannot exist (Linux): every kind reported false with the reason,
every import refused with it by the service, over HTTP, IPC and the C client; the mapped-range
rule checked over its whole input space. The rules themselves: tests/unit/test_d3d12_rules.py."""

from __future__ import annotations

import json
import os
import socket

import httpx
import pytest
from hypothesis import given
from hypothesis import strategies as st

from fenceline import _native
from fenceline.client import ClientError, IpcClient, ServiceError, SharedFrame
from fenceline.errors import InvalidArgument, Unsupported
from fenceline.interop import d3d12
from fenceline.protocol import codec
from tests.support.service import Service

MiB = 1 << 20


@given(
    size=st.integers(1, 2**64 - 1), offset=st.integers(0, 2**64 - 1), mapped=st.integers(0, 2**64 - 1)
)
def test_the_mapped_range_is_accepted_exactly_when_it_fits(size: int, offset: int, mapped: int) -> None:
    fits = offset < size and offset + (mapped or size - offset) <= size
    try:
        d = _native.d3d12_memory_descriptor("d3d12_heap", name="h", size=size, offset=offset, mapped_size=mapped)
    except InvalidArgument:
        assert not fits
    else:
        assert fits and d["offset"] + d["mapped_size"] <= size


def test_linux_never_reports_d3d12() -> None:
    assert _native.d3d12_capability() == (False, "D3D12 shared handles exist only on Windows")
    assert not _native.can_import_memory("d3d12_heap") and not _native.can_import_memory("d3d12_resource")
    assert not _native.can_import_fence("d3d12_fence")


def test_imports_are_refused_with_the_reason_before_anything_is_opened() -> None:
    with pytest.raises(Unsupported, match="only on Windows"):
        d3d12.import_d3d12_memory("d3d12_heap", name="h", allocation_size_bytes=MiB, adapter_luid=1)
    with pytest.raises(Unsupported, match="only on Windows"):
        d3d12.import_d3d12_fence("d3d12_fence", name="f", adapter_luid=1)
    with pytest.raises(Unsupported, match="only on Windows"):
        _native.CudaDevice.by_luid(1)


def test_a_stray_fd_is_closed_and_refused() -> None:
    with SharedFrame(4096) as frame:
        fd = os.dup(frame.fd)
        with pytest.raises(InvalidArgument, match="never as a file descriptor"):
            d3d12.import_d3d12_memory("d3d12_heap", name="h", fd=fd, allocation_size_bytes=MiB, adapter_luid=1)
        with pytest.raises(OSError):
            os.fstat(fd)


# -- the service ---------------------------------------------------------------------------------


def test_capabilities_say_why_d3d12_is_false(service: Service) -> None:
    caps = httpx.get(service.url + "/v2/interop/capabilities").json()
    for kind in ("d3d12_heap", "d3d12_resource"):
        assert caps["memory"][kind] is False and "only on Windows" in caps["reasons"][kind]
    assert caps["fences"]["d3d12_fence"] is False and "only on Windows" in caps["reasons"]["d3d12_fence"]
    assert "host_shm" not in caps["reasons"] and "host_timeline" not in caps["reasons"]


def test_http_d3d12_imports_answer_unsupported_with_the_reason(service: Service) -> None:
    body = {"handle_type": "d3d12_resource", "name": "Local\\frame", "allocation_size_bytes": MiB, "adapter_luid": 7}
    r = httpx.post(service.url + "/v2/interop/memory", json=body)
    assert r.status_code == 501 and r.json()["code"] == "unsupported" and "only on Windows" in r.json()["error"]
    r = httpx.post(service.url + "/v2/interop/fences", json={"fence_type": "d3d12_fence", "name": "f", "adapter_luid": 7})
    assert r.status_code == 501 and "only on Windows" in r.json()["error"]
    r = httpx.post(service.url + "/v2/interop/memory", json={**body, "adapter_luid": -1})
    assert r.status_code == 422


def test_ipc_d3d12_imports_answer_unsupported(service: Service) -> None:
    with IpcClient(service.socket) as c:
        with pytest.raises(ServiceError) as e:
            c.import_d3d12_memory("d3d12_heap", "Local\\frame", MiB, adapter_luid=7)
        assert e.value.code == "unsupported" and "only on Windows" in str(e.value)
        with pytest.raises(ServiceError) as e:
            c.import_d3d12_fence("Local\\fence", adapter_luid=7)
        assert e.value.code == "unsupported"
        assert isinstance(e.value, ClientError)


def test_an_fd_sent_with_a_d3d12_import_is_closed_by_the_service(service: Service) -> None:
    before, _ = service.settled()
    with socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET) as s, SharedFrame(4096) as frame:
        s.connect(str(service.socket))
        body = json.dumps({"handle_type": "d3d12_heap", "name": "h", "allocation_size_bytes": MiB, "adapter_luid": 1})
        socket.send_fds(s, [codec.encode(codec.Kind.IMPORT_MEMORY, 1, body.encode())], [frame.fd])
        reply = codec.decode(s.recv(codec.MAX_FRAME))
        assert reply.kind == codec.Kind.ERROR
        assert "never as a file descriptor" in codec.decode_error(reply.body).message
    after, _ = service.settled()
    assert after == before


# -- handles instead of names: Windows pipe only (docs/windows.md, "Handles") ---------------------


def test_ipc_requests_carrying_a_windows_handle_are_refused_on_linux(service: Service) -> None:
    with IpcClient(service.socket) as c:
        for call in (
            lambda: c.import_d3d12_memory("d3d12_heap", None, MiB, adapter_luid=7, handle=0x40),
            lambda: c.import_d3d12_fence(adapter_luid=7, handle=0x40),
            lambda: c._call(codec.Kind.IMPORT_MEMORY, {"handle_type": "host_shm", "handle": 0x40}),
            lambda: c._call(codec.Kind.IMPORT_FENCE,
                            {"fence_type": "host_timeline", "handle": 0x40, "wake_handle": 0x44}),
        ):
            with pytest.raises(ServiceError) as e:
                call()
            assert e.value.code == "unsupported" and "Windows named pipe" in str(e.value)
        c.model_metadata("add_64x64")  # the connection stays usable


def test_an_fd_sent_beside_a_windows_handle_is_closed(service: Service) -> None:
    before, _ = service.settled()
    with socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET) as s, SharedFrame(4096) as frame:
        s.connect(str(service.socket))
        body = json.dumps({"handle_type": "host_fd", "handle": 0x40})
        socket.send_fds(s, [codec.encode(codec.Kind.IMPORT_MEMORY, 1, body.encode())], [frame.fd])
        reply = codec.decode(s.recv(codec.MAX_FRAME))
        assert reply.kind == codec.Kind.ERROR and codec.decode_error(reply.body).code == "invalid_argument"
        body = json.dumps({"handle_type": "d3d12_heap", "handle": 0x40, "allocation_size_bytes": MiB, "adapter_luid": 1})
        socket.send_fds(s, [codec.encode(codec.Kind.IMPORT_MEMORY, 2, body.encode())], [frame.fd])
        reply = codec.decode(s.recv(codec.MAX_FRAME))
        assert reply.kind == codec.Kind.ERROR and codec.decode_error(reply.body).code == "unsupported"
    after, _ = service.settled()
    assert after == before


def test_http_refuses_handle_values(service: Service) -> None:
    for path, body in (
        ("memory", {"handle_type": "host_shm", "handle": 0x40}),
        ("memory", {"handle_type": "d3d12_resource", "handle": 0x40, "allocation_size_bytes": MiB, "adapter_luid": 1}),
        ("fences", {"fence_type": "host_timeline", "handle": 0x40, "wake_handle": 0x44}),
        ("fences", {"fence_type": "d3d12_fence", "handle": 0x40, "adapter_luid": 1}),
    ):
        r = httpx.post(f"{service.url}/v2/interop/{path}", json=body)
        assert r.status_code == 400 and r.json()["code"] == "invalid_argument", r.text
        assert "named pipe" in r.json()["error"]


def test_a_gpu_fences_current_value_is_accepted_and_a_host_fences_refused(service: Service) -> None:
    # A D3D12 output fence's value now (GetCompletedValue) travels with its import; the request is
    # well formed and refused only for the platform. A host fence's value is on its page.
    r = httpx.post(service.url + "/v2/interop/fences",
                   json={"fence_type": "d3d12_fence", "name": "f", "adapter_luid": 7, "current_value": 41})
    assert r.status_code == 501 and r.json()["code"] == "unsupported"
    r = httpx.post(service.url + "/v2/interop/fences",
                   json={"fence_type": "host_timeline", "name": "/fl-none", "current_value": 3})
    assert r.status_code == 400 and "current_value is for GPU fences" in r.json()["error"]
    for bad in (-1, 2**64):
        r = httpx.post(service.url + "/v2/interop/fences",
                       json={"fence_type": "d3d12_fence", "name": "f", "adapter_luid": 7, "current_value": bad})
        assert r.status_code == 422
    with IpcClient(service.socket) as c, pytest.raises(ServiceError) as e:
        c.import_d3d12_fence("Local\\fence", adapter_luid=7, current_value=41)
    assert e.value.code == "unsupported"
