"""Latency of fenceline's Triton-compatible paths, measured the way a Triton user would see it:
the unmodified tritonclient over loopback HTTP against a running ``fenceline serve``.

- :func:`measure_kserve_binary`: one ``infer`` with the binary tensor data extension per
  sample, input sent in the body, output read back into numpy.
- :func:`measure_system_shm`: the frame sits in a system shared-memory region (written once,
  as a renderer's frame would be); each sample is one ``infer`` whose input and output are
  regions, so no tensor bytes cross the socket and the output is read in place.

Each returns the per-request wall times in seconds, warm-up excluded. tritonclient is a test
extra (``pip install 'fenceline[test]'``).
"""

from __future__ import annotations

import contextlib
import os
import secrets
import time
from typing import Any

import numpy as np


def _client(url: str) -> Any:
    import tritonclient.http as httpclient

    host = url.split("://", 1)[-1].rstrip("/")
    # Large frames take longer than tritonclient's 60 s default on slow machines only; be safe.
    return httpclient.InferenceServerClient(host, connection_timeout=120, network_timeout=120)


def _io(client: Any, model: str) -> tuple[str, str, str]:
    meta = client.get_model_metadata(model)
    return meta["inputs"][0]["name"], meta["inputs"][0]["datatype"], meta["outputs"][0]["name"]


def _frame(shape: list[int], triton_type: str) -> np.ndarray:
    from tritonclient.utils import triton_to_np_dtype

    rng = np.random.default_rng(0)
    return rng.random(shape, dtype=np.float32).astype(triton_to_np_dtype(triton_type))


def measure_kserve_binary(
    url: str, model: str, shape: list[int], iterations: int, warmup: int = 3
) -> list[float]:
    import tritonclient.http as httpclient

    client = _client(url)
    try:
        in_name, dt, out_name = _io(client, model)
        frame = _frame(shape, dt)
        samples = []
        for i in range(warmup + iterations):
            start = time.perf_counter()
            inp = httpclient.InferInput(in_name, list(shape), dt)
            inp.set_data_from_numpy(frame, binary_data=True)
            out = httpclient.InferRequestedOutput(out_name, binary_data=True)
            result = client.infer(model, [inp], outputs=[out])
            result.as_numpy(out_name)
            if i >= warmup:
                samples.append(time.perf_counter() - start)
        return samples
    finally:
        client.close()


def measure_system_shm(
    url: str, model: str, shape: list[int], iterations: int, warmup: int = 3
) -> list[float]:
    import tritonclient.http as httpclient
    import tritonclient.utils.shared_memory as shm

    client = _client(url)
    tag = f"{os.getpid()}_{secrets.token_hex(4)}"
    names = (f"bench_in_{tag}", f"bench_out_{tag}")
    handles = []
    try:
        in_name, dt, out_name = _io(client, model)
        frame = _frame(shape, dt)
        for name in names:
            handles.append(shm.create_shared_memory_region(name, "/fl_" + name, frame.nbytes))
            client.register_system_shared_memory(name, "/fl_" + name, frame.nbytes)
        shm.set_shared_memory_region(handles[0], [frame])
        samples = []
        for i in range(warmup + iterations):
            start = time.perf_counter()
            inp = httpclient.InferInput(in_name, list(shape), dt)
            inp.set_shared_memory(names[0], frame.nbytes)
            out = httpclient.InferRequestedOutput(out_name)
            out.set_shared_memory(names[1], frame.nbytes)
            result = client.infer(model, [inp], outputs=[out])
            output = result.get_output(out_name)
            shm.get_contents_as_numpy(handles[1], frame.dtype, output["shape"])
            if i >= warmup:
                samples.append(time.perf_counter() - start)
        return samples
    finally:
        for name in names[: len(handles)]:
            # The service may be gone; its regions went with it.
            with contextlib.suppress(Exception):
                client.unregister_system_shared_memory(name)
        for h in handles:
            shm.destroy_shared_memory_region(h)
        client.close()
