"""Triton's system shared-memory extension against a real ``fenceline serve``, driven by the
unmodified tritonclient and its ``tritonclient.utils.shared_memory`` helpers, with the checks
Triton's own qa suite (L0_shared_memory) makes."""

from __future__ import annotations

import secrets
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import tritonclient.http as httpclient
import tritonclient.utils.shared_memory as shm
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from fenceline.models import build_repository
from tests.integration.test_kserve import reference
from tests.support.metrics import metric
from tests.support.service import Service, running
from tests.support.triton_shm import raises, shm_input, shm_output, triton_client
from tests.support.waiting import wait_until

SHAPE = [1, 3, 64, 64]
NBYTES = 3 * 64 * 64 * 4
MODELS = ["add_64x64", "image_filter", "slow_add_64x64", "add_dynamic"]


@pytest.fixture(scope="module")
def model_repo(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return build_repository(tmp_path_factory.mktemp("shm-models"), MODELS)


@pytest.fixture(scope="module")
def client(service: Service) -> Iterator[httpclient.InferenceServerClient]:
    with triton_client(service) as c:
        yield c


class Regions:
    """Shared-memory objects a test creates (as a Triton user would, with tritonclient's
    helpers); the creator destroys them, and everything is unregistered afterwards."""

    def __init__(self, client: httpclient.InferenceServerClient) -> None:
        self.client = client
        self.tag = secrets.token_hex(4)
        self.handles: list[Any] = []

    def key(self, name: str) -> str:
        return f"/fl_test_{self.tag}_{name}"

    def create(self, name: str, size: int, register: bool = True) -> Any:
        h = shm.create_shared_memory_region(name, self.key(name), size)
        self.handles.append(h)
        if register:
            self.client.register_system_shared_memory(name, self.key(name), size)
        return h

    def close(self) -> None:
        self.client.unregister_system_shared_memory()
        for h in self.handles:
            shm.destroy_shared_memory_region(h)


@pytest.fixture
def regions(client: httpclient.InferenceServerClient) -> Iterator[Regions]:
    r = Regions(client)
    yield r
    r.close()


def frame(shape: list[int] = SHAPE, seed: int = 0) -> np.ndarray:
    return np.random.default_rng(seed).random(shape, dtype=np.float32)


def mapped(service: Service, key: str) -> bool:
    return any(line.endswith("/dev/shm/" + key.lstrip("/")) for line in service.maps())


# -- register, status, unregister ---------------------------------------------------------


def test_register_status_and_unregister_round_trip(
    client: httpclient.InferenceServerClient, regions: Regions, service: Service
) -> None:
    regions.create("a", 64)
    regions.create("b", 128)
    status = client.get_system_shared_memory_status()
    assert sorted(status, key=lambda s: s["name"]) == [
        {"name": "a", "key": regions.key("a"), "offset": 0, "byte_size": 64},
        {"name": "b", "key": regions.key("b"), "offset": 0, "byte_size": 128},
    ]
    assert client.get_system_shared_memory_status("b") == [
        {"name": "b", "key": regions.key("b"), "offset": 0, "byte_size": 128}
    ]
    assert mapped(service, regions.key("a"))
    client.unregister_system_shared_memory("a")
    assert [s["name"] for s in client.get_system_shared_memory_status()] == ["b"]
    assert not mapped(service, regions.key("a"))


def test_status_of_an_unknown_region_is_404(client: httpclient.InferenceServerClient) -> None:
    raises("404", "Unable to find system shared memory region: 'ghost'",
           lambda: client.get_system_shared_memory_status("ghost"))


def test_duplicate_region_name_is_rejected(
    client: httpclient.InferenceServerClient, regions: Regions
) -> None:
    regions.create("dup", 64)
    raises("400", "shared memory region 'dup' already in manager",
           lambda: client.register_system_shared_memory("dup", regions.key("dup"), 64))
    assert len(client.get_system_shared_memory_status()) == 1


@pytest.mark.parametrize(
    ("byte_size", "offset"),
    [(65, 0), (64, 1), (1, 64), (0, 65), (64, 2**64 - 1), (2**64 - 1, 8)],
    ids=["size+1", "offset-1", "offset=size", "empty-past-end", "offset-near-2^64",
         "size-near-2^64"],
)
def test_register_past_the_end_of_the_object_is_rejected(
    client: httpclient.InferenceServerClient, regions: Regions, byte_size: int, offset: int
) -> None:
    regions.create("obj", 64, register=False)
    raises("400", "failed to register shared memory region 'obj'.*invalid args",
           lambda: client.register_system_shared_memory("obj", regions.key("obj"), byte_size,
                                                        offset=offset))
    assert client.get_system_shared_memory_status() == []


def test_register_offsets_past_2_64_are_rejected(
    client: httpclient.InferenceServerClient, regions: Regions
) -> None:
    regions.create("obj", 64, register=False)
    raises("400", "unsigned 64-bit",
           lambda: client.register_system_shared_memory("obj", regions.key("obj"), 8,
                                                        offset=2**64))
    raises("400", "unsigned 64-bit",
           lambda: client.register_system_shared_memory("obj", regions.key("obj"), -1))


def test_register_of_a_key_that_names_no_object_is_404(
    client: httpclient.InferenceServerClient, regions: Regions
) -> None:
    raises("404", "no shared-memory object with key",
           lambda: client.register_system_shared_memory("none", regions.key("none"), 64))


@pytest.mark.parametrize("key", ["/", "//", "/////"])
def test_keys_made_only_of_slashes_are_rejected(
    client: httpclient.InferenceServerClient, key: str
) -> None:
    raises("400", "made only of slashes",
           lambda: client.register_system_shared_memory("slashes", key, 64))
    assert client.get_system_shared_memory_status() == []


def test_keys_with_or_without_leading_slashes_name_one_object(
    client: httpclient.InferenceServerClient, regions: Regions
) -> None:
    regions.create("obj", 64, register=False)
    bare = regions.key("obj").lstrip("/")
    client.register_system_shared_memory("bare", bare, 64)
    client.register_system_shared_memory("double", "//" + bare, 64)
    assert {s["key"] for s in client.get_system_shared_memory_status()} == {bare, "//" + bare}


def test_unregister_of_an_unknown_name_is_not_an_error(
    client: httpclient.InferenceServerClient, regions: Regions
) -> None:
    regions.create("kept", 64)
    client.unregister_system_shared_memory("never_registered")
    assert [s["name"] for s in client.get_system_shared_memory_status()] == ["kept"]


def test_unregister_all(
    client: httpclient.InferenceServerClient, regions: Regions, service: Service
) -> None:
    for n in ("r0", "r1", "r2", "r3"):
        regions.create(n, 64)
    assert len(client.get_system_shared_memory_status()) == 4
    client.unregister_system_shared_memory()
    assert client.get_system_shared_memory_status() == []
    assert not any(mapped(service, regions.key(n)) for n in ("r0", "r1", "r2", "r3"))


# -- inference through regions ------------------------------------------------------------


def test_infer_with_shm_input_and_output_equals_onnxruntime(
    client: httpclient.InferenceServerClient, regions: Regions, model_repo: Path
) -> None:
    shape = [1, 3, 720, 1280]
    n = 3 * 720 * 1280 * 4
    x = frame(shape, seed=1)
    h_in = regions.create("img_in", n)
    h_out = regions.create("img_out", n + 128)  # a larger output region is fine
    shm.set_shared_memory_region(h_in, [x])
    result = client.infer("image_filter", [shm_input("img_in", n, name="image", shape=shape)],
                          outputs=[shm_output("img_out", n + 128, name="display")],
                          request_id="shm-1")
    out = result.get_output("display")
    assert out["shape"] == shape
    assert out["parameters"] == {"shared_memory_region": "img_out", "shared_memory_byte_size": n}
    assert result.get_response()["id"] == "shm-1"
    y = shm.get_contents_as_numpy(h_out, np.float32, shape)
    np.testing.assert_array_equal(y, reference(model_repo, "image_filter", x))


def test_one_region_at_an_unaligned_object_offset_holds_input_and_output(
    client: httpclient.InferenceServerClient, regions: Regions
) -> None:
    x = frame(seed=2)
    base = 100  # not a page boundary
    h = regions.create("whole", base + 2 * NBYTES, register=False)
    client.register_system_shared_memory("both", regions.key("whole"), 2 * NBYTES, offset=base)
    shm.set_shared_memory_region(h, [x], offset=base)
    client.infer("add_64x64", [shm_input("both", NBYTES)],
                 outputs=[shm_output("both", NBYTES, offset=NBYTES)])
    np.testing.assert_array_equal(shm.get_contents_as_numpy(h, np.float32, SHAPE, base), x)
    np.testing.assert_array_equal(
        shm.get_contents_as_numpy(h, np.float32, SHAPE, base + NBYTES), x + 1
    )


def test_shm_input_with_binary_output_and_binary_input_with_shm_output(
    client: httpclient.InferenceServerClient, regions: Regions
) -> None:
    x = frame(seed=4)
    h_in = regions.create("mix_in", NBYTES)
    h_out = regions.create("mix_out", NBYTES)
    shm.set_shared_memory_region(h_in, [x])
    r = client.infer("add_64x64", [shm_input("mix_in", NBYTES)],
                     outputs=[httpclient.InferRequestedOutput("y", binary_data=True)])
    np.testing.assert_array_equal(r.as_numpy("y"), x + 1)
    i = httpclient.InferInput("x", SHAPE, "FP32")
    i.set_data_from_numpy(x * 2, binary_data=True)
    client.infer("add_64x64", [i], outputs=[shm_output("mix_out", NBYTES)])
    np.testing.assert_array_equal(shm.get_contents_as_numpy(h_out, np.float32, SHAPE), x * 2 + 1)


def test_input_byte_size_that_differs_from_the_tensor_is_rejected(
    client: httpclient.InferenceServerClient, regions: Regions
) -> None:
    regions.create("big_in", 2 * NBYTES)
    regions.create("out", NBYTES)
    raises("400", f"unexpected total byte size {2 * NBYTES} for input 'x', expecting {NBYTES}",
           lambda: client.infer("add_64x64", [shm_input("big_in", 2 * NBYTES)],
                                outputs=[shm_output("out", NBYTES)]))


def test_output_region_too_small_is_rejected(
    client: httpclient.InferenceServerClient, regions: Regions
) -> None:
    h_in = regions.create("in", NBYTES)
    h_out = regions.create("small_out", NBYTES)
    shm.set_shared_memory_region(h_in, [frame()])
    raises("400", f"output 'y' \\({NBYTES - 4} bytes\\) should be at least {NBYTES} bytes",
           lambda: client.infer("add_64x64", [shm_input("in", NBYTES)],
                                outputs=[shm_output("small_out", NBYTES - 4)]))
    assert not shm.get_contents_as_numpy(h_out, np.float32, SHAPE).any()  # nothing written


@pytest.mark.parametrize(
    ("size", "offset", "message"),
    [
        (NBYTES, 4, "Invalid offset \\+ byte size for shared memory region: 'out'"),
        (NBYTES, NBYTES, "Invalid offset for shared memory region: 'out'"),
        (NBYTES, NBYTES + 1, "Invalid offset for shared memory region: 'out'"),
        (NBYTES, 2**64 - 32, "Invalid offset for shared memory region: 'out'"),
        (2**64 - 1, 8, "Integer overflow detected"),
    ],
    ids=["offset+size-past-end", "offset=size", "offset-past-end", "offset-near-2^64",
         "size-near-2^64"],
)
def test_output_windows_outside_the_region_are_rejected(
    client: httpclient.InferenceServerClient, regions: Regions, size: int, offset: int,
    message: str,
) -> None:
    h_in = regions.create("in", NBYTES)
    regions.create("out", NBYTES)
    shm.set_shared_memory_region(h_in, [frame()])
    raises("400", message, lambda: client.infer("add_64x64", [shm_input("in", NBYTES)],
                                                outputs=[shm_output("out", size, offset)]))


REGION = NBYTES + 64
EDGES = [0, 1, 4, 60, 64, 65, NBYTES - 4, NBYTES, NBYTES + 4, REGION - 1, REGION, REGION + 1,
         2**63, 2**64 - REGION, 2**64 - NBYTES, 2**64 - 1]


@settings(max_examples=60, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture])  # one region, reused
@given(offset=st.sampled_from(EDGES) | st.integers(0, 2**64 - 1),
       size=st.sampled_from(EDGES) | st.integers(0, 2**64 - 1))
