"""KServe v2 routes, answered the way Triton answers them: server and model metadata, health,
readiness, and inference with JSON tensors, the binary tensor data extension and Triton's
shared-memory parameters (regions live in :mod:`fenceline.api.triton_shm`).

Success is exactly 200; every error body is ``{"error": ...}`` (the app's handlers, with the
KServe status table of :mod:`fenceline.api.errors`). Decoding, the run and encoding happen in
the threadpool, so a large frame never blocks the event loop.
"""

from __future__ import annotations

import asyncio
import zlib
from collections.abc import Mapping
from typing import Any
from urllib.parse import unquote_to_bytes

import numpy as np
from fastapi import APIRouter, Request, Response
from starlette.concurrency import run_in_threadpool
from starlette.exceptions import HTTPException
from starlette.requests import ClientDisconnect
from starlette.types import Receive, Scope, Send

from fenceline import __version__
from fenceline.api import bodies, json_tensors
from fenceline.api.errors import error_response
from fenceline.api.peers import http_caller
from fenceline.api.triton_shm import cuda_shared_memory_available
from fenceline.errors import InvalidArgument, NotFound, Unavailable, Unsupported
from fenceline.interop.datatypes import datatype
from fenceline.runtime.model_control import ModelControl
from fenceline.runtime.models import Model
from fenceline.runtime.service import Runtime
from fenceline.triton.inference import (
    InferRequest,
    InferResult,
    InputTensor,
    KServeInference,
    OutputRequest,
)
from fenceline.triton.regions import InferenceSettings, ShmRef, check_u64, tensor_nbytes
from fenceline.triton.statistics import model_statistics

router = APIRouter(prefix="/v2", tags=["kserve"])

HEADER_LENGTH = "inference-header-content-length"
ALIGN = 64  # binary tensor data lands at this alignment in the request buffer


def runtime(request: Request) -> Runtime:
    rt: Runtime = request.app.state.runtime
    return rt


def kserve(request: Request) -> KServeInference:
    k: KServeInference = request.app.state.kserve
    return k


def install(app: Any, runtime: Runtime, settings: InferenceSettings | None,
            model_control: ModelControl | None = None) -> None:
    app.state.kserve = KServeInference(runtime, settings)
    app.state.model_control = model_control or ModelControl(runtime)
    app.state.large_json = json_tensors.LargeDocuments()


# -- metadata and health --------------------------------------------------------------------


@router.get("")
def server_metadata(request: Request) -> dict[str, Any]:
    extensions = ["binary_tensor_data", "model_configuration", "model_repository", "statistics"]
    if kserve(request).shm.enabled:
        extensions.append("system_shared_memory")
    if cuda_shared_memory_available() and kserve(request).cuda.enabled:
        extensions.append("cuda_shared_memory")
    extensions.append("interop")
    return {"name": "fenceline", "version": __version__, "extensions": extensions}


@router.get("/health/live")
def live() -> Response:
    return Response(status_code=200)


@router.get("/health/ready")
def ready(request: Request) -> Response:
    """200 with no body, or 503 naming why not (the first check that says so)."""
    state = request.app.state
    reasons = [why for check in getattr(state, "ready_checks", ()) if (why := check())]
    if state.ready and not reasons:
        return Response(status_code=200)
    return error_response(503, reasons[0] if reasons else "the service is not ready",
                          Unavailable.code)


# -- statistics (Triton's extension); before /models/{name}, which would take "stats" as a name


@router.get("/models/stats")
def all_model_stats(request: Request) -> dict[str, Any]:
    rt = runtime(request)
    # Counts are kept per model name, so one row per name (its newest version), not per version.
    return model_statistics(rt.metrics, rt.models.newest())


@router.get("/models/{name}/stats")
def model_stats(name: str, request: Request) -> dict[str, Any]:
    rt = runtime(request)
    return model_statistics(rt.metrics, [_served(rt, name, None)])


@router.get("/models/{name}/versions/{version}/stats")
def model_version_stats(name: str, version: str, request: Request) -> dict[str, Any]:
    rt = runtime(request)
    return model_statistics(rt.metrics, [_served(rt, name, version)])


