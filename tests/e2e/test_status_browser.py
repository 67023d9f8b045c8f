"""The status page end to end: a real headless Chromium on /ui of a live service, with a
renderer process streaming frames over IPC. The screenshot is kept as a test artifact (its path
is printed; set FENCELINE_TEST_ARTIFACTS=DIR to also copy it there)."""

from __future__ import annotations

import os
import shutil
from pathlib import Path
from typing import Any

import pytest

from tests.integration.test_status import renderer
from tests.support.cdp import Browser, find_chromium
from tests.support.service import start_service, stop_service

CHROMIUM = find_chromium()
pytestmark = pytest.mark.skipif(
    CHROMIUM is None,
    reason="needs Chromium for the browser test (Debian: apt-get install chromium)",
)


def keep(path: Path) -> None:
    print(f"status page screenshot: {path}")
    target = os.environ.get("FENCELINE_TEST_ARTIFACTS")
    if target:
        Path(target).mkdir(parents=True, exist_ok=True)
        shutil.copy(path, Path(target) / path.name)


def row_js(sid: str, expression: str) -> str:
    return f"(() => {{ const row = document.querySelector('tr[data-session=\"{sid}\"]'); " \
           f"return row ? {expression} : null; }})()"


def fence_value(browser: Browser, sid: str) -> int | None:
    text = browser.evaluate(row_js(
        sid, "row.querySelector('[data-field=signal_fence_value]').textContent"))
    return int(text) if text else None


def test_status_page_shows_a_live_session_and_its_fence_advancing(
    model_repo: Path, tmp_path: Path
) -> None:
    assert CHROMIUM is not None
    (tmp_path / "svc").mkdir()
    svc = start_service(model_repo, tmp_path / "svc")
    try:
        with (
            renderer(svc.socket, "--fps", "30", "--seconds", "60") as (proc, ids),
            Browser(CHROMIUM, tmp_path / "profile") as browser,
        ):
            sid = ids["session"][:8]
            browser.goto(svc.url + "/ui?interval=250")
            browser.wait_for(row_js(sid, "true"))
            assert browser.evaluate("document.body.dataset.state") == "live"
            cells: Any = browser.evaluate(row_js(sid, "({model: row.querySelector("
                "'[data-field=model]').textContent, owner: row.cells[1].textContent})"))
            assert cells["model"] == "add_64x64"
            assert cells["owner"].startswith("ipc:")

            first = fence_value(browser, sid)
            assert first is not None and first > 0
            # The page redraws by itself: the output fence it shows keeps advancing.
            browser.wait_for(row_js(sid, "Number(row.querySelector("
                f"'[data-field=signal_fence_value]').textContent) > {first}"))
            browser.wait_for(row_js(sid, "Number(row.querySelector("
                "'[data-field=fps]').textContent) > 0"))
            points = browser.wait_for(row_js(sid, "(row.querySelector('polyline')?.getAttribute("
                "'points') || '').split(' ').length >= 10 && row.querySelector('polyline')"
                ".getAttribute('points').split(' ').length"))
            assert points >= 10
            assert browser.evaluate("document.getElementById('c-sessions').textContent") == "1"

            shot = browser.screenshot(tmp_path / "status-page.png")
            assert shot.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
            keep(shot)

            proc.kill()  # a renderer that dies: the service releases its session
            browser.wait_for(f"document.querySelector('tr[data-session=\"{sid}\"]') === null"
                             " && document.querySelector('#sessions tr.empty') !== null")

            stop_service(svc)
            browser.wait_for("document.body.dataset.state === 'error'")
            assert "Cannot reach the service" in browser.evaluate(
                "document.getElementById('error').textContent")
            keep(browser.screenshot(tmp_path / "status-page-unreachable.png"))
    finally:
        stop_service(svc)
    assert "Traceback" not in svc.log_text(), svc.log_text()


def test_status_page_asks_for_the_token_of_a_protected_service(
    model_repo: Path, tmp_path: Path
) -> None:
    assert CHROMIUM is not None
    (tmp_path / "svc").mkdir()
    token_file = tmp_path / "token"
    token_file.write_text("s3cret-token\n")
    svc = start_service(model_repo, tmp_path / "svc", "--token-file", str(token_file))
    try:
        with Browser(CHROMIUM, tmp_path / "profile") as browser:
            browser.goto(svc.url + "/ui?interval=200")
            browser.wait_for("document.body.dataset.state === 'unauthenticated'")
            assert browser.evaluate("document.body.dataset.updates") == "0"
            keep(browser.screenshot(tmp_path / "status-page-token.png"))
            browser.evaluate("document.getElementById('token').value = 's3cret-token'; "
                             "document.getElementById('auth').requestSubmit(); true")
            browser.wait_for("document.body.dataset.state === 'live'")
            assert browser.evaluate("document.getElementById('c-models').textContent") == "4"

            browser.evaluate("sessionStorage.clear(); true")  # a link with the token works too
            browser.goto("about:blank")
            browser.wait_for("location.href === 'about:blank'")
            browser.goto(svc.url + "/ui?interval=200#token=s3cret-token")
            browser.wait_for("document.body.dataset.state === 'live'")
            assert "token" not in browser.evaluate("location.href")
    finally:
        stop_service(svc)
