"""Triton's CUDA shared-memory extension against a real ``fenceline serve``, driven by the
unmodified tritonclient and its ``tritonclient.utils.cuda_shared_memory`` helpers: this test
process allocates device memory with cudaMalloc and hands the service its cudaIpcMemHandle_t.
Skipped, with the reason, without a CUDA device, onnxruntime's CUDA EP, or the ``cuda-python``
bindings those helpers need. The CPU-side checks run everywhere: tests/unit/test_cuda_shm_logic.py."""

from __future__ import annotations

import secrets
import warnings
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import numpy as np
import pytest
import tritonclient.http as httpclient

from tests.gpu.conftest import cuda_ep_reason, cuda_reason, require, triton_cuda_shm_reason
from tests.support.service import Service, start_service, stop_service
from tests.support.triton_shm import raises, shm_input, shm_output, triton_client

pytestmark = pytest.mark.gpu

SMALL = [1, 3, 64, 64]
FULL_HD = [1, 3, 1080, 1920]
CPU_SHAPE = [1, 3, 720, 1280]  # add_720p stays on the CPU EP


def reference(repo: Path, model: str, x: np.ndarray) -> np.ndarray:
    """A direct onnxruntime run of the same file (providers named: a GPU build asks for them)."""
    import onnxruntime as ort

    session = ort.InferenceSession(str(repo / model / "1" / "model.onnx"),
                                   providers=["CPUExecutionProvider"])
    return session.run(None, {"x": x})[0]


def _nbytes(shape: list[int]) -> int:
    return int(np.prod(shape)) * 4


require("CUDA shared memory tests need a GPU here", cuda_reason, cuda_ep_reason,
        triton_cuda_shm_reason)

with warnings.catch_warnings():
    warnings.simplefilter("ignore")
    import tritonclient.utils.cuda_shared_memory as cudashm  # noqa: E402
    import tritonclient.utils.shared_memory as sysshm  # noqa: E402


@pytest.fixture(scope="module")
def client(gpu_service: Service) -> Iterator[httpclient.InferenceServerClient]:
    with triton_client(gpu_service) as c:
        yield c


class Regions:
    """Device allocations a test makes with tritonclient's helpers; all are unregistered and
    freed afterwards."""

    def __init__(self, client: httpclient.InferenceServerClient) -> None:
        self.client = client
        self.tag = secrets.token_hex(4)
        self.handles: list[Any] = []

    def create(self, name: str, size: int, register: bool = True) -> Any:
        h = cudashm.create_shared_memory_region(name, size, 0)
        self.handles.append(h)
        if register:
            self.client.register_cuda_shared_memory(name, cudashm.get_raw_handle(h), 0, size)
        return h

    def close(self) -> None:
        self.client.unregister_cuda_shared_memory()
        for h in self.handles:
            cudashm.destroy_shared_memory_region(h)
        self.handles.clear()  # the last reference: the allocation is freed now


@pytest.fixture
def regions(client: httpclient.InferenceServerClient) -> Iterator[Regions]:
    r = Regions(client)
    yield r
    r.close()


def frame(shape: list[int], seed: int = 0) -> np.ndarray:
    return np.random.default_rng(seed).random(shape, dtype=np.float32)


def test_v2_lists_cuda_shared_memory(client: httpclient.InferenceServerClient) -> None:
    assert "cuda_shared_memory" in client.get_server_metadata()["extensions"]


@pytest.mark.parametrize(("model", "shape"), [("add_64x64", SMALL), ("add_1080p", FULL_HD)])
def test_register_status_and_infer_in_place_on_the_gpu(
    client: httpclient.InferenceServerClient, regions: Regions, gpu_repo: Path,
    model: str, shape: list[int],
) -> None:
    n = _nbytes(shape)
    x = frame(shape, seed=len(shape) + n % 97)
    h_in = regions.create("cuda_in", n)
    h_out = regions.create("cuda_out", n)
    cudashm.set_shared_memory_region(h_in, [x])
    status = sorted(client.get_cuda_shared_memory_status(), key=lambda r: r["name"])
    assert status == [
        {"name": "cuda_in", "device_id": 0, "byte_size": n},
        {"name": "cuda_out", "device_id": 0, "byte_size": n},
    ]
    assert client.get_cuda_shared_memory_status("cuda_in") == [status[0]]
    for seed in range(2):  # the same regions serve several requests
        if seed:
            x = frame(shape, seed=seed + 10)
            cudashm.set_shared_memory_region(h_in, [x])
        result = client.infer(model, [shm_input("cuda_in", n, shape)],
                              outputs=[shm_output("cuda_out", n)])
        out = result.get_output("y")
        assert out["parameters"]["shared_memory_region"] == "cuda_out"
        assert out["parameters"]["shared_memory_byte_size"] == n
        assert "data" not in result.get_response()["outputs"][0]  # it is in the region
        got = cudashm.get_contents_as_numpy(h_out, np.float32, shape)
        np.testing.assert_array_equal(got, reference(gpu_repo, model, x))