def _served(rt: Runtime, name: str, version: str | None) -> Model:
    """The model the statistics are asked of, or Triton's answer when it is not served: 400
    (its INVALID_ARG), where the other routes answer an unknown model with 404."""
    try:
        return rt.models.get(name, version)
    except NotFound:
        if version is not None and name in rt.models.names():
            raise InvalidArgument(
                f"requested model version is not available for model '{name}'") from None
        raise InvalidArgument(f"requested model '{name}' is not available") from None


@router.get("/models/{name}")
def model_metadata(name: str, request: Request) -> dict[str, Any]:
    return runtime(request).models.get(name).metadata()


@router.get("/models/{name}/versions/{version}")
def model_version_metadata(name: str, version: str, request: Request) -> dict[str, Any]:
    return runtime(request).models.get(name, version).metadata()


@router.get("/models/{name}/ready")
def model_ready(name: str, request: Request) -> Response:
    runtime(request).models.get(name)
    return Response(status_code=200)


@router.get("/models/{name}/versions/{version}/ready")
def model_version_ready(name: str, version: str, request: Request) -> Response:
    runtime(request).models.get(name, version)
    return Response(status_code=200)


def _config_tensors(specs: Mapping[str, Any]) -> list[dict[str, Any]]:
    return [{"name": s.name, "data_type": f"TYPE_{s.datatype.name}", "dims": s.shape}
            for s in specs.values()]


@router.get("/models/{name}/config")
def model_config(name: str, request: Request) -> dict[str, Any]:
    m = runtime(request).models.get(name)
    return {
        "name": m.name,
        "platform": "onnxruntime_onnx",
        "backend": "onnxruntime",
        "max_batch_size": 0,
        "input": _config_tensors(m.inputs),
        "output": _config_tensors(m.outputs),
    }


@router.get("/models/{name}/versions/{version}/config")
def model_version_config(name: str, version: str, request: Request) -> dict[str, Any]:
    runtime(request).models.get(name, version)
    return model_config(name, request)


# -- model repository (Triton's extension; runtime/model_control.py) ------------------------


def control(request: Request) -> ModelControl:
    c: ModelControl = request.app.state.model_control
    return c


async def _optional_body(request: Request) -> dict[str, Any]:
    """The optional JSON object of a repository request (tritonclient sends none or one)."""
    raw = await request.body()
    if not raw.strip():
        return {}
    return json_tensors.loads_object(raw, "the repository request")


def _url_name(request: Request, name: str) -> str:
    """A model name from the URL, as UTF-8 text: the server's decoder turns percent-escaped
    bytes that are not UTF-8 into U+FFFD, which would name another model; such a name is
    refused."""
    raw = request.scope.get("raw_path")
    if "\ufffd" in name and isinstance(raw, bytes):
        try:
            unquote_to_bytes(raw.decode("ascii", "replace")).decode("utf-8")
        except UnicodeDecodeError:
            raise InvalidArgument("the model name in the URL is not UTF-8 text") from None
    return name


@router.post("/repository/index")
async def repository_index(request: Request) -> list[dict[str, Any]]:
    body = await _optional_body(request)
    ready = body.get("ready", False)
    if not isinstance(ready, bool):
        raise InvalidArgument("'ready' must be true or false")
    return runtime(request).models.index(ready_only=ready)


@router.post("/repository/models/{name}/load")
async def repository_load(name: str, request: Request) -> Response:
    params = _params(await _optional_body(request), "the load request")
    files = sorted(k for k in params if k.startswith("file:"))
    if files:
        raise Unsupported(
            f"load parameter {files[0]!r}: fenceline loads model files from its repository "
            "only; put them there and load again (a 'config' override is applied)"
        )
    config = params.get("config")
    if config is not None and not isinstance(config, str):
        raise InvalidArgument(f"failed to load '{name}': Invalid config override: the "
                              "'config' parameter is the model config as a JSON string")
    # Awaited, not run in a worker thread: a flood of loads waits in the queue without holding
    # the threads that other requests need (runtime/model_control.py paces the loads).
    await asyncio.wrap_future(control(request).submit_load(_url_name(request, name), config))
    return Response(status_code=200)


