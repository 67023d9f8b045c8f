"""``/docs`` (Swagger UI) and ``/redoc`` served offline: their scripts and styles come from the
``fastapi-offline`` package, installed with fenceline, never from a CDN, so the pages work on a
machine with no network (a render node, a plane)."""

from __future__ import annotations

from importlib.resources import files
from pathlib import Path
from typing import Any

from fastapi import FastAPI
from fastapi.openapi.docs import get_redoc_html, get_swagger_ui_html
from fastapi.responses import HTMLResponse
from starlette.staticfiles import StaticFiles

from fenceline.api.security import OPEN_PATHS

ASSETS = "/docs/assets"
# Both pages may load only from the service: ReDoc would otherwise fetch its logo from its
# vendor's CDN, which on an offline machine is a hang or an error in the console.
OFFLINE_ONLY = {"Content-Security-Policy": "default-src 'self' 'unsafe-inline' blob: data:"}


def assets_dir() -> Path:
    """The folder of swagger-ui-bundle.js, swagger-ui.css, redoc.standalone.js, favicon.png."""
    return Path(str(files("fastapi_offline") / "static"))


def install(app: FastAPI, *, token_required: bool = False) -> None:
    """Adds the two pages and their assets; ``app`` must be created with ``docs_url=None`` and
    ``redoc_url=None`` (FastAPI's own pages load from a CDN). With ``token_required`` the pages
    still load without the token (fenceline.api.security), and the OpenAPI document declares the
    bearer scheme, so Swagger UI's Authorize button takes the token and "Try it out" sends it."""
    app.mount(ASSETS, StaticFiles(directory=assets_dir()), name="docs-assets")
    openapi_url = app.openapi_url or "/openapi.json"
    if token_required:
        _declare_bearer(app)

    title = f"{app.title} - API"
    favicon = f"{ASSETS}/favicon.png"

    @app.get("/docs", include_in_schema=False)
    def swagger_ui() -> HTMLResponse:
        return _offline(get_swagger_ui_html(
            openapi_url=openapi_url, title=title, swagger_favicon_url=favicon,
            swagger_js_url=f"{ASSETS}/swagger-ui-bundle.js",
            swagger_css_url=f"{ASSETS}/swagger-ui.css",
        ))

    @app.get("/redoc", include_in_schema=False)
    def redoc() -> HTMLResponse:
        return _offline(get_redoc_html(
            openapi_url=openapi_url, title=title, redoc_favicon_url=favicon,
            redoc_js_url=f"{ASSETS}/redoc.standalone.js", with_google_fonts=False,
        ))


BEARER = "bearer"


def _declare_bearer(app: FastAPI) -> None:
    plain = app.openapi

    def openapi() -> dict[str, Any]:
        if app.openapi_schema is None:
            schema = plain()
            schema.setdefault("components", {}).setdefault("securitySchemes", {})[BEARER] = {
                "type": "http", "scheme": "bearer",
                "description": "The contents of the service's --token-file.",
            }
            schema["security"] = [{BEARER: []}]
            for path in OPEN_PATHS:
                for operation in schema["paths"].get(path, {}).values():
                    operation["security"] = []  # the probes answer without it
            app.openapi_schema = schema
        return app.openapi_schema

    app.openapi = openapi  # type: ignore[method-assign]


def _offline(page: HTMLResponse) -> HTMLResponse:
    page.headers.update(OFFLINE_ONLY)
    return page
