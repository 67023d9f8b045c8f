"""The CPU side of Triton's CUDA shared memory (triton/cuda_shm.py), which runs without a GPU:
parsing ``raw_handle``, the shared namespace with system regions, and the checks made before
any device memory is touched. The GPU half is tests/gpu/test_triton_cuda_shm.py."""

from __future__ import annotations

import base64
from collections.abc import Iterator
from pathlib import Path
from typing import Any, cast

import pytest

from fenceline.client import SharedFrame
from fenceline.errors import Conflict, InvalidArgument, NotFound, Unsupported
from fenceline.interop.datatypes import datatype
from fenceline.runtime.models import Model, ModelRepository, ModelSettings
from fenceline.runtime.service import Runtime
from fenceline.triton.cuda_shm import (
    CudaRegion,
    CudaSharedMemory,
    check_device_id,
    cuda_backend_works,
    parse_raw_handle,
)
from fenceline.triton.inference import KServeInference
from fenceline.triton.regions import InferenceSettings, ShmRef

FP32 = datatype("FP32")
SHAPE = [1, 3, 64, 64]
NBYTES = 3 * 64 * 64 * 4
HANDLE = bytes(range(64))


def b64(raw: bytes) -> dict[str, str]:
    return {"b64": base64.b64encode(raw).decode()}


class WithCuda(CudaSharedMemory):
    """The table as it behaves where the CUDA backend works, for the checks that come before
    any import; nothing here reaches the device."""

    @property
    def available(self) -> bool:
        return True


@pytest.fixture
def runtime(model_repo: Path) -> Iterator[Runtime]:
    rt = Runtime(ModelRepository.from_sources(model_repo, {}))
    yield rt
    rt.close()


@pytest.fixture
def kserve(runtime: Runtime) -> Iterator[KServeInference]:
    k = KServeInference(runtime)
    yield k
    k.close()


@pytest.fixture
def cuda(kserve: KServeInference) -> Iterator[WithCuda]:
    c = WithCuda(kserve.runtime, kserve.settings, kserve.shm.namespace)
    kserve.cuda = c
    yield c
    drop_placed(c)


def drop_placed(c: CudaSharedMemory) -> None:
    """Regions placed by hand hold no import: they leave the namespace without a release."""
    regions = c.namespace.regions
    for name in [n for n, r in regions.items() if isinstance(r, CudaRegion)]:
        del regions[name]


def place(c: CudaSharedMemory, name: str, byte_size: int, device_id: int = 0) -> None:
    """A registered region without device memory behind it: every check below fails before
    a view would be made."""
    c.namespace.regions[name] = CudaRegion(name, byte_size, "none", device_id, cast(Any, None))


def cuda_model() -> Model:
    return Model("gpu_add", "1", Path("/nonexistent"), ModelSettings("cuda"))


def test_raw_handle_is_the_base64_of_64_bytes() -> None:
    assert parse_raw_handle(b64(HANDLE)) == HANDLE
    for bad, text in [
        (None, "needs 'raw_handle'"),
        ("AAAA", "needs 'raw_handle'"),
        ({"b64": 7}, "needs 'raw_handle'"),
        ({"b64": "not base64!"}, "not valid base64"),
        (b64(HANDLE[:63]), "decodes to 63 bytes"),
        (b64(HANDLE + b"\0"), "decodes to 65 bytes"),
    ]:
        with pytest.raises(InvalidArgument, match=text):
            parse_raw_handle(bad)


@pytest.mark.parametrize("value", [-1, True, "0", 1.0, 2**31, None])
def test_device_id_is_an_ordinal(value: object) -> None:
    with pytest.raises(InvalidArgument, match="device_id must be a CUDA device ordinal"):
        check_device_id(value)


@pytest.mark.skipif(cuda_backend_works(), reason="this machine has a working CUDA backend")
def test_without_cuda_every_call_answers_unsupported(kserve: KServeInference) -> None:
    assert not kserve.cuda.enabled
    for call in (
        lambda: kserve.cuda.status(),
        lambda: kserve.cuda.status("r"),
        lambda: kserve.cuda.register("r", b64(HANDLE), 0, 64),
        lambda: kserve.cuda.unregister("r"),
        lambda: kserve.cuda.unregister(),
    ):
        with pytest.raises(Unsupported, match="CUDA shared memory is not available"):
            call()


def test_registration_is_checked_before_any_import(cuda: WithCuda) -> None:
    with pytest.raises(InvalidArgument, match="needs 'raw_handle'"):
        cuda.register("r", "AAAA", 0, 64)
    with pytest.raises(InvalidArgument, match="byte_size must be an unsigned 64-bit"):
        cuda.register("r", b64(HANDLE), 0, -1)
    with pytest.raises(InvalidArgument, match="'r': invalid args: byte_size must be positive"):
        cuda.register("r", b64(HANDLE), 0, 0)
    with pytest.raises(InvalidArgument, match="device_id"):
        cuda.register("r", b64(HANDLE), "0", 64)
    with pytest.raises(InvalidArgument, match="'region name' is necessary"):
        cuda.register("", b64(HANDLE), 0, 64)
    assert cuda.status() == []