@router.post("/repository/models/{name}/unload")
async def repository_unload(name: str, request: Request) -> Response:
    _params(await _optional_body(request), "the unload request")  # unload_dependents: no ensembles
    await run_in_threadpool(control(request).unload, _url_name(request, name))
    return Response(status_code=200)


# -- inference ------------------------------------------------------------------------------


@router.post("/models/{name}/infer",
             openapi_extra=bodies.body(bodies.INFER, bodies.INFER_EXAMPLE, binary=True))
async def infer(name: str, request: Request) -> Response:
    return await _infer(request, name, None)


@router.post("/models/{name}/versions/{version}/infer",
             openapi_extra=bodies.body(bodies.INFER, bodies.INFER_EXAMPLE, binary=True))
async def infer_version(name: str, version: str, request: Request) -> Response:
    return await _infer(request, name, version)


async def _infer(request: Request, name: str, version: str | None) -> Response:
    k = kserve(request)
    body, header_length = await read_body(
        request, k.settings.max_request_bytes, k.settings.max_json_bytes
    )

    def work() -> Response:
        header = parse_header(body[:header_length])
        req = decode_request(header, body[header_length:], name, version)
        if req.uses_shm():
            req.caller = http_caller(request)
        return encode_result(k.infer(req))

    if header_length < json_tensors.LARGE:
        return await run_in_threadpool(work)
    async with request.app.state.large_json:
        return await run_in_threadpool(work)


def _aligned(n: int, header_length: int) -> memoryview:
    """n writable bytes placed so the binary data after the JSON header starts aligned."""
    buf = np.empty(n + ALIGN, np.uint8)
    start = (-(buf.ctypes.data + header_length)) % ALIGN
    return buf.data[start : start + n]


def _int_header(request: Request, key: str) -> int | None:
    raw = request.headers.get(key)
    if raw is None:
        return None
    try:
        value = int(raw)
    except ValueError:
        raise InvalidArgument(f"Unable to parse {key}, got: {raw!r}") from None
    if value < 0:
        raise InvalidArgument(f"{key} must not be negative, got: {raw!r}")
    return value


async def read_body(
    request: Request, limit: int, json_limit: int | None = None
) -> tuple[memoryview, int]:
    """The whole request body in one aligned buffer, and the JSON header's length. The body
    is at most ``limit`` bytes, of which JSON at most ``json_limit``."""
    json_limit = limit if json_limit is None else min(limit, json_limit)
    try:
        return await _read_body(request, limit, json_limit)
    except ClientDisconnect:
        raise InvalidArgument("the client went away before sending the whole body") from None


async def _read_body(request: Request, limit: int, json_limit: int) -> tuple[memoryview, int]:
    encoding = request.headers.get("content-encoding", "identity").strip().lower()
    if encoding not in ("identity", "gzip", "deflate"):
        raise HTTPException(415, f"unsupported Content-Encoding {encoding!r}; use gzip or deflate")
    length = _int_header(request, "content-length")
    header_length = _int_header(request, HEADER_LENGTH)
    json_too_large = (
        f"the request's JSON is larger than this service's limit of {json_limit} bytes "
        "(--max-json-mb); send large tensors as binary data or in shared memory"
    )
    if header_length is not None and header_length > json_limit:
        raise HTTPException(413, json_too_large)
    if header_length is None:  # the whole body is JSON
        limit = json_limit
    too_large = (
        json_too_large if limit == json_limit and header_length is None
        else f"the request body is larger than this service's limit of {limit} bytes"
    )  # fmt: skip
    if length is not None and length > limit:
        raise HTTPException(413, too_large)
    if encoding == "identity" and length is not None:
        body = _aligned(length, header_length or 0)
        pos = 0
        async for chunk in request.stream():
            if pos + len(chunk) > length:
                raise InvalidArgument("the request body is longer than its Content-Length")
            body[pos : pos + len(chunk)] = chunk
            pos += len(chunk)
        if pos != length:
            raise InvalidArgument(f"the request body ended after {pos} of {length} bytes")
    else:
        chunks, total = [], 0
        async for chunk in request.stream():
            total += len(chunk)
            if total > limit:
                raise HTTPException(413, too_large)
            chunks.append(chunk)
        raw = b"".join(chunks)
        if encoding != "identity":
            raw = _decompress(raw, encoding, limit, too_large)
        body = _aligned(len(raw), header_length or 0)
        body[:] = raw
    if header_length is None:
        header_length = len(body)
    if header_length > len(body):
        raise InvalidArgument(
            f"inference header size should be in range (0, {len(body)}), got: {header_length}"
        )
    return body, header_length


