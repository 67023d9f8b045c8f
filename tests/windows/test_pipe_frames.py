"""Frames on the Windows pipe that the service refuses, from a client written against the wire
format alone (docs/ipc.md): each refusal carries the request id of the frame's header, and the
connection stays in step for the next frame."""

from __future__ import annotations

from typing import Any

from fenceline import _native
from fenceline.errors import InvalidRequest
from fenceline.protocol import codec
from tests.windows.test_service import WinService


def reply(pipe: Any) -> codec.Frame:
    got = pipe.recv(codec.MAX_FRAME)
    assert got is not None, "the service closed the pipe"
    return codec.decode(bytes(got))


def test_a_frame_over_65536_bytes_is_answered_with_its_request_id(service: WinService) -> None:
    pipe: Any = _native.PipeConnection.connect(service.pipe)  # type: ignore[attr-defined]
    try:
        body = b"{" + b" " * (codec.MAX_FRAME + 4000) + b"}"
        pipe.send(codec.HEADER.pack(codec.MAGIC, codec.VERSION, codec.Kind.HELLO, 4242, len(body)) + body)
        refused = reply(pipe)
        assert (refused.kind, refused.request_id) == (codec.Kind.ERROR, 4242)
        err = codec.decode_error(refused.body)
        assert isinstance(err, InvalidRequest) and str(codec.MAX_FRAME) in err.message, err.message
        # The rest of the oversized message was read: the next frame is the next request.
        pipe.send(codec.encode_json(codec.Kind.HELLO, 4243, {"client": "frames"}))
        hello = reply(pipe)
        assert (hello.kind, hello.request_id) == (codec.Kind.HELLO | codec.REPLY_BIT, 4243)
    finally:
        pipe.close()