def test_cuda_input_with_a_host_output_and_an_offset(
    client: httpclient.InferenceServerClient, regions: Regions, gpu_repo: Path
) -> None:
    n = _nbytes(SMALL)
    x = frame(SMALL, seed=3)
    h = regions.create("cuda_two", 2 * n)
    cudashm.set_shared_memory_region(h, [np.zeros(SMALL, np.float32), x])
    result = client.infer("add_64x64", [shm_input("cuda_two", n, SMALL, offset=n)],
                          outputs=[httpclient.InferRequestedOutput("y", binary_data=True)])
    np.testing.assert_array_equal(result.as_numpy("y"), reference(gpu_repo, "add_64x64", x))


def test_duplicate_name_is_rejected_also_against_a_system_region(
    client: httpclient.InferenceServerClient, regions: Regions
) -> None:
    h = regions.create("cuda_dup", 64)
    raises("400", "shared memory region 'cuda_dup' already in manager",
           lambda: client.register_cuda_shared_memory("cuda_dup", cudashm.get_raw_handle(h), 0, 64))
    key = f"/fl_test_{regions.tag}_sys"
    sys_h = sysshm.create_shared_memory_region("sys_dup", key, 64)
    try:
        client.register_system_shared_memory("sys_dup", key, 64)
        raises("400", "shared memory region 'sys_dup' already in manager",
               lambda: client.register_cuda_shared_memory("sys_dup", cudashm.get_raw_handle(h), 0, 64))
        raises("404", "registered as system shared memory, not CUDA shared memory",
               lambda: client.get_cuda_shared_memory_status("sys_dup"))
        raises("404", "registered as CUDA shared memory, not system shared memory",
               lambda: client.get_system_shared_memory_status("cuda_dup"))
    finally:
        client.unregister_system_shared_memory("sys_dup")
        sysshm.destroy_shared_memory_region(sys_h)
    assert [r["name"] for r in client.get_cuda_shared_memory_status()] == ["cuda_dup"]


def test_unknown_regions(client: httpclient.InferenceServerClient, regions: Regions) -> None:
    raises("404", "Unable to find cuda shared memory region: 'ghost'",
           lambda: client.get_cuda_shared_memory_status("ghost"))
    n = _nbytes(SMALL)
    regions.create("cuda_real_out", n)
    raises("404", "Unable to find shared memory region: 'ghost'",
           lambda: client.infer("add_64x64", [shm_input("ghost", n, SMALL)],
                                outputs=[shm_output("cuda_real_out", n)]))
    client.unregister_cuda_shared_memory("ghost")  # not an error, as in Triton


def test_unregister_one_and_all(client: httpclient.InferenceServerClient, regions: Regions) -> None:
    for name in ("cuda_a", "cuda_b", "cuda_c"):
        regions.create(name, 256)
    client.unregister_cuda_shared_memory("cuda_b")
    assert sorted(r["name"] for r in client.get_cuda_shared_memory_status()) == ["cuda_a", "cuda_c"]
    raises("404", "Unable to find cuda shared memory region: 'cuda_b'",
           lambda: client.get_cuda_shared_memory_status("cuda_b"))
    client.unregister_cuda_shared_memory()
    assert client.get_cuda_shared_memory_status() == []
    # An unregistered name is free again, and its allocation can be registered anew.
    h = regions.handles[1]
    client.register_cuda_shared_memory("cuda_b", cudashm.get_raw_handle(h), 0, 256)
    assert client.get_cuda_shared_memory_status("cuda_b")[0]["byte_size"] == 256


def _cuda_ipc_imports(svc: Service) -> float:
    for line in httpx.get(svc.url + "/metrics").text.splitlines():
        if line.startswith('fenceline_interop_imported_handles{kind="cuda_ipc"}'):
            return float(line.split()[-1])
    return 0.0