def _decompress(raw: bytes, encoding: str, limit: int, too_large: str) -> bytes:
    wbits = 16 + zlib.MAX_WBITS if encoding == "gzip" else zlib.MAX_WBITS
    d = zlib.decompressobj(wbits)
    try:
        out = d.decompress(raw, limit + 1)
    except zlib.error as e:
        raise InvalidArgument(f"the {encoding} request body does not decompress: {e}") from None
    if len(out) > limit or d.unconsumed_tail:
        raise HTTPException(413, too_large)
    return out


def parse_header(raw: memoryview) -> dict[str, Any]:
    return json_tensors.loads_object(bytes(raw), "the inference request")


def _params(obj: dict[str, Any], what: str) -> dict[str, Any]:
    p = obj.get("parameters", {})
    if not isinstance(p, dict):
        raise InvalidArgument(f"{what}: 'parameters' must be a JSON object")
    return p


def _shm_ref(params: dict[str, Any], what: str) -> ShmRef | None:
    region = params.get("shared_memory_region")
    if region is None:
        if "shared_memory_byte_size" in params or "shared_memory_offset" in params:
            raise InvalidArgument(f"{what}: shared_memory_byte_size needs shared_memory_region")
        return None
    if not isinstance(region, str) or not region:
        raise InvalidArgument(f"{what}: shared_memory_region must be a non-empty string")
    if "shared_memory_byte_size" not in params:
        raise InvalidArgument(
            f"{what}: 'shared_memory_byte_size' is required with shared_memory_region"
        )
    size = check_u64(params["shared_memory_byte_size"], f"{what}: shared_memory_byte_size")
    offset = check_u64(params.get("shared_memory_offset", 0), f"{what}: shared_memory_offset")
    return ShmRef(region, size, offset)


def _name(obj: Any, what: str) -> str:
    if not isinstance(obj, dict):
        raise InvalidArgument(f"each {what} must be a JSON object")
    name = obj.get("name")
    if not isinstance(name, str) or not name:
        raise InvalidArgument(f"each {what} needs a string 'name'")
    return name


def _shape(raw: Any, what: str) -> list[int]:
    if not isinstance(raw, list) or len(raw) > 16 or not all(
        isinstance(d, int) and not isinstance(d, bool) and 0 <= d < 2**63 for d in raw
    ):
        raise InvalidArgument(f"{what}: 'shape' must be a list of at most 16 non-negative ints")
    return list(raw)


