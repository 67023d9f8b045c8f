"""Lanes (one renderer's frame loop, see :mod:`fenceline.bench.engine`) for every path the
bench measures, each on its own frame of the same layout and contents:

- ``floor_lane``: onnxruntime called in process over an IOBinding of the frame, loaded through
  the service's own model loader (same session options): the floor.
- ``ipc_lane``, ``http_lane``: fenceline's interop API; a frame is "signal the input fence, ask
  for the run, get the output fence's value back"; outputs are written into the frame.
- ``kserve_binary_lane``: the KServe v2 protocol with tritonclient's binary tensor extension:
  inputs travel in the request, outputs come back in the reply and are copied into the frame.
- ``kserve_shm_lane``: Triton's system shared-memory extension: the frame is registered once
  as a region, requests name offsets in it, outputs are written into it.

The two KServe lanes run unchanged against a real Triton and against fenceline.
"""

from __future__ import annotations

import contextlib
import os
import secrets
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from fenceline.bench.buffers import Buffers, Signature
from fenceline.client import Fence, HttpClient, IpcClient

_models: dict[str, Any] = {}
_models_lock = threading.Lock()


def _loaded(path: str) -> Any:
    """One loaded model per process and file, shared by the lanes, as the service shares it."""
    from fenceline.runtime.models import Model

    with _models_lock:
        if path not in _models:
            model = Model(Path(path).stem, "1", Path(path))
            model.load()
            _models[path] = model
        return _models[path]


class _Lane:
    def __init__(self, buffers: Buffers, frame: Any) -> None:
        self.buffers = buffers
        self.frame = frame

    def digest(self) -> str:
        return self.buffers.output_digest()


@contextlib.contextmanager
def floor_lane(model_path: str, sig: Signature, fill: str) -> Iterator[_Lane]:
    model = _loaded(model_path)
    with Buffers(sig, fill=fill) as b:
        binding = model.session.io_binding()
        for t in sig.inputs:
            binding.bind_input(t.name, "cpu", 0, t.dtype, list(t.shape), b.array(t).ctypes.data)
        for t in sig.outputs:
            binding.bind_output(t.name, "cpu", 0, t.dtype, list(t.shape), b.array(t).ctypes.data)
        run = model.session.run_with_iobinding
        try:
            yield _Lane(b, lambda i: run(binding))
        finally:
            binding.clear_binding_inputs()
            binding.clear_binding_outputs()


@contextlib.contextmanager
def ipc_lane(socket_path: str, model: str, sig: Signature, fill: str) -> Iterator[_Lane]:
    with contextlib.ExitStack() as stack:
        b = stack.enter_context(Buffers(sig, fill=fill))
        ready, done = stack.enter_context(Fence()), stack.enter_context(Fence())
        client = stack.enter_context(IpcClient(socket_path, name="fenceline-bench"))
        memory = client.import_memory(b.frame)
        ins, outs = b.views(memory)
        sid = client.create_session(model, ins, outs, client.import_fence(ready),
                                    client.import_fence(done))["id"]
        signal, run = ready.signal, client.run

        def frame(i: int) -> None:
            signal(i)
            run(sid, i)

        yield _Lane(b, frame)  # closing the connection releases what it created


@contextlib.contextmanager
def http_lane(url: str, model: str, sig: Signature, fill: str) -> Iterator[_Lane]:
    with contextlib.ExitStack() as stack:
        b = stack.enter_context(Buffers(sig, named=True, fill=fill))
        ready = stack.enter_context(Fence(named=True))
        done = stack.enter_context(Fence(named=True))
        client = stack.enter_context(HttpClient(url, timeout_s=120))
        assert b.name and ready.name and done.name
        memory = client.import_memory(b.name)
        stack.callback(client.release_memory, memory)
        wait_id = client.import_fence(ready.name)
        stack.callback(client.release_fence, wait_id)
        signal_id = client.import_fence(done.name)
        stack.callback(client.release_fence, signal_id)
        ins, outs = b.views(memory)
        sid = client.create_session(model, ins, outs, wait_id, signal_id)["id"]
        stack.callback(client.release_session, sid)

        def frame(i: int) -> None:
            ready.signal(i)
            client.run(sid, i)

        yield _Lane(b, frame)


def _triton_client(url: str) -> Any:
    import tritonclient.http as httpclient

    # Made in the lane's own thread: a tritonclient HTTP client works only in its creator's.
    return httpclient.InferenceServerClient(url.split("://", 1)[-1].rstrip("/"),
                                            connection_timeout=120, network_timeout=120)


def _fresh(headers: dict[str, str] | None) -> dict[str, str] | None:
    # tritonclient adds Inference-Header-Content-Length to the dict it is given; a dict kept
    # across calls would send one request's length with the next.
    return dict(headers) if headers else None


@contextlib.contextmanager
def kserve_binary_lane(url: str, model: str, sig: Signature, fill: str,
                       headers: dict[str, str] | None = None) -> Iterator[_Lane]:
    import tritonclient.http as httpclient

    with Buffers(sig, fill=fill) as b:
        client = _triton_client(url)
        try:
            inputs = [(httpclient.InferInput(t.name, list(t.shape), t.datatype), b.array(t))
                      for t in sig.inputs]
            outputs = [httpclient.InferRequestedOutput(t.name, binary_data=True)
                       for t in sig.outputs]
            targets = [(t.name, b.array(t)) for t in sig.outputs]
            requests = [i for i, _ in inputs]

            def frame(i: int) -> None:
                for request, array in inputs:
                    request.set_data_from_numpy(array, binary_data=True)
                result = client.infer(model, requests, outputs=outputs, headers=_fresh(headers))
                for name, array in targets:
                    array[...] = result.as_numpy(name)  # the renderer needs it in its frame

            yield _Lane(b, frame)
        finally:
            client.close()


@contextlib.contextmanager
def kserve_shm_lane(url: str, model: str, sig: Signature, fill: str,
                    headers: dict[str, str] | None = None) -> Iterator[_Lane]:
    import tritonclient.http as httpclient

    with Buffers(sig, named=True, fill=fill) as b:
        assert b.name is not None
        client = _triton_client(url)
        region = f"fenceline_bench_{os.getpid()}_{secrets.token_hex(4)}"
        registered = False
        try:
            client.register_system_shared_memory(region, b.name, b.frame.size,
                                                 headers=_fresh(headers))
            registered = True
            ins = [(t.name, list(t.shape), t.datatype, t.nbytes, b.offsets[t.name])
                   for t in sig.inputs]
            outs = [(t.name, t.nbytes, b.offsets[t.name]) for t in sig.outputs]

            def frame(i: int) -> None:
                # Fresh request objects each frame: tritonclient's do not survive reuse with
                # shared-memory parameters (the second request's JSON is malformed).
                requests = []
                for name, shape, dt, nbytes, offset in ins:
                    request = httpclient.InferInput(name, shape, dt)
                    request.set_shared_memory(region, nbytes, offset=offset)
                    requests.append(request)
                outputs = []
                for name, nbytes, offset in outs:
                    out = httpclient.InferRequestedOutput(name)
                    out.set_shared_memory(region, nbytes, offset=offset)
                    outputs.append(out)
                client.infer(model, requests, outputs=outputs, headers=_fresh(headers))

            yield _Lane(b, frame)
        finally:
            if registered:
                with contextlib.suppress(Exception):  # the server may be gone, and its regions
                    client.unregister_system_shared_memory(region, headers=_fresh(headers))
            client.close()
