"""A short soak with kills, and fuzzed requests against a live service: nothing leaks, nothing
answers 500."""

from __future__ import annotations

import socket
import string
from typing import Any

import httpx
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

from fenceline.protocol import codec
from fenceline.soak import run_soak
from tests.support.service import Service


def test_a_short_soak_with_kills_leaks_nothing() -> None:
    report = run_soak(renderers=2, seconds=4, kill_every=1.0, warmup=1.0, min_kills=2)
    assert report.kills >= 2 and report.runs > 0
    assert report.checks() == {name: True for name in report.checks()}, report.to_json()


json_values = st.recursive(
    st.none() | st.booleans() | st.integers(min_value=-(2**70), max_value=2**70) | st.text(max_size=20),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=12), inner, max_size=4),
    max_leaves=12,
)
fields = st.sampled_from(
    ["handle_type", "name", "size_bytes", "offset_bytes", "access", "fence_type", "model", "inputs",
     "outputs", "wait_fence", "signal_fence", "memory", "datatype", "shape", "wait_value", "signal_value",
     "timeout_ms"]
)
bodies = st.dictionaries(fields | st.text(string.ascii_letters, max_size=8), json_values, max_size=6)
paths = st.sampled_from(["/v2/interop/memory", "/v2/interop/fences", "/v2/interop/sessions",
                         "/v2/interop/sessions/0123456789abcdef0123456789abcdef/run"])


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(path=paths, body=bodies)
def test_fuzzed_http_bodies_get_clean_errors(service: Service, path: str, body: dict[str, Any]) -> None:
    r = httpx.post(service.url + path, json=body, timeout=30)
    assert r.status_code in (201, 400, 404, 409, 422, 429, 501), r.text
    if r.status_code == 201:  # a valid import: release it again
        kind = "memory" if path.endswith("memory") else "fences"
        httpx.delete(f"{service.url}/v2/interop/{kind}/{r.json()['id']}")
    else:
        assert set(r.json()) == {"error", "code"}


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(kind=st.sampled_from([int(k) for k in codec.Kind] + [0x1234]), body=st.binary(max_size=200) | bodies.map(lambda b: codec.encode_json(1, 1, b)[16:]))
def test_fuzzed_ipc_frames_get_clean_errors(service: Service, kind: int, body: bytes) -> None:
    assume(kind != codec.Kind.NUDGE or body)  # a bare NUDGE is never answered (test_run_page.py)
    with socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET) as s:
        s.connect(str(service.socket))
        s.settimeout(10)
        s.send(codec.encode(kind, 77, body))
        reply = codec.decode(s.recv(codec.MAX_FRAME))
        assert reply.request_id == 77
        if reply.kind == codec.Kind.ERROR:
            assert codec.decode_error(reply.body).code != "internal"
