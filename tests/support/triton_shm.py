"""What the Triton shared-memory tests (system: tests/integration/test_triton_shm.py, CUDA:
tests/gpu/test_triton_cuda_shm.py) send through the unmodified tritonclient, and how they
check a refusal."""

from __future__ import annotations

import contextlib
import re
from collections.abc import Callable, Iterator, Sequence

import pytest
import tritonclient.http as httpclient
from tritonclient.utils import InferenceServerException

from tests.support.service import Service


@contextlib.contextmanager
def triton_client(service: Service) -> Iterator[httpclient.InferenceServerClient]:
    """tritonclient's HTTP client for ``service``, closed when the block ends."""
    c = httpclient.InferenceServerClient(service.url.removeprefix("http://"))
    try:
        yield c
    finally:
        c.close()


def shm_input(region: str, size: int, shape: Sequence[int] = (1, 3, 64, 64), offset: int = 0,
              name: str = "x") -> httpclient.InferInput:
    """An FP32 input read from ``size`` bytes at ``offset`` of the registered ``region``."""
    i = httpclient.InferInput(name, list(shape), "FP32")
    i.set_shared_memory(region, size, offset=offset)
    return i


def shm_output(region: str, size: int, offset: int = 0,
               name: str = "y") -> httpclient.InferRequestedOutput:
    """An output written into ``size`` bytes at ``offset`` of the registered ``region``."""
    o = httpclient.InferRequestedOutput(name)
    o.set_shared_memory(region, size, offset=offset)
    return o


def raises(status: str, pattern: str, call: Callable[[], object]) -> None:
    """``call`` is refused with HTTP ``status`` and a message matching ``pattern``."""
    with pytest.raises(InferenceServerException) as e:
        call()
    assert e.value.status() == status, e.value.message()
    assert re.search(pattern, e.value.message()), e.value.message()
