"""The admin status JSON (GET /v2/interop/status) and the page that polls it (GET /ui), against a
live service with renderers in their own processes."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import httpx
import pytest

from fenceline.api.status import fps
from fenceline.client import Fence, HttpClient
from tests.support.service import start_service, stop_service
from tests.support.waiting import wait_until

RENDERER = Path(__file__).parents[1] / "support" / "status_renderer.py"


@contextmanager
def renderer(socket: Path, *args: str) -> Iterator[tuple[subprocess.Popen[bytes], dict[str, str]]]:
    """A renderer process; yields it and its ids once its session exists."""
    with subprocess.Popen(
        [sys.executable, str(RENDERER), str(socket), *args],
        stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
    ) as proc:
        assert proc.stdin is not None and proc.stdout is not None and proc.stderr is not None
        try:
            line = proc.stdout.readline()
            if not line:
                raise AssertionError(f"renderer exited {proc.wait(10)}: {proc.stderr.read()!r}")
            yield proc, json.loads(line)
        finally:
            if proc.poll() is None:
                proc.stdin.close()  # the renderer lets go of its objects and exits
                try:
                    proc.wait(10)
                except subprocess.TimeoutExpired:
                    proc.kill()


def status(url: str) -> dict[str, Any]:
    r = httpx.get(url + "/v2/interop/status", timeout=5)
    assert r.status_code == 200, r.text
    return dict(r.json())


def session_row(doc: dict[str, Any], session_id: str) -> dict[str, Any] | None:
    return next((s for s in doc["sessions"] if s["id"] == session_id[:8]), None)


def test_status_lists_an_ipc_session_with_its_fences_and_recent_runs(service: Any) -> None:
    with renderer(service.socket, "--frames", "20", "--fps", "200") as (proc, ids):
        def finished() -> dict[str, Any] | None:
            row = session_row(status(service.url), ids["session"])
            return row if row and row["runs"] == 20 else None

        row = wait_until(finished, what="the session's 20 runs in the status")
        doc = status(service.url)
        assert row["owner"].startswith("ipc:")
        assert row["model"] == "add_64x64"
        assert row["signal_fence"] == {"id": ids["signal_fence"][:8], "value": 20}
        assert row["wait_fence"] == {"id": ids["wait_fence"][:8], "value": 20}
        assert row["last_signal_value"] == 20
        assert len(row["recent_us"]["total"]) == 20
        assert all(t > 0 for t in row["recent_us"]["total"])
        assert row["latency_us"]["p50"] <= row["latency_us"]["p99"]
        fences = {f["id"]: f for f in doc["fences"]}
        assert fences[ids["signal_fence"][:8]]["value"] == 20
        assert fences[ids["signal_fence"][:8]]["status"] == "live"
        assert any(m["owner"] == row["owner"] and m["handle_type"] == "host_fd"
                   and m["size_bytes"] == 2 * 3 * 64 * 64 * 4 for m in doc["memory"])  # fmt: skip
        assert doc["server"]["ipc_connections"] >= 1
        model = next(m for m in doc["models"] if m["name"] == "add_64x64")
        assert model["sessions"] >= 1


def test_status_shows_session_ids_only_truncated(service: Any) -> None:
    with renderer(service.socket, "--frames", "1") as (proc, ids):
        text = httpx.get(service.url + "/v2/interop/status", timeout=5).text
        assert ids["session"][:8] in text
        for full in ids.values():
            assert full not in text


def test_status_reports_fps_of_a_running_renderer_and_zero_once_it_stops(service: Any) -> None:
    with renderer(service.socket, "--fps", "50", "--seconds", "20", "--frames", "75") as (
        proc, ids,
    ):
        row = wait_until(lambda: (r := session_row(status(service.url), ids["session"]))
                         and r["runs"] >= 30 and r, what="30 runs")  # fmt: skip
        assert 10 <= row["fps"] <= 100, row["fps"]
        wait_until(lambda: (r := session_row(status(service.url), ids["session"]))
                   and r["runs"] == 75, what="75 runs")  # fmt: skip
        time.sleep(1.1)
        assert session_row(status(service.url), ids["session"])["fps"] == 0  # type: ignore[index]


def test_status_drops_the_objects_of_a_renderer_that_died(service: Any) -> None:
    with renderer(service.socket, "--frames", "3") as (proc, ids):
        wait_until(lambda: session_row(status(service.url), ids["session"]), what="the session listed")
        proc.kill()
        proc.wait()
        wait_until(lambda: session_row(status(service.url), ids["session"]) is None,
                   what="the killed renderer's session gone")
        doc = status(service.url)
        assert ids["signal_fence"][:8] not in {f["id"] for f in doc["fences"]}


def test_status_includes_objects_created_over_http(service: Any) -> None:
    with Fence(named=True) as fence, HttpClient(service.url) as http:
        fence.signal(7)
        assert fence.name is not None
        fid = http.import_fence(fence.name)
        try:
            row = next(f for f in status(service.url)["fences"] if f["id"] == fid[:8])
            assert row == {
                "id": fid[:8], "owner": "http", "fence_type": "host_timeline",
                "name": fence.name, "value": 7, "status": "live", "sessions": 0,
            }  # fmt: skip
            fence.signal(9)
            row = next(f for f in status(service.url)["fences"] if f["id"] == fid[:8])
            assert row["value"] == 9
        finally:
            http.release_fence(fid)


def test_ui_serves_the_status_page_without_a_build_step(service: Any) -> None:
    r = httpx.get(service.url + "/ui", timeout=5)
    assert r.status_code == 200
    assert r.headers["content-type"].startswith("text/html")
    assert "v2/interop/status" in r.text
    assert "<script src" not in r.text  # one file: nothing else to fetch or build


@pytest.mark.parametrize("path", ["/ui/missing.js", "/v2/interop/status/x"])
def test_unknown_status_paths_answer_the_json_error_body(service: Any, path: str) -> None:
    r = httpx.get(service.url + path, timeout=5)
    assert r.status_code == 404
    assert r.json()["code"] == "not_found"


def test_status_needs_the_token_but_the_page_does_not(model_repo: Path, tmp_path: Path) -> None:
    token_file = tmp_path / "token"
    token_file.write_text("t0ken")
    svc = start_service(model_repo, tmp_path, "--token-file", str(token_file))
    try:
        assert httpx.get(svc.url + "/ui", timeout=5).status_code == 200
        r = httpx.get(svc.url + "/v2/interop/status", timeout=5)
        assert r.status_code == 401 and r.json()["code"] == "unauthenticated"
        r = httpx.get(svc.url + "/v2/interop/status", headers={"Authorization": "Bearer t0ken"},
                      timeout=5)  # fmt: skip
        assert r.status_code == 200 and r.json()["sessions"] == []
    finally:
        stop_service(svc)


@pytest.mark.parametrize(
    "ends,capacity,expected",
    [
        ([], 128, 0.0),
        ([0, 100_000_000, 200_000_000], 128, 3.0),  # fewer than the ring: count the last second
        ([-2_000_000_000, 0], 128, 1.0),  # one run more than a second ago no longer counts
        ([i * 1_000_000 for i in range(4)], 4, 1000.0),  # a full ring: the rate over its span
    ],
)
def test_fps_counts_the_last_second_or_the_span_of_a_full_ring(
    ends: list[int], capacity: int, expected: float
) -> None:
    assert fps(ends, max(ends, default=0), capacity) == pytest.approx(expected)
