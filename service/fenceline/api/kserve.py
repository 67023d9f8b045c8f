"""KServe v2 routes: health and model metadata."""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter, Request, Response

from fenceline import __version__
from fenceline.runtime.service import Runtime

router = APIRouter(prefix="/v2", tags=["kserve"])


def runtime(request: Request) -> Runtime:
    rt: Runtime = request.app.state.runtime
    return rt


@router.get("")
def server_metadata() -> dict[str, Any]:
    return {"name": "fenceline", "version": __version__, "extensions": ["interop"]}


@router.get("/health/live")
def live() -> Response:
    return Response(status_code=200)


@router.get("/health/ready")
def ready(request: Request) -> Response:
    return Response(status_code=200 if request.app.state.ready else 503)


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
