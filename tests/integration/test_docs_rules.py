"""The rules docs/fences.md, docs/ipc.md and docs/ownership.md give a renderer written from the
docs alone, each checked against a real service over a raw socket or the Python client: the
signaller resets an errored fence's status, an errored input fence does not spoil the session,
HELLO is optional and what its ``protocol`` is, fence pages sent as sealable memfds are sealed."""

from __future__ import annotations

import errno
import os
import socket
from pathlib import Path

import pytest

from fenceline.client import Fence, IpcClient, Layout, SharedFrame
from fenceline.client.errors import ServiceError
from fenceline.protocol import codec
from tests.support.service import Service

ROOT = Path(__file__).resolve().parents[2]


def _session(client: IpcClient, ready: Fence, done: Fence) -> tuple[object, SharedFrame]:
    layout = Layout.of(client.model_metadata("add_64x64"))
    frame = SharedFrame(layout.size_bytes)
    inputs, outputs = layout.views(client.import_memory(frame))
    session = client.session("add_64x64", inputs, outputs, client.import_fence(ready),
                             client.import_fence(done))
    return session, frame


def test_an_errored_input_fence_fails_runs_until_its_signaller_resets_the_status(
    service: Service,
) -> None:
    """docs/fences.md, "Status": signalling does not clear status 2; the signaller writes 0
    before its next good value. The session stays usable: no need to recreate it."""
    with IpcClient(service.socket) as client, Fence() as ready, Fence() as done:
        session, frame = _session(client, ready, done)
        ready.set_status(2)  # the renderer's frame 1 failed
        ready.signal(1)
        for n in (1, 2):
            if n == 2:
                ready.signal(2)  # a later value, status left at 2: still an error
            with pytest.raises(ServiceError) as e:
                session.run(n, timeout_s=10)  # type: ignore[attr-defined]
            assert e.value.code == "device_lost"
            assert f"the input fence reports an error at value {n}" in str(e.value)
        ready.set_status(0)  # the documented reset, then the next good value
        ready.signal(3)
        assert session.run(3, timeout_s=10).signal_value == 3  # type: ignore[attr-defined]
        assert done.status == 0
        session.close()  # type: ignore[attr-defined]
        frame.close()


def _exchange(sock: socket.socket, kind: int, request_id: int, body: dict[str, object]) -> codec.Frame:
    sock.send(codec.encode_json(kind, request_id, body))
    return codec.decode(sock.recv(codec.MAX_FRAME))


def test_hello_is_optional_and_its_protocol_is_the_frame_version(service: Service) -> None:
    """docs/ipc.md, HELLO: any request may come first; ``protocol`` is the version every frame
    header carries (bytes 4..5)."""
    with socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET) as sock:
        sock.connect(str(service.socket))
        first = _exchange(sock, codec.Kind.DESCRIBE, 7, {"kind": "model", "id": "add_64x64"})
        assert first.kind == codec.Kind.DESCRIBE | codec.REPLY_BIT and first.request_id == 7
        assert codec.decode_json(first.body)["name"] == "add_64x64"
        hello = _exchange(sock, codec.Kind.HELLO, 8, {"client": "docs-renderer"})
        info = codec.decode_json(hello.body)
        assert info["protocol"] == codec.VERSION == 1
        raw = codec.encode_json(codec.Kind.HELLO, 9, {})
        assert int.from_bytes(raw[4:6], "little") == info["protocol"]


def test_a_fence_page_sent_as_a_sealable_memfd_is_sealed_at_import(service: Service) -> None:
    """docs/ownership.md and docs/fences.md agree: a fence memfd made with MFD_ALLOW_SEALING
    (the clients' ``Fence()``) is sealed against shrinking once imported."""
    with IpcClient(service.socket) as client, Fence() as fence:
        fd = fence.fd
        client.import_fence(fence)
        with pytest.raises(OSError) as e:
            os.ftruncate(fd, 0)
        assert e.value.errno == errno.EPERM
        assert fence.value == 0  # the page is intact


def test_the_documents_agree_on_sealed_fence_pages() -> None:
    ownership = (ROOT / "docs" / "ownership.md").read_text()
    fences = (ROOT / "docs" / "fences.md").read_text()
    assert "`/dev/shm` objects, fence pages)" not in ownership  # the old list: every page unsealed
    assert "frames and fence pages alike" in ownership
    assert "MFD_ALLOW_SEALING" in fences and "the service seals them" in fences
