"""``fenceline trace``: asks a running service for its per-frame trace over HTTP
(``POST /v2/interop/trace``) and writes the Chrome trace-event JSON (docs/tracing.md). It sends
the service's ``--token-file`` when given one, else the control token the service keeps beside
its IPC socket (fenceline.ipc.control_token), which only the service's user can read."""

from __future__ import annotations

import json
import sys
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

from fenceline.errors import InvalidArgument, Unavailable
from fenceline.ipc.control_token import read_token, token_path
from fenceline.trace import Limits, summary_line


def fetch_trace(url: str, limits: Limits, token: str | None = None) -> dict[str, Any]:
    """The service's trace; Unavailable when nothing answers at ``url``, InvalidArgument with
    the service's own message when it refuses."""
    body = json.dumps({"seconds": limits.seconds, "frames": limits.frames}).encode()
    req = urllib.request.Request(f"{url.rstrip('/')}/v2/interop/trace", data=body, method="POST",
                                 headers={"Content-Type": "application/json"})
    if token:
        req.add_header("Authorization", f"Bearer {token}")
    try:
        with urllib.request.urlopen(req, timeout=limits.seconds + 30) as r:
            doc: dict[str, Any] = json.load(r)
            return doc
    except urllib.error.HTTPError as e:
        try:
            message = json.loads(e.read()).get("error", e.reason)
        except ValueError:
            message = e.reason
        raise InvalidArgument(f"the service at {url} answered {e.code}: {message}") from None
    except (urllib.error.URLError, OSError) as e:
        reason = getattr(e, "reason", e)
        raise Unavailable(f"no fenceline service answers at {url} ({reason}); start one with "
                          "`fenceline serve`, or give its address with --url") from None


def credential(token_file: Path | None, socket: Path | None) -> str | None:
    """The bearer token to send: ``token_file``'s, else the control token beside ``socket``
    (None: the default socket), else None (the service then says what it takes)."""
    if token_file is not None:
        try:
            return Path(token_file).read_text().strip()
        except OSError as e:
            raise InvalidArgument(f"cannot read --token-file {token_file}: {e}") from None
    if sys.platform == "win32":
        return None
    from fenceline.ipc.server import default_socket_path

    return read_token(token_path(socket or default_socket_path()))


def trace_from_args(args: Any) -> int:
    limits = Limits(args.seconds, args.frames)
    doc = fetch_trace(args.url, limits, credential(args.token_file, args.socket))
    args.out.write_text(json.dumps(doc))
    if args.png is not None:
        from fenceline.trace_picture import draw

        draw(doc, args.png, title=f"fenceline trace from {args.url}")
    other = doc.get("otherData", {})
    print(f"fenceline trace: {other.get('frames', 0)} frames, {other.get('moments', 0)} moments "
          f"over {other.get('duration_us', 0) / 1e6:.2f} s -> {args.out} (open it in "
          "ui.perfetto.dev or chrome://tracing)", file=sys.stderr)
    if other.get("frames") and "summary" in other:
        print(f"  {summary_line(other['summary'])}", file=sys.stderr)
    return 0
