"""The Windows pipe from a client written against the docs alone: the default pipe's name as
docs/windows.md computes it in C, and frames the service refuses (docs/ipc.md), each answered
with the request id of its header, the connection staying in step for the next frame."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path
from typing import Any

import pytest

from fenceline import _native
from fenceline.errors import InvalidRequest
from fenceline.ipc.pipe_server import default_pipe_name
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


@pytest.mark.skipif(not os.environ.get("FENCELINE_WIN_C_PROGRAMS"),
                    reason="FENCELINE_WIN_C_PROGRAMS is unset: .ci/windows builds the C programs")
def test_the_docs_pipe_name_in_c_is_the_services_default_pipe() -> None:
    program = Path(os.environ["FENCELINE_WIN_C_PROGRAMS"]) / "docs_pipe_name.exe"
    p = subprocess.run([str(program)], stdin=subprocess.DEVNULL, capture_output=True, text=True,
                       timeout=120)
    assert p.returncode == 0, p.stdout + p.stderr
    assert p.stdout.strip() == default_pipe_name()
    assert p.stdout.startswith("\\\\.\\pipe\\fenceline-S-1-5-"), p.stdout