def _free_device_bytes() -> int:
    try:
        from cuda.bindings import runtime as cudart
    except ImportError:  # cuda-python before 12.6
        from cuda import cudart  # type: ignore[no-redef]
    err, free, _total = cudart.cudaMemGetInfo()
    assert int(err) == 0, err
    return int(free)


def test_unregistering_gives_the_allocation_back(
    client: httpclient.InferenceServerClient, gpu_service: Service
) -> None:
    """The service closes its import at unregistration: the handle count drops, and the client's
    cudaFree then really frees the memory (an import left open keeps it allocated)."""
    size = 1 << 30
    baseline = _cuda_ipc_imports(gpu_service)
    regions = Regions(client)
    try:
        for name in ("cuda_big", "cuda_small_1", "cuda_small_2"):
            regions.create(name, size if name == "cuda_big" else 256)
        assert _cuda_ipc_imports(gpu_service) == baseline + 3
        client.unregister_cuda_shared_memory("cuda_small_1")
        assert _cuda_ipc_imports(gpu_service) == baseline + 2
        client.unregister_cuda_shared_memory()
        assert _cuda_ipc_imports(gpu_service) == baseline
        with_allocation = _free_device_bytes()
        cudashm.destroy_shared_memory_region(regions.handles.pop(0))
        assert _free_device_bytes() >= with_allocation + size // 2
    finally:
        regions.close()


def test_regions_too_small_and_windows_out_of_bounds(
    client: httpclient.InferenceServerClient, regions: Regions
) -> None:
    n = _nbytes(SMALL)
    h = regions.create("cuda_small", n // 2, register=False)
    raw = cudashm.get_raw_handle(h)
    raises("400", "failed to register shared memory region 'cuda_small': invalid args",
           lambda: client.register_cuda_shared_memory("cuda_small", raw, 0, n // 2 + 1))
    raises("400", "raw_handle",
           lambda: client.register_cuda_shared_memory("cuda_bad", b"bm90IGEgaGFuZGxl", 0, 64))
    assert client.get_cuda_shared_memory_status() == []
    client.register_cuda_shared_memory("cuda_small", raw, 0, n // 2)
    regions.create("cuda_in_ok", n)
    raises("400", r"should be at least \d+ bytes to hold the results",
           lambda: client.infer("add_64x64", [shm_input("cuda_in_ok", n, SMALL)],
                                outputs=[shm_output("cuda_small", n // 2)]))
    raises("400", "Invalid offset \\+ byte size for shared memory region: 'cuda_small'",
           lambda: client.infer("add_64x64", [shm_input("cuda_in_ok", n, SMALL)],
                                outputs=[shm_output("cuda_small", n)]))
    raises("400", "Invalid offset for shared memory region: 'cuda_in_ok'",
           lambda: client.infer("add_64x64", [shm_input("cuda_in_ok", n, SMALL, offset=n)]))
    raises("400", "Integer overflow detected",
           lambda: client.infer("add_64x64", [shm_input("cuda_in_ok", 2**64 - 1, SMALL, offset=8)]))
    raises("400", "unexpected total byte size",
           lambda: client.infer("add_64x64", [shm_input("cuda_in_ok", n - 4, SMALL)]))


def test_a_cpu_model_refuses_cuda_regions(
    client: httpclient.InferenceServerClient, regions: Regions
) -> None:
    n = _nbytes(CPU_SHAPE)
    regions.create("cuda_for_cpu", n)
    raises("400", 'needs a model with "execution_provider": "cuda"',
           lambda: client.infer("add_720p", [shm_input("cuda_for_cpu", n, CPU_SHAPE)]))


def test_registration_switched_off(gpu_repo: Path, tmp_path: Path) -> None:
    svc = start_service(gpu_repo, tmp_path, "--no-client-shared-memory")
    c = httpclient.InferenceServerClient(svc.url.removeprefix("http://"))
    try:
        assert "cuda_shared_memory" not in c.get_server_metadata()["extensions"]
        raises("501", "switched off",
               lambda: c.register_cuda_shared_memory("off", b"AAAA", 0, 64))
        raises("501", "switched off", lambda: c.get_cuda_shared_memory_status())
    finally:
        c.close()
        stop_service(svc)
