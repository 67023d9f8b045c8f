"""Structured logs: ``fenceline serve --log-format json|text``, with request and session ids."""

from __future__ import annotations

import json
import logging
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import httpx
import pytest

from fenceline import logs
from fenceline.client import IpcClient
from tests.support.helpers import open_session
from tests.support.service import start_service, stop_service
from tests.support.waiting import wait_until


def records(text: str) -> list[dict[str, Any]]:
    return [json.loads(line) for line in text.splitlines()]


def test_json_logs_carry_request_and_session_ids(model_repo: Path, tmp_path: Path) -> None:
    svc = start_service(model_repo, tmp_path, "--log-format", "json", "--log-level", "debug")
    try:
        with IpcClient(svc.socket, name="log-test") as client:
            s = open_session(client, "add_64x64", [1, 3, 64, 64])
            s.wait.signal(1)
            client.run(s.session_id, 1)
            r = httpx.get(f"{svc.url}/v2/interop/sessions/{s.session_id}",
                          headers={"X-Request-ID": "trace-42"}, timeout=5)  # fmt: skip
            assert r.status_code == 404  # an IPC session is not HTTP's
            assert r.headers["x-request-id"] == "trace-42"
            client.release_session(s.session_id)
            s.close()
    finally:
        stop_service(svc)
    lines = records(svc.log_text())  # every line parses
    assert all({"ts", "level", "logger", "message"} <= set(line) for line in lines)
    short = s.session_id[:8]

    http = [line for line in lines if line.get("request_id") == "trace-42"]
    assert len(http) == 1
    assert http[0]["path"] == f"/v2/interop/sessions/{short}…"
    assert http[0]["status"] == 404 and http[0]["session_id"] == short

    created = next(line for line in lines if line["message"].startswith("session created"))
    assert created["session_id"] == short
    assert created["owner"].startswith("ipc:")
    assert created["request_id"].isdigit()  # the IPC frame that asked for it
    released = next(line for line in lines if line["message"] == "session released")
    assert released["session_id"] == short and released["owner"] == created["owner"]
    hello = next(line for line in lines if "hello from log-test" in line["message"])
    assert hello["owner"] == created["owner"]
    assert s.session_id not in svc.log_text()  # logs carry the prefix only


def test_text_logs_append_the_ids_to_the_line(service: Any) -> None:
    with IpcClient(service.socket) as client:
        s = open_session(client, "add_64x64", [1, 3, 64, 64])
        s.close()
    marker = f"session_id={s.session_id[:8]}"
    wait_until(lambda: marker in service.log_text(), what=service.log_text)
    line = next(ln for ln in service.log_text().splitlines() if marker in ln)
    assert " INFO fenceline.runtime: session created for model add_64x64 [" in line
    assert re.search(r"\bowner=ipc:\d+\b", line), line
    with pytest.raises(json.JSONDecodeError):
        json.loads(line)


def test_http_request_ids_that_are_not_tokens_are_replaced(service: Any) -> None:
    for bad in ("x" * 65, "a b", "<script>"):
        r = httpx.get(service.url + "/v2/health/live", headers={"X-Request-ID": bad}, timeout=5)
        rid = r.headers["x-request-id"]
        assert rid != bad and len(rid) == 16 and int(rid, 16) >= 0


@pytest.mark.parametrize("flag,value", [("--log-format", "xml"), ("--log-level", "loud")])
def test_serve_rejects_unknown_log_settings_with_the_choices(flag: str, value: str) -> None:
    r = subprocess.run([sys.executable, "-m", "fenceline", "serve", flag, value],
                       capture_output=True, text=True, timeout=60)  # fmt: skip
    assert r.returncode == 2
    assert f"{flag}: invalid choice: '{value}'" in r.stderr
    assert "Traceback" not in r.stderr


def _record(**extra: Any) -> logging.LogRecord:
    record = logging.LogRecord(
        "fenceline.test", logging.ERROR, __file__, 1, "failed %s", ("x",), None
    )
    for k, v in extra.items():
        setattr(record, k, v)
    return record


def test_json_formatter_writes_one_object_with_extras_and_the_exception() -> None:
    try:
        raise ValueError("boom")
    except ValueError:
        record = _record(exc_info=sys.exc_info(), owner="ipc:3", path=Path("/x"))
    out = logs.JsonFormatter().format(record)
    assert "\n" not in out
    doc = json.loads(out)
    assert doc["message"] == "failed x" and doc["level"] == "error"
    assert doc["owner"] == "ipc:3" and doc["path"] == "/x"
    assert doc["exc"].startswith("Traceback") and "ValueError: boom" in doc["exc"]
    assert doc["ts"].endswith("Z")


def test_context_ids_fill_in_where_extra_gave_none() -> None:
    token = logs.request_id.set("r-1")
    try:
        record = _record(session_id="abcd1234")
        logs.ContextFilter().filter(record)
    finally:
        logs.request_id.reset(token)
    doc = json.loads(logs.JsonFormatter().format(record))
    assert doc["request_id"] == "r-1" and doc["session_id"] == "abcd1234"
    assert "owner" not in doc
