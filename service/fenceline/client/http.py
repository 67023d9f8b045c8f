"""The HTTP client for the control and run API (named shared memory only: HTTP carries no fds).
``close()`` is safe twice."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import httpx

from fenceline.client.errors import ClientError, ServiceError, UsageError
from fenceline.client.session import Session
from fenceline.client.views import View, session_body, timeout_ms_of


def default_url() -> str:
    """$FENCELINE_URL, else the address ``fenceline serve`` takes from the same environment:
    $FENCELINE_HOST (a wildcard bind address means this host) and $FENCELINE_PORT."""
    url = os.environ.get("FENCELINE_URL")
    if url:
        return url
    host = os.environ.get("FENCELINE_HOST") or "127.0.0.1"
    host = {"0.0.0.0": "127.0.0.1", "::": "::1", "[::]": "::1"}.get(host, host)
    if ":" in host and not host.startswith("["):
        host = f"[{host}]"
    return f"http://{host}:{os.environ.get('FENCELINE_PORT') or '8000'}"


def default_token() -> str | None:
    """The token of $FENCELINE_TOKEN_FILE, the file ``fenceline serve --token-file`` reads."""
    path = os.environ.get("FENCELINE_TOKEN_FILE")
    if not path:
        return None
    try:
        token = Path(path).read_text().strip()
    except OSError as e:
        raise UsageError(f"FENCELINE_TOKEN_FILE={path}: {e.strerror}") from None
    if not token:
        raise UsageError(f"FENCELINE_TOKEN_FILE={path} is empty")
    return token


class HttpClient:
    def __init__(self, url: str | None = None, *, timeout_s: float = 30.0,
                 token: str | None = None) -> None:
        """``url`` None: :func:`default_url`. ``token`` (sent as ``Authorization: Bearer``) None:
        the contents of $FENCELINE_TOKEN_FILE, if set; a service without --token-file ignores
        it."""
        self.url = (url or default_url()).rstrip("/")
        token = token if token is not None else default_token()
        headers = {"Authorization": f"Bearer {token}"} if token else None
        self._http = httpx.Client(base_url=self.url, timeout=timeout_s, headers=headers)
        self._closed = False

    @property
    def closed(self) -> bool:
        return self._closed

    def _request(self, method: str, path: str, body: dict[str, Any] | None = None) -> Any:
        if self._closed:
            raise UsageError("the client is closed")
        try:
            r = self._http.request(method, path, json=body)
        except httpx.HTTPError as e:
            raise ClientError(f"cannot reach {self.url}: {e}") from None
        if r.status_code >= 400:
            try:
                info = r.json()
            except ValueError:
                info = {"error": r.text, "code": "http_error"}
            details = {k: v for k, v in info.items() if k not in ("error", "code")}
            raise ServiceError(
                str(info.get("error")), str(info.get("code")), r.status_code, details
            )
        return r.json() if r.content else None

    def capabilities(self) -> dict[str, Any]:
        return dict(self._request("GET", "/v2/interop/capabilities"))

    def ready(self) -> bool:
        try:
            return self._http.get("/v2/health/ready").status_code == 200
        except httpx.HTTPError:
            return False

    def import_memory(
        self, name: str, *, size_bytes: int = 0, offset_bytes: int = 0, access: str = "read_write"
    ) -> str:
        body = {
            "handle_type": "host_shm", "name": name, "size_bytes": size_bytes,
            "offset_bytes": offset_bytes, "access": access,
        }
        return str(self._request("POST", "/v2/interop/memory", body)["id"])

    def import_fence(self, name: str) -> str:
        body = {"fence_type": "host_timeline", "name": name}
        return str(self._request("POST", "/v2/interop/fences", body)["id"])

    def create_session(
        self, model: str, inputs: dict[str, View], outputs: dict[str, View], wait_fence: str,
        signal_fence: str, *, mode: str = "request", policy: str = "latest",
        spin_us: int | None = None, start: bool = True,
    ) -> dict[str, Any]:
        """A session; with ``mode="streaming"`` the service runs each new value of
        ``wait_fence`` by itself and signals ``signal_fence`` with it (docs/streaming.md)."""
        body = session_body(model, inputs, outputs, wait_fence, signal_fence, mode=mode,
                            policy=policy, spin_us=spin_us, start=start)
        return dict(self._request("POST", "/v2/interop/sessions", body))

    def session(
        self, model: str, inputs: dict[str, View], outputs: dict[str, View], wait_fence: str,
        signal_fence: str, **options: Any,
    ) -> Session:
        """:meth:`create_session` as a :class:`~fenceline.client.Session` object."""
        return Session(self, self.create_session(model, inputs, outputs, wait_fence, signal_fence,
                                                 **options))

    def model_metadata(self, name: str, version: str | None = None) -> dict[str, Any]:
        """The model's KServe metadata (``GET /v2/models/{name}``)."""
        path = f"/v2/models/{name}" + (f"/versions/{version}" if version else "")
        return dict(self._request("GET", path))

    def run(
        self, session_id: str, wait_value: int, signal_value: int | None = None,
        timeout_ms: int | None = None, *, timeout_s: float | None = None,
    ) -> dict[str, Any]:
        """``timeout_s``: the longest fence wait (``timeout_ms``, the older spelling)."""
        timeout_ms = timeout_ms_of(timeout_s, timeout_ms)
        body: dict[str, Any] = {"wait_value": wait_value}
        if signal_value is not None:
            body["signal_value"] = signal_value
        if timeout_ms is not None:
            body["timeout_ms"] = timeout_ms
        return dict(self._request("POST", f"/v2/interop/sessions/{session_id}/run", body))

    def describe(self, kind: str, id: str) -> dict[str, Any]:
        path = {"memory": "memory", "fence": "fences", "session": "sessions"}[kind]
        return dict(self._request("GET", f"/v2/interop/{path}/{id}"))

    def start_session(self, id: str) -> dict[str, Any]:
        """Starts or resumes a streaming session; returns its description."""
        return dict(self._request("POST", f"/v2/interop/sessions/{id}/start"))

    def pause_session(self, id: str) -> dict[str, Any]:
        """Returns once the service has signalled the frame in flight and stopped waiting."""
        return dict(self._request("POST", f"/v2/interop/sessions/{id}/pause"))

    def stop_session(self, id: str) -> dict[str, Any]:
        """Stops and releases a streaming session; returns its final description."""
        return dict(self._request("POST", f"/v2/interop/sessions/{id}/stop"))

    def release_memory(self, id: str) -> None:
        self._request("DELETE", f"/v2/interop/memory/{id}")

    def release_fence(self, id: str) -> None:
        self._request("DELETE", f"/v2/interop/fences/{id}")

    def release_session(self, id: str) -> None:
        self._request("DELETE", f"/v2/interop/sessions/{id}")

    def close(self) -> None:
        """Safe twice. Objects created over HTTP stay on the service until released."""
        self._closed = True
        self._http.close()

    def __enter__(self) -> HttpClient:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