@example(offset=1, size=NBYTES)  # inside, but not FP32-aligned: served through a copy
@example(offset=4, size=NBYTES)
def test_output_windows_are_accepted_exactly_when_inside_the_region(
    client: httpclient.InferenceServerClient, regions: Regions, offset: int, size: int
) -> None:
    if not regions.handles:
        x = frame(seed=7)
        shm.set_shared_memory_region(regions.create("in", NBYTES), [x])
        regions.create("out", REGION)
    inside = offset < REGION and size <= REGION - offset and size >= NBYTES
    call = lambda: client.infer("add_64x64", [shm_input("in", NBYTES)],  # noqa: E731
                                outputs=[shm_output("out", size, offset)])
    if inside:
        call()
        got = shm.get_contents_as_numpy(regions.handles[1], np.float32, SHAPE, offset)
        np.testing.assert_array_equal(got, frame(seed=7) + 1)
    else:
        raises("400", "shared memory|Integer overflow", call)


def test_input_window_past_the_end_is_rejected(
    client: httpclient.InferenceServerClient, regions: Regions
) -> None:
    regions.create("in", NBYTES)
    raises("400", "Invalid offset \\+ byte size for shared memory region: 'in'",
           lambda: client.infer("add_64x64", [shm_input("in", NBYTES, offset=8)]))


