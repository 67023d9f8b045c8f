"""``/docs`` and ``/redoc`` in a real headless Chromium: both pages render from assets the
service itself serves (no request leaves it, so they work offline), and the inference example
they show runs as shown."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from fenceline.models import build_repository
from tests.support.cdp import Browser, find_chromium
from tests.support.service import Service, running

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
    with running(repo, tmp_path_factory.mktemp("docs-service")) as svc:
        yield svc


SWAGGER_TITLE = "document.querySelector('.swagger-ui .info .title')?.textContent"
REDOC_TITLE = "document.querySelector('.api-info h1')?.textContent"


@contextlib.contextmanager
def opened(svc: Service, path: str, title: str, profile: Path) -> Iterator[Browser]:
    """A browser on the service's page ``path``, once the page shows the service's title (the
    JavaScript expression ``title``): the page rendered, from whatever it loaded."""
    assert CHROMIUM is not None
    with Browser(CHROMIUM, profile) as browser:
        browser.goto(svc.url + path)
        assert "fenceline" in browser.wait_for(title, timeout=120)
        yield browser


def only_from(svc: Service, urls: list[str]) -> None:
    assert urls, "the page loaded nothing"
    foreign = [u for u in urls if not u.startswith(svc.url)]
    assert not foreign, foreign


@needs_chromium
def test_swagger_ui_renders_offline(docs_service: Service, tmp_path: Path) -> None:
    with opened(docs_service, "/docs", SWAGGER_TITLE, tmp_path / "profile") as browser:
        # The KServe route is listed with its request body.
        browser.wait_for("[...document.querySelectorAll('.opblock-summary-path')]"
                         ".some(e => e.textContent.includes('/v2/models/{name}/infer'))")
        only_from(docs_service, browser.evaluate(RESOURCES))


@needs_chromium
def test_redoc_renders_offline(docs_service: Service, tmp_path: Path) -> None:
    with opened(docs_service, "/redoc", REDOC_TITLE, tmp_path / "profile") as browser:
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


@pytest.fixture(scope="module")
def token_service(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Service]:
    repo = build_repository(tmp_path_factory.mktemp("token-models"), ["add_dynamic"])
    work = tmp_path_factory.mktemp("token-service")
    (work / "token").write_text(TOKEN + "\n")
    with running(repo, work, "--token-file", str(work / "token")) as svc:
        yield svc


TOKEN = "docs-page-token"
CAPABILITIES = ("document.querySelector('.opblock-summary-path[data-path=\"/v2/interop/capabilities\"]')"
                ".closest('.opblock')")


def test_docs_pages_load_without_the_token_and_the_api_still_needs_it(token_service: Service) -> None:
    for page in ("/docs", "/redoc", "/openapi.json", "/docs/assets/swagger-ui-bundle.js"):
        assert httpx.get(token_service.url + page).status_code == 200, page
    for path in ("/v2/interop/capabilities", "/metrics", "/docs/assets/../metrics"):
        assert httpx.get(token_service.url + path).status_code in (401, 404), path
    assert httpx.get(token_service.url + "/v2/interop/capabilities").status_code == 401
    spec = httpx.get(token_service.url + "/openapi.json").json()
    assert spec["components"]["securitySchemes"]["bearer"] == {
        "type": "http", "scheme": "bearer", "description": "The contents of the service's --token-file."}
    assert spec["security"] == [{"bearer": []}]
    assert spec["paths"]["/v2/health/ready"]["get"]["security"] == []


@needs_chromium
def test_swagger_ui_try_it_out_sends_the_token_given_to_authorize(
    token_service: Service, tmp_path: Path
) -> None:
    """The page loads without the token; a call made from it is refused until the token is
    given to Authorize, then answers."""
    with opened(token_service, "/docs", SWAGGER_TITLE, tmp_path / "profile") as browser:
        assert browser.evaluate("document.querySelector('.btn.authorize') !== null")

        def execute(expected: str) -> None:
            block = CAPABILITIES
            browser.evaluate(f"void {block}.querySelector('.opblock-summary-control').click()")
            browser.wait_for(f"!!{block}.querySelector('.try-out__btn')")
            browser.evaluate(f"void (() => {{ const b = {block}.querySelector('.try-out__btn');"
                             " if (!b.classList.contains('cancel')) b.click(); })()")
            browser.wait_for(f"!!{block}.querySelector('.execute')")
            browser.evaluate(f"void {block}.querySelector('.execute').click()")
            browser.wait_for(f"[...{block}.querySelectorAll('.live-responses-table .response-col_status')]"
                             f".some(e => e.textContent.trim().startsWith('{expected}'))", timeout=30)
            browser.evaluate(f"void {block}.querySelector('.opblock-summary-control').click()")
            browser.wait_for(f"!{block}.querySelector('.execute')")

        execute("401")
        browser.evaluate(f"void ui.preauthorizeApiKey('bearer', '{TOKEN}')")
        execute("200")
