"""Placement on hosts with several GPUs, without a GPU (interop/devices.py): which CUDA device a
renderer's UUID selects, where a session runs, what a mismatch says, and the bounded ``device``
metric label. The two-GPU behaviour itself is tests/gpu/test_multi_gpu.py."""

from __future__ import annotations

import pytest
from prometheus_client import CollectorRegistry

from fenceline import _native
from fenceline.client import IpcClient, ServiceError, View
from fenceline.config import ServeSettings
from fenceline.errors import InvalidArgument, ResourceExhausted
from fenceline.interop.capabilities import capabilities
from fenceline.interop.devices import (
    MAX_DEVICE_LABELS,
    DeviceRecord,
    check_device_quota,
    device_label,
    inventory,
    select_device,
    session_device,
)
from fenceline.metrics import Metrics
from fenceline.runtime.service import RuntimeSettings
from tests.support.service import Service

U0, U1, U2 = bytes(range(16)), bytes(range(16, 32)), bytes(range(32, 48))
# Two GPUs of one model: only the UUIDs tell them apart.
HOST = [
    DeviceRecord(0, "NVIDIA H200", U0, 150 << 30),
    DeviceRecord(1, "NVIDIA H200", U1, 150 << 30),
]


def test_the_renderers_uuid_selects_its_gpu_among_identical_ones() -> None:
    assert select_device(HOST, uuid=U1).ordinal == 1
    assert select_device(HOST, uuid=U0).ordinal == 0
    assert select_device(HOST, uuid=U1, ordinal=1).ordinal == 1


def test_an_ordinal_selects_a_gpu_when_no_uuid_is_given() -> None:
    assert select_device(HOST, ordinal=1).uuid == U1


def test_a_uuid_matching_no_gpu_lists_the_gpus_there_are() -> None:
    with pytest.raises(InvalidArgument) as e:
        select_device(HOST, uuid=U2)
    msg = e.value.message
    assert f"device UUID {U2.hex()}" in msg
    assert f"cuda:0 NVIDIA H200 {U0.hex()}" in msg and f"cuda:1 NVIDIA H200 {U1.hex()}" in msg


def test_a_uuid_on_a_machine_without_gpus_says_so() -> None:
    with pytest.raises(InvalidArgument, match="this machine has no CUDA device"):
        select_device([], uuid=U0)


def test_a_uuid_and_an_ordinal_naming_different_gpus_are_refused() -> None:
    with pytest.raises(InvalidArgument, match="name different GPUs.*cuda:1"):
        select_device(HOST, uuid=U1, ordinal=0)


def test_a_missing_ordinal_and_a_bad_uuid_length_are_clear_errors() -> None:
    with pytest.raises(InvalidArgument, match="CUDA device 5 does not exist.*cuda:1"):
        select_device(HOST, ordinal=5)
    with pytest.raises(InvalidArgument, match="16 bytes"):
        select_device(HOST, uuid=b"\1" * 4)
    with pytest.raises(InvalidArgument, match="device_uuid"):
        select_device(HOST)


def test_a_session_runs_on_the_gpu_of_its_memory_and_fences() -> None:
    d1 = HOST[1]
    assert session_device([("input 'x'", d1), ("output 'y'", d1)], [("wait_fence", d1)]) is d1


def test_tensors_on_two_gpus_are_refused_naming_both() -> None:
    with pytest.raises(InvalidArgument) as e:
        session_device([("input 'x'", HOST[0]), ("output 'y'", HOST[1])], [])
    msg = e.value.message
    assert f"output 'y' is on cuda:1 ({U1.hex()})" in msg
    assert f"input 'x' is on cuda:0 ({U0.hex()})" in msg
    assert "one GPU" in msg


def test_fences_on_another_gpu_than_the_memory_are_refused() -> None:
    with pytest.raises(InvalidArgument) as e:
        session_device(
            [("input 'x'", HOST[0]), ("output 'y'", HOST[0])],
            [("wait_fence", HOST[0]), ("signal_fence", HOST[1])],
        )
    msg = e.value.message
    assert msg.startswith(f"signal_fence was imported on cuda:1 ({U1.hex()})")
    assert "memory is on cuda:0" in msg and "device_uuid" in msg


def test_device_labels_are_bounded() -> None:
    assert device_label(0) == "cuda:0" and device_label(7) == "cuda:7"
    labels = {device_label(n) for n in range(-3, 10 * MAX_DEVICE_LABELS)}
    assert len(labels) == MAX_DEVICE_LABELS + 1
    assert device_label(MAX_DEVICE_LABELS) == device_label(-1) == "cuda:other"


def test_gpu_metrics_are_labelled_by_device_only() -> None:
    m = Metrics(CollectorRegistry())
    for _ in range(3):
        m.observe_gpu_run(device_label(1))
    m.gpu_sessions.labels(device_label(1)).inc()
    r = m.registry
    assert r.get_sample_value("fenceline_gpu_runs_total", {"device": "cuda:1"}) == 3
    assert r.get_sample_value("fenceline_gpu_sessions_active", {"device": "cuda:1"}) == 1
    assert r.get_sample_value("fenceline_gpu_runs_total", {"device": "cuda:0"}) is None


def test_the_per_gpu_session_limit_says_which_gpu_and_which_flag() -> None:
    check_device_quota("cuda:1", 3, 4)
    with pytest.raises(ResourceExhausted) as e:
        check_device_quota("cuda:1", 4, 4)
    assert "cuda:1 already has 4 sessions" in e.value.message
    assert "--max-sessions-per-device" in e.value.message


def test_the_per_gpu_session_limit_must_be_positive() -> None:
    with pytest.raises(InvalidArgument, match="max_sessions_per_device"):
        RuntimeSettings(max_sessions_per_device=0)
    with pytest.raises(InvalidArgument, match="--max-sessions-per-device"):
        ServeSettings(max_sessions_per_device=-1)


def test_the_inventory_matches_the_capabilities() -> None:
    gpus = [d for d in capabilities()["devices"] if d["kind"] == "cuda"]
    records = inventory()
    assert [(d["id"], d["uuid"], d["total_memory_bytes"]) for d in gpus] == [
        (r.ordinal, r.uuid.hex(), r.total_memory_bytes) for r in records
    ]
    if not _native.cuda_available():
        assert records == []


def test_a_session_that_fails_to_build_leaves_its_objects_releasable(service: Service) -> None:
    # Sessions are built outside the runtime's table lock with their objects reserved; a build
    # that fails must give the reservation back.
    from tests.support.helpers import open_session

    with IpcClient(service.socket) as c:
        s = open_session(c, "add_64x64", [1, 3, 64, 64])
        with pytest.raises(ServiceError) as e:
            c.create_session(
                "add_64x64", {"x": View(s.memory_id, "FP32", [1, 3, 32, 32])},
                {"y": View(s.memory_id, "FP32", [1, 3, 64, 64])}, s.wait_id, s.signal_id,
            )
        assert e.value.code == "invalid_argument"
        assert c.describe("memory", s.memory_id)["sessions"] == 1  # the first session only
        c.release_session(s.session_id)
        assert c.describe("memory", s.memory_id)["sessions"] == 0
        c.release_fence(s.wait_id)
        c.release_fence(s.signal_id)
        c.release_memory(s.memory_id)
        s.close()