def test_infer_with_an_unregistered_region_is_404(
    client: httpclient.InferenceServerClient,
) -> None:
    raises("404", "Unable to find shared memory region: 'ghost'",
           lambda: client.infer("add_64x64", [shm_input("ghost", NBYTES)]))


def test_outputs_of_free_shape_land_in_regions_and_binary_alike(
    client: httpclient.InferenceServerClient, regions: Regions
) -> None:
    h_in = regions.create("dyn_in", NBYTES)
    h_out = regions.create("dyn_out", NBYTES + 64)
    for shape in ([1, 3, 64, 64], [1, 3, 16, 32]):
        x = frame(shape, seed=8)
        n = x.nbytes
        shm.set_shared_memory_region(h_in, [x])
        r = client.infer("add_dynamic", [shm_input("dyn_in", n, shape=shape)],
                         outputs=[shm_output("dyn_out", NBYTES + 64)])
        assert r.get_output("y")["shape"] == shape
        assert r.get_output("y")["parameters"]["shared_memory_byte_size"] == n
        np.testing.assert_array_equal(shm.get_contents_as_numpy(h_out, np.float32, shape), x + 1)
        i = httpclient.InferInput("x", shape, "FP32")
        i.set_data_from_numpy(x, binary_data=True)
        np.testing.assert_array_equal(client.infer("add_dynamic", [i]).as_numpy("y"), x + 1)
    shm.set_shared_memory_region(h_in, [frame(seed=9)])
    raises("400", "should be at least",
           lambda: client.infer("add_dynamic", [shm_input("dyn_in", NBYTES)],
                                outputs=[shm_output("dyn_out", NBYTES - 4)]))


