"""Triton's shared-memory extensions: ``/v2/systemsharedmemory/...`` and
``/v2/cudasharedmemory/...``.

System regions are imported through the host_shm importer once, at registration
(:class:`fenceline.triton.system_shm.SystemSharedMemory`); CUDA regions through the cuda_ipc
importer (:class:`fenceline.triton.cuda_shm.CudaSharedMemory`); inference binds both in place.
CUDA shared memory needs fenceline's CUDA backend and a GPU: without them every CUDA route
answers 501 and ``GET /v2`` leaves ``cuda_shared_memory`` out of its extensions, so a client can
ask first.
"""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter, Request, Response
from starlette.concurrency import run_in_threadpool

from fenceline.api import bodies, json_tensors
from fenceline.api.peers import http_caller
from fenceline.errors import InvalidArgument
from fenceline.triton.cuda_shm import CudaSharedMemory, cuda_backend_works
from fenceline.triton.inference import KServeInference
from fenceline.triton.system_shm import SystemSharedMemory

router = APIRouter(prefix="/v2", tags=["triton shared memory"])


def cuda_shared_memory_available() -> bool:
    """CUDA IPC registration needs the native CUDA backend and at least one device."""
    return cuda_backend_works()


def shm(request: Request) -> SystemSharedMemory:
    k: KServeInference = request.app.state.kserve
    return k.shm


def ok() -> Response:
    return Response(status_code=200)


# -- system shared memory -------------------------------------------------------------------


@router.get("/systemsharedmemory/status")
def system_status(request: Request) -> list[dict[str, Any]]:
    return shm(request).status()


@router.get("/systemsharedmemory/region/{name}/status")
def system_region_status(name: str, request: Request) -> list[dict[str, Any]]:
    return shm(request).status(name)


async def _json_object(request: Request) -> dict[str, Any]:
    raw = await request.body()
    return json_tensors.loads_object(raw, "the request body") if raw else {}


@router.post("/systemsharedmemory/region/{name}/register",
             openapi_extra=bodies.body(bodies.SYSTEM_SHM_REGISTER,
                                       {"key": "/frame0", "offset": 0, "byte_size": 49152}))
async def system_register(name: str, request: Request) -> Response:
    regions = shm(request)
    regions.check_enabled()
    body = await _json_object(request)
    if "key" not in body:
        raise InvalidArgument("Shared memory register request has no 'key' field")
    if "byte_size" not in body:
        raise InvalidArgument("Shared memory register request has no 'byte_size' field")
    caller = await run_in_threadpool(http_caller, request)
    await run_in_threadpool(
        regions.register, name, body["key"], body.get("offset", 0), body["byte_size"], caller
    )
    return ok()


@router.post("/systemsharedmemory/region/{name}/unregister")
def system_unregister(name: str, request: Request) -> Response:
    shm(request).unregister(name, http_caller(request))
    return ok()


@router.post("/systemsharedmemory/unregister")
def system_unregister_all(request: Request) -> Response:
    shm(request).unregister(None, http_caller(request))
    return ok()


# -- CUDA shared memory ---------------------------------------------------------------------


def cuda(request: Request) -> CudaSharedMemory:
    k: KServeInference = request.app.state.kserve
    return k.cuda


@router.get("/cudasharedmemory/status")
def cuda_status(request: Request) -> list[dict[str, Any]]:
    return cuda(request).status()


@router.get("/cudasharedmemory/region/{name}/status")
def cuda_region_status(name: str, request: Request) -> list[dict[str, Any]]:
    return cuda(request).status(name)


@router.post("/cudasharedmemory/region/{name}/register",
             openapi_extra=bodies.body(bodies.CUDA_SHM_REGISTER))
async def cuda_register(name: str, request: Request) -> Response:
    regions = cuda(request)
    regions.check_enabled()
    body = await _json_object(request)
    for field in ("raw_handle", "device_id", "byte_size"):
        if field not in body:
            raise InvalidArgument(f"CUDA shared memory register request has no '{field}' field")
    regions.register(name, body["raw_handle"], body["device_id"], body["byte_size"])
    return ok()


@router.post("/cudasharedmemory/region/{name}/unregister")
def cuda_unregister(name: str, request: Request) -> Response:
    cuda(request).unregister(name)
    return ok()


@router.post("/cudasharedmemory/unregister")
def cuda_unregister_all(request: Request) -> Response:
    cuda(request).unregister()
    return ok()
