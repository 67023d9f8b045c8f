"""The HTTP API: control, runs and KServe v2 routes over the runtime (FastAPI)."""

from fenceline.api.app import create_app

__all__ = ["create_app"]