def in_flight(service: Service) -> float:
    return metric(service, "fenceline_kserve_requests_in_flight", 0.0)


def test_unregister_while_a_request_is_in_flight_keeps_the_region_until_it_ends(
    client: httpclient.InferenceServerClient, regions: Regions, service: Service
) -> None:
    x = frame(seed=6)
    h_in = regions.create("slow_in", NBYTES)
    h_out = regions.create("slow_out", NBYTES)
    shm.set_shared_memory_region(h_in, [x])
    outcome: dict[str, Any] = {}

    def run() -> None:  # a second client: a Triton user's other thread
        c = httpclient.InferenceServerClient(service.url.removeprefix("http://"))
        try:
            outcome["result"] = c.infer("slow_add_64x64", [shm_input("slow_in", NBYTES)],
                                        outputs=[shm_output("slow_out", NBYTES)])
        except Exception as e:  # reported below, in the test's thread
            outcome["error"] = e
        finally:
            c.close()

    t = threading.Thread(target=run)
    t.start()
    try:
        wait_until(lambda: in_flight(service) >= 1, what="the slow request in flight")
        client.unregister_system_shared_memory("slow_in")
        client.unregister_system_shared_memory("slow_out")
        assert client.get_system_shared_memory_status() == []
        assert t.is_alive(), "the slow model finished before the unregistration"
        assert mapped(service, regions.key("slow_out"))  # kept for the request in flight
        raises("404", "Unable to find shared memory region: 'slow_in'",
               lambda: client.infer("add_64x64", [shm_input("slow_in", NBYTES)]))
    finally:
        t.join(60)
    assert "error" not in outcome, outcome.get("error")
    np.testing.assert_array_equal(shm.get_contents_as_numpy(h_out, np.float32, SHAPE), x + 1)
    wait_until(lambda: not mapped(service, regions.key("slow_out"))
               and not mapped(service, regions.key("slow_in")), what="the unregistered regions unmapped")


def test_regions_are_reported_in_metrics(
    client: httpclient.InferenceServerClient, regions: Regions, service: Service
) -> None:
    regions.create("m", 64)
    assert metric(service, "fenceline_kserve_shm_regions") == 1


# -- registration switched off ------------------------------------------------------------


@pytest.fixture(scope="module")
def service_without_shm(
    model_repo: Path, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Service]:
    with running(model_repo, tmp_path_factory.mktemp("no-shm"), "--no-client-shared-memory") as svc:
        yield svc


def test_client_shared_memory_can_be_switched_off(service_without_shm: Service) -> None:
    c = httpclient.InferenceServerClient(service_without_shm.url.removeprefix("http://"))
    regions = Regions(c)
    h = shm.create_shared_memory_region("off", regions.key("off"), NBYTES)
    try:
        assert "system_shared_memory" not in c.get_server_metadata()["extensions"]
        for call in (
            lambda: c.register_system_shared_memory("off", regions.key("off"), NBYTES),
            lambda: c.get_system_shared_memory_status(),
            lambda: c.unregister_system_shared_memory(),
            lambda: c.infer("add_64x64", [shm_input("off", NBYTES)]),
        ):
            raises("501", "switched off", call)
        x = frame()
        i = httpclient.InferInput("x", SHAPE, "FP32")
        i.set_data_from_numpy(x, binary_data=True)
        np.testing.assert_array_equal(c.infer("add_64x64", [i]).as_numpy("y"), x + 1)
        assert not any("fl_test_" in line for line in service_without_shm.maps())
    finally:
        shm.destroy_shared_memory_region(h)
        c.close()
