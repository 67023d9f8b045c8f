"""``/docs`` and ``/redoc`` in a real headless Chromium: both pages render from assets the
service itself serves (no request leaves it, so they work offline), and the inference example
they show runs as shown."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from fenceline.models import build_repository
from tests.support.cdp import Browser, find_chromium
from tests.support.service import Service, start_service, stop_service

CHROMIUM = find_chromium()
needs_chromium = pytest.mark.skipif(
    CHROMIUM is None,
    reason="needs Chromium for the browser test (Debian: apt-get install chromium)",
)

REDOC_LOGO = "https://cdn.redoc.ly/redoc/logo-mini.svg"
# Every resource the page loaded or tried to, by URL.
RESOURCES = "performance.getEntriesByType('resource').map(e => e.name)"


@pytest.fixture(scope="module")
def docs_service(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Service]:
    repo = build_repository(tmp_path_factory.mktemp("docs-models"), ["add_dynamic"])
    svc = start_service(repo, tmp_path_factory.mktemp("docs-service"))
    yield svc
    stop_service(svc)


def only_from(svc: Service, urls: list[str]) -> None:
    assert urls, "the page loaded nothing"
    foreign = [u for u in urls if not u.startswith(svc.url)]
    assert not foreign, foreign


@needs_chromium
def test_swagger_ui_renders_offline(docs_service: Service, tmp_path: Path) -> None:
    assert CHROMIUM is not None
    with Browser(CHROMIUM, tmp_path / "profile") as browser:
        browser.goto(docs_service.url + "/docs")
        title = browser.wait_for("document.querySelector('.swagger-ui .info .title')?.textContent",
                                 timeout=120)
        assert "fenceline" in title
        # The KServe route is listed with its request body.
        browser.wait_for("[...document.querySelectorAll('.opblock-summary-path')]"
                         ".some(e => e.textContent.includes('/v2/models/{name}/infer'))")
        only_from(docs_service, browser.evaluate(RESOURCES))


@needs_chromium
def test_redoc_renders_offline(docs_service: Service, tmp_path: Path) -> None:
    assert CHROMIUM is not None
    with Browser(CHROMIUM, tmp_path / "profile") as browser:
        browser.goto(docs_service.url + "/redoc")
        heading = browser.wait_for("document.querySelector('.api-info h1')?.textContent",
                                   timeout=120)
        assert "fenceline" in heading
        # ReDoc always asks its vendor's CDN for a logo; the page's Content-Security-Policy
        # stops that request in the browser, and ReDoc then drops the image.
        csp = httpx.get(docs_service.url + "/redoc").headers["content-security-policy"]
        assert csp.startswith("default-src 'self'")
        browser.wait_for("document.querySelector('img[alt=\"redocly logo\"]') === null")
        only_from(docs_service, [u for u in browser.evaluate(RESOURCES) if u != REDOC_LOGO])


def test_documented_request_bodies_work_as_shown(docs_service: Service) -> None:
    spec: dict[str, Any] = httpx.get(docs_service.url + "/openapi.json").json()
    infer = spec["paths"]["/v2/models/{name}/infer"]["post"]["requestBody"]["content"]
    example = infer["application/json"]["example"]
    r = httpx.post(docs_service.url + "/v2/models/add_dynamic/infer", json=example)
    assert r.status_code == 200, r.text
    [out] = r.json()["outputs"]
    assert out["data"] == [v + 1 for v in example["inputs"][0]["data"]]
    register = spec["paths"]["/v2/systemsharedmemory/region/{name}/register"]["post"]
    assert set(register["requestBody"]["content"]["application/json"]["schema"]["required"]) == {
        "key", "byte_size"}
