"""The service's control token: a random secret the service writes beside its IPC socket, in a
file only the service's user may read (``<socket>.token``, mode 0600), and removes when it
stops. A client holding it may control the service over HTTP even without ``--token-file``:
``fenceline trace`` reads it by itself, so the service's own user traces every session while
another local user, who cannot read the file, cannot (docs/tracing.md, "Who may trace").
"""

from __future__ import annotations

import contextlib
import logging
import os
import secrets
import tempfile
from pathlib import Path

log = logging.getLogger("fenceline.ipc")

MAX_TOKEN_BYTES = 256  # the service writes 43 characters; a longer file is not one of ours


def token_path(socket: Path) -> Path:
    """Where the service with IPC socket ``socket`` keeps its control token."""
    return socket.with_name(socket.name + ".token")


def write_token(path: Path) -> str | None:
    """A fresh token in ``path``, readable by this user only (created 0600 under another name,
    then renamed over the path: never a moment where it is readable by others, nor a file
    another user placed there that we write into). None, logged, where it cannot be written."""
    token = secrets.token_urlsafe(32)
    try:
        fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}-")
        try:
            with os.fdopen(fd, "w") as f:
                f.write(token)
            os.replace(tmp, path)
        except BaseException:
            with contextlib.suppress(OSError):
                os.unlink(tmp)
            raise
    except OSError as e:
        log.warning("cannot write the control token %s (%s): traces over HTTP need "
                    "--token-file or --http-trace", path, e.strerror)
        return None
    return token


def read_token(path: Path) -> str | None:
    """The token in ``path``; None when it cannot be read (no such file, another user's)."""
    try:
        with path.open("rb") as f:
            data = f.read(MAX_TOKEN_BYTES + 1)
    except OSError:
        return None
    if len(data) > MAX_TOKEN_BYTES:
        return None
    return data.decode("ascii", "replace").strip() or None


def remove_token(path: Path, token: str) -> None:
    """Removes ``path`` if it still holds ``token`` (another service may have replaced it)."""
    if read_token(path) == token:
        with contextlib.suppress(OSError):
            path.unlink()
