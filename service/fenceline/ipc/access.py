"""File-system access to the IPC socket for the users on the allow-list.

Connecting to a Unix socket needs search (x) permission on every directory above it and write
permission on the socket file. The peer's uid (SO_PEERCRED) is what actually admits a client;
the modes only have to let the allowed users get that far.
"""

from __future__ import annotations

import contextlib
import errno
import os
import socket
import stat
from pathlib import Path

from fenceline.errors import InvalidArgument

PRIVATE_DIR, SHARED_DIR = 0o700, 0o711  # 0711: others may pass through, not list
PRIVATE_SOCKET, SHARED_SOCKET = 0o600, 0o666


def _groups(uid: int) -> set[int]:
    import pwd  # POSIX only; this module is not used on Windows (fenceline.ipc.pipe_server)

    try:
        pw = pwd.getpwuid(uid)
    except KeyError:
        return set()  # no account: only the "other" bits apply to it
    return {pw.pw_gid, *os.getgrouplist(pw.pw_name, pw.pw_gid)}


def _has_acl(path: Path) -> bool:
    with contextlib.suppress(OSError):
        os.getxattr(path, "system.posix_acl_access")
        return True
    return False


def can_search(uid: int, path: Path) -> bool:
    """Whether ``uid`` may pass through directory ``path`` by its mode bits."""
    if uid == 0:
        return True
    st = path.stat()
    if st.st_uid == uid:
        return bool(st.st_mode & stat.S_IXUSR)
    if st.st_gid in _groups(uid):
        return bool(st.st_mode & stat.S_IXGRP)
    return bool(st.st_mode & stat.S_IXOTH)


def prepare_directory(socket_path: Path, shared: bool) -> None:
    """Creates the socket's directory if missing: private, or passable when others connect."""
    parent = socket_path.parent
    if not parent.is_dir():
        parent.mkdir(parents=True, exist_ok=True)
        os.chmod(parent, SHARED_DIR if shared else PRIVATE_DIR)


def check_reachable(socket_path: Path, uids: frozenset[int]) -> None:
    """Raises unless every uid in ``uids`` can reach ``socket_path`` (a directory with an ACL is
    taken as passable: its mode bits do not tell)."""
    for uid in sorted(uids):
        for d in reversed(socket_path.absolute().parents):
            if not _has_acl(d) and not can_search(uid, d):
                raise InvalidArgument(
                    f"--allow-uid {uid}: that user cannot reach the IPC socket {socket_path}, "
                    f"since it may not enter {d} (mode {stat.S_IMODE(d.stat().st_mode):04o}). "
                    "Put the socket where it can, e.g. --socket /run/fenceline/fenceline.sock "
                    "(the service creates that directory with mode 0711)"
                )


def socket_error(socket_path: Path, err: OSError) -> str:
    """One line that says what is wrong with an IPC socket path and how to fix it."""
    parent = socket_path.parent
    fix = "choose another --socket (or FENCELINE_SOCKET)"
    if err.errno in (errno.EACCES, errno.EPERM):
        return f"IPC socket {socket_path}: no permission to create it in {parent}; {fix}"
    if err.errno == errno.EROFS:
        return f"IPC socket {socket_path}: {parent} is on a read-only file system; {fix}"
    if err.errno in (errno.EEXIST, errno.ENOTDIR):
        return f"IPC socket {socket_path}: a part of {parent} is not a directory; {fix}"
    if err.errno == errno.ENOENT and not parent.is_dir():
        return f"IPC socket {socket_path}: {parent} does not exist and cannot be created; {fix}"
    if err.errno == errno.ENOENT:  # e.g. /proc: a directory that cannot hold a socket
        return f"IPC socket {socket_path}: {parent} cannot hold a socket; {fix}"
    if err.errno == errno.ENAMETOOLONG or "too long" in str(err):
        return f"IPC socket {socket_path}: the path is too long for a Unix socket; {fix}"
    return f"IPC socket {socket_path}: {err.strerror or err}; {fix}"


def live_socket_error(socket_path: Path) -> str:
    return (f"another service is listening on {socket_path}; stop it or choose another "
            "--socket (or FENCELINE_SOCKET)")


def check_socket_path(socket_path: Path, others: frozenset[int]) -> None:
    """Raises :class:`InvalidArgument` with what is wrong when the service could not listen on
    ``socket_path`` (``others``: the allowed uids besides the service's own). The IPC server's
    start runs it first, and ``fenceline serve`` before it loads any model, so a bad --socket is
    refused at once with the same message.

    It does what the server's start does up to listening: creates the directory, checks that the
    allowed users can reach it, removes a stale socket (a live one is an error), and binds a
    socket there, which it closes and removes again at once."""
    try:
        prepare_directory(socket_path, shared=bool(others))
        check_reachable(socket_path, others)
        if socket_path.exists() or socket_path.is_symlink():
            with socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET) as probe:
                try:
                    probe.connect(str(socket_path))
                except OSError:
                    socket_path.unlink()  # a stale socket left by a service that died
                else:
                    raise InvalidArgument(live_socket_error(socket_path))
        old = os.umask(0o177)
        try:
            with socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET) as trial:
                trial.bind(str(socket_path))
            socket_path.unlink()
        finally:
            os.umask(old)
    except OSError as e:
        raise InvalidArgument(socket_error(socket_path, e)) from None