def test_switched_off_registration_answers_unsupported(kserve: KServeInference) -> None:
    off = WithCuda(kserve.runtime, InferenceSettings(client_shared_memory=False), kserve.shm.namespace)
    assert not off.enabled
    with pytest.raises(Unsupported, match="switched off"):
        off.register("r", b64(HANDLE), 0, 64)
    with pytest.raises(Unsupported, match="switched off"):
        off.status()


def test_system_and_cuda_regions_share_one_namespace(
    kserve: KServeInference, cuda: WithCuda
) -> None:
    with SharedFrame(NBYTES, named=True) as frame:
        kserve.shm.register("sys", str(frame.name), 0, NBYTES)
        with pytest.raises(Conflict, match="shared memory region 'sys' already in manager"):
            cuda.register("sys", b64(HANDLE), 0, 64)
        with pytest.raises(NotFound, match="'sys' is registered as system shared memory, not CUDA"):
            cuda.status("sys")
        place(cuda, "gpu", 64)
        with pytest.raises(Conflict, match="shared memory region 'gpu' already in manager"):
            cuda.register("gpu", b64(HANDLE), 0, 64)
        with pytest.raises(Conflict, match="shared memory region 'gpu' already in manager"):
            kserve.shm.register("gpu", str(frame.name), 0, NBYTES)
        with pytest.raises(NotFound, match="'gpu' is registered as CUDA shared memory, not system"):
            kserve.shm.status("gpu")
        assert cuda.status() == [{"name": "gpu", "device_id": 0, "byte_size": 64}]
        assert cuda.status("gpu") == cuda.status()
        assert [r["name"] for r in kserve.shm.status()] == ["sys"]
        # Each kind unregisters only its own names; unknown names are not an error.
        assert cuda.unregister("sys") == 0 and cuda.unregister("ghost") == 0
        assert kserve.shm.unregister("gpu") == 0
        kserve.shm.unregister()
    with pytest.raises(NotFound, match="Unable to find cuda shared memory region: 'ghost'"):
        cuda.status("ghost")


@pytest.mark.parametrize("everything", [False, True])
def test_unregistering_a_cuda_region_releases_its_import(
    runtime: Runtime, cuda: WithCuda, everything: bool
) -> None:
    """The table gives the import back under the owner it was made under: a release under the
    system regions' owner answered not_found and left the import open."""
    with SharedFrame(NBYTES, named=True) as frame:
        # A host import stands in for the cuda_ipc one: the table only sees an id and an owner.
        owner = cuda.owner
        info = runtime.import_memory(owner, "host_shm", name=str(frame.name), size_bytes=NBYTES)
        memory = runtime.memory.get(owner, info["id"]).obj
        cuda.namespace.regions["gpu"] = CudaRegion("gpu", NBYTES, info["id"], 0, memory)
        assert cuda.unregister(None if everything else "gpu") == 1
        assert runtime.memory.owned_by(owner) == []
        assert cuda.status() == []
        with pytest.raises(NotFound):
            runtime.release_memory(owner, info["id"])


def test_the_region_count_limit_counts_both_kinds(kserve: KServeInference) -> None:
    settings = InferenceSettings(max_regions=1)
    k = KServeInference(kserve.runtime, settings)
    c = WithCuda(kserve.runtime, settings, k.shm.namespace)
    place(c, "gpu", 64)
    with SharedFrame(64, named=True) as frame, pytest.raises(InvalidArgument, match="at most 1 shared memory"):
        k.shm.register("sys", str(frame.name), 0, 64)
    drop_placed(c)


def test_a_cpu_model_refuses_a_cuda_region(runtime: Runtime, cuda: WithCuda) -> None:
    place(cuda, "gpu", NBYTES)
    model = runtime.models.get("add_64x64")
    with pytest.raises(InvalidArgument, match='runs on cpu; CUDA shared memory needs a model with '
                                              '"execution_provider": "cuda"'):
        cuda.view(model, ShmRef("gpu", NBYTES), FP32, SHAPE, "input", "x")


@pytest.mark.parametrize(
    ("ref", "role", "text"),
    [
        (ShmRef("ghost", NBYTES), "input", "Unable to find shared memory region: 'ghost'"),
        (ShmRef("gpu", 4, NBYTES + 2), "input", "Invalid offset for shared memory region"),
        (ShmRef("gpu", 2**64 - 1, 8), "input", "Integer overflow detected"),
        (ShmRef("gpu", NBYTES, 4), "input", "Invalid offset \\+ byte size"),
        (ShmRef("gpu", NBYTES - 4), "input", "unexpected total byte size"),
        (ShmRef("gpu", NBYTES - 4), "output", "should be at least"),
        (ShmRef("gpu", NBYTES, 2), "input", "not a multiple of its element size"),
        (ShmRef("far", NBYTES), "input", "is on cuda:1; model 'gpu_add' runs on cuda:0"),
    ],
)
def test_windows_are_checked_as_for_system_regions(
    cuda: WithCuda, ref: ShmRef, role: str, text: str
) -> None:
    place(cuda, "gpu", NBYTES + 2)
    place(cuda, "far", NBYTES, device_id=1)
    with pytest.raises((InvalidArgument, NotFound), match=text):
        cuda.view(cuda_model(), ref, FP32, SHAPE, role, "x")
