"""The IPC frame codec (docs/ipc.md), property-based."""

from __future__ import annotations

import json

import pytest
from hypothesis import given
from hypothesis import strategies as st

from fenceline import errors
from fenceline.protocol import codec

U32 = st.integers(min_value=0, max_value=2**32 - 1)
U64 = st.integers(min_value=0, max_value=2**64 - 1)


@given(kind=st.integers(min_value=0, max_value=0xFFFF), rid=U32, body=st.binary(max_size=2048))
def test_frames_round_trip(kind: int, rid: int, body: bytes) -> None:
    f = codec.decode(codec.encode(kind, rid, body))
    assert (f.kind, f.request_id, f.body) == (kind, rid, body)


@given(data=st.binary(max_size=256))
def test_garbage_is_rejected_as_invalid_request(data: bytes) -> None:
    try:
        f = codec.decode(data)
    except errors.InvalidRequest:
        return
    assert codec.encode(f.kind, f.request_id, f.body) == data  # only well-formed frames pass


@given(frame=st.binary(min_size=16, max_size=64), flip=st.integers(min_value=0, max_value=15))
def test_a_corrupted_header_never_decodes_as_a_different_frame(frame: bytes, flip: int) -> None:
    good = codec.encode(codec.Kind.HELLO, 7, frame)
    bad = bytearray(good)
    bad[flip] ^= 0xFF
    if flip in (6, 7, 8, 9, 10, 11):  # kind and request_id are free fields
        assert codec.decode(bytes(bad)).body == frame
    else:
        with pytest.raises(errors.InvalidRequest):
            codec.decode(bytes(bad))


@given(
    sid=st.binary(min_size=16, max_size=16),
    wait=U64,
    signal=st.one_of(st.none(), st.integers(min_value=1, max_value=2**64 - 1)),
    timeout=st.one_of(st.none(), st.integers(min_value=0, max_value=2**32 - 2)),
    rid=U32,
)
def test_run_round_trips(
    sid: bytes, wait: int, signal: int | None, timeout: int | None, rid: int
) -> None:
    f = codec.decode(codec.encode_run(rid, codec.Run(sid, wait, signal, timeout)))
    assert f.kind == codec.Kind.RUN and f.request_id == rid
    assert codec.decode_run(f.body) == codec.Run(sid, wait, signal, timeout)


@given(body=st.binary(max_size=64))
def test_run_bodies_of_the_wrong_size_are_rejected(body: bytes) -> None:
    if len(body) == codec.RUN_BODY.size:
        return
    with pytest.raises(errors.InvalidRequest):
        codec.decode_run(body)


@given(v=U64, w=U32, i=U32, t=U32)
def test_run_replies_round_trip(v: int, w: int, i: int, t: int) -> None:
    f = codec.decode(codec.encode_run_reply(3, codec.RunReply(v, w, i, t)))
    assert f.kind == codec.Kind.RUN | codec.REPLY_BIT
    assert codec.decode_run_reply(f.body) == codec.RunReply(v, w, i, t)


@given(v=U64, w=U32, i=U32, t=U32, rid=U32)
def test_the_client_reads_a_run_reply_in_one_unpack(v: int, w: int, i: int, t: int,
                                                    rid: int) -> None:
    data = codec.encode_run_reply(rid, codec.RunReply(v, w, i, t))
    assert codec.run_reply_of(data, rid) == codec.RunReply(v, w, i, t)
    assert codec.run_reply_of(data, rid + 1) is None  # another request's: judged by decode


@given(data=st.binary(max_size=64), rid=U32)
def test_only_a_well_formed_run_reply_is_read_in_one_unpack(data: bytes, rid: int) -> None:
    got = codec.run_reply_of(data, rid)
    if got is not None:
        assert data == codec.encode_run_reply(rid, got)


def test_an_error_reply_is_left_to_the_general_decoder() -> None:
    data = codec.encode_error(4, errors.Conflict("no"))
    assert codec.run_reply_of(data, 4) is None


@given(sid=st.binary(min_size=16, max_size=16), wait=U64, rid=U32)
def test_run_async_is_run_with_its_own_kind(sid: bytes, wait: int, rid: int) -> None:
    run = codec.Run(sid, wait, None, None)
    f = codec.decode(codec.encode_run_async(rid, run))
    assert f.kind == codec.Kind.RUN_ASYNC and f.request_id == rid
    assert codec.decode_run(f.body) == run


@given(cls=st.sampled_from(errors.ALL), message=st.text(max_size=100_000))
def test_errors_round_trip_and_fit_in_one_frame(
    cls: type[errors.FencelineError], message: str
) -> None:
    data = codec.encode_error(9, cls(message))
    assert len(data) <= codec.MAX_FRAME
    f = codec.decode(data)
    err = codec.decode_error(f.body)
    assert type(err) is cls
    assert message.startswith(err.message)


@given(obj=st.dictionaries(st.text(max_size=10), st.integers() | st.text(max_size=10), max_size=5))
def test_json_bodies_round_trip(obj: dict[str, object]) -> None:
    f = codec.decode(codec.encode_json(codec.Kind.DESCRIBE, 1, obj))
    assert codec.decode_json(f.body) == obj


@pytest.mark.parametrize("body", [b"\xff\xfe", b"[1,2]", b"{", json.dumps("x").encode()])
def test_bad_json_bodies_are_invalid_requests(body: bytes) -> None:
    with pytest.raises(errors.InvalidRequest):
        codec.decode_json(body)


def test_oversized_frames_cannot_be_encoded() -> None:
    with pytest.raises(errors.InvalidRequest):
        codec.encode(1, 1, b"x" * codec.MAX_FRAME)