def decode_request(
    header: dict[str, Any], binary: memoryview, model: str, version: str | None
) -> InferRequest:
    params = _params(header, "the request")
    if params.get("sequence_id") not in (None, 0, ""):
        raise InvalidArgument(
            f"inference request to model '{model}' must not specify a non-zero or non-empty "
            "correlation ID: fenceline serves no sequence models"
        )
    request_id = header.get("id")
    if request_id is not None and not isinstance(request_id, str):
        raise InvalidArgument("'id' must be a string")
    raw_inputs = header.get("inputs")
    if not isinstance(raw_inputs, list) or not raw_inputs:
        raise InvalidArgument("Unable to parse 'inputs': a non-empty list is required")
    inputs = []
    pos = 0
    for raw in raw_inputs:
        name = _name(raw, "input")
        what = f"input '{name}'"
        dt = datatype(raw.get("datatype"))
        shape = _shape(raw.get("shape"), what)
        p = _params(raw, what)
        shm = _shm_ref(p, what)
        size = p.get("binary_data_size")
        sources = (shm is not None) + (size is not None) + ("data" in raw)
        if sources != 1:
            raise InvalidArgument(
                f"{what} needs exactly one of 'data', binary_data_size or shared_memory_region"
            )
        t = InputTensor(name, dt, shape, shm=shm)
        if size is not None:
            size = check_u64(size, f"{what}: binary_data_size")
            need = tensor_nbytes(dt, shape)
            if size != need:
                raise InvalidArgument(
                    f"unexpected total byte size {size} for input '{name}', expecting {need}"
                )
            if pos + size > len(binary):
                raise InvalidArgument(
                    f"unexpected size for input '{name}', expecting {pos + size - len(binary)} "
                    f"additional bytes for model '{model}'"
                )
            t.array = np.frombuffer(binary[pos : pos + size], dt.numpy).reshape(shape)
            t.binary = True
            pos += size
        elif shm is None:
            t.array = json_tensors.to_array(raw["data"], dt.numpy, shape, what)
        inputs.append(t)
    if pos != len(binary):
        raise InvalidArgument(
            f"unexpected additional input data for model '{model}': {len(binary) - pos} bytes "
            "after the last binary input"
        )
    binary_output = params.get("binary_data_output", False)
    if not isinstance(binary_output, bool):
        raise InvalidArgument("binary_data_output must be true or false")
    outputs = None
    if "outputs" in header:
        if not isinstance(header["outputs"], list):
            raise InvalidArgument("'outputs' must be a list")
        outputs = [_decode_output(o, binary_output) for o in header["outputs"]]
    return InferRequest(model, version, request_id, inputs, outputs, binary_output)


def _decode_output(raw: Any, binary_default: bool) -> OutputRequest:
    name = _name(raw, "output")
    what = f"output '{name}'"
    p = _params(raw, what)
    if "classification" in p:
        raise Unsupported(f"{what}: the classification extension is not supported")
    shm = _shm_ref(p, what)
    binary = p.get("binary_data", binary_default)
    if not isinstance(binary, bool):
        raise InvalidArgument(f"{what}: binary_data must be true or false")
    return OutputRequest(name, binary and shm is None, shm)


def encode_result(result: InferResult) -> Response:
    outputs: list[dict[str, Any]] = []
    parts: list[memoryview] = []
    json_arrays: dict[int, np.ndarray] = {}
    for o in result.outputs:
        entry: dict[str, Any] = {"name": o.name, "datatype": o.datatype.name, "shape": o.shape}
        if o.shm is not None:
            entry["parameters"] = {"shared_memory_region": o.shm.region,
                                   "shared_memory_byte_size": o.nbytes}
            if o.shm.offset:
                entry["parameters"]["shared_memory_offset"] = o.shm.offset
        elif o.binary:
            assert o.array is not None
            entry["parameters"] = {"binary_data_size": o.array.nbytes}
            parts.append(o.array.reshape(-1).view(np.uint8).data)
        else:
            assert o.array is not None
            json_arrays[len(outputs)] = o.array
        outputs.append(entry)
    header: dict[str, Any] = {"model_name": result.model_name,
                              "model_version": result.model_version}
    if result.id is not None:
        header["id"] = result.id
    header["outputs"] = outputs
    encoded = json_tensors.dumps(header, json_arrays)
    if not parts:
        return Response(encoded, status_code=200, media_type="application/json")
    return TensorResponse(encoded, parts)


class TensorResponse(Response):
    """The JSON header, then each binary output straight from its array (no joined copy)."""

    def __init__(self, header: bytes, parts: list[memoryview]) -> None:
        total = len(header) + sum(p.nbytes for p in parts)
        super().__init__(
            None,
            status_code=200,
            headers={"Inference-Header-Content-Length": str(len(header)),
                     "Content-Length": str(total)},
            media_type="application/octet-stream",
        )
        self.header = header
        self.parts = parts

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        await send({"type": "http.response.start", "status": self.status_code,
                    "headers": self.raw_headers})
        await send({"type": "http.response.body", "body": self.header, "more_body": True})
        for part in self.parts:
            await send({"type": "http.response.body", "body": part, "more_body": True})
        await send({"type": "http.response.body", "body": b"", "more_body": False})
