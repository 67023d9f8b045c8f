"""Who may import a host object by name.

The service opens ``/dev/shm`` names with its own rights, which may be wider than the caller's
(another user's 0600 frame, or anything when the service runs as root). Importing by name is
therefore allowed only when the kernel says the caller could have opened the object itself:
the caller runs as the service's user (or root), or the caller is on the allow-list
(``--allow-uid``) and owns the object (``st_uid`` of the object actually mapped, read with
``fstat`` after opening, so a name swapped in between does not fool the check). A memory or
fence fd passed over the IPC socket needs no check: the sender already held it.

On Windows the caller is known by its user SID (the named pipe's client token); only the
service's own user imports by name there, since objects in ``Local\\`` are that user's anyway.
"""

from __future__ import annotations

import functools
import os
import sys
from dataclasses import dataclass

from fenceline.errors import PermissionDenied


@dataclass(frozen=True)
class Caller:
    """The party asking for an import, as the kernel knows it.

    ``uid`` is None when nobody can tell (an HTTP client on another host or in another network
    namespace). ``trusted`` callers act for the service's own user: code inside the service,
    or an HTTP client that sent the service's bearer token.
    """

    uid: int | None
    trusted: bool = False
    transport: str = "ipc"
    sid: str | None = None  # Windows: the caller's user SID

    @property
    def user(self) -> str:
        """The user the per-user bounds count this caller as: "uid 1000", "user S-1-5-..." on
        Windows, or "an unknown user" (one bound for every caller nobody can tell)."""
        if self.sid is not None:
            return f"user {self.sid}"
        return "an unknown user" if self.uid is None else f"uid {self.uid}"

    @property
    def same_user(self) -> bool:
        """Whether the caller could open anything the service can (its user, root, or trusted)."""
        if self.trusted:
            return True
        if sys.platform == "win32":
            return self.sid is not None and self.sid == service_sid()
        return self.uid in (0, os.geteuid())

    def may_import(self, object_uid: int, allow_uids: frozenset[int]) -> bool:
        if self.same_user:
            return True  # it could open the object itself
        if self.uid is None:
            return False
        return self.uid in allow_uids and self.uid == object_uid


    def may_use_objects_of(self, other: Caller) -> bool:
        """Whether this caller may use what ``other`` registered under a shared name (Triton's
        shm regions): its own, or anything when it acts for the service."""
        if self.same_user:
            return True
        return not other.trusted and self.uid is not None and self.uid == other.uid


SERVICE = Caller(None, trusted=True, transport="service")


@functools.cache
def service_sid() -> str:
    """Windows: the service process's user SID."""
    from fenceline import _native

    return str(getattr(_native, "current_user_sid")())  # noqa: B009 (absent from the Linux stub)


def check_import(caller: Caller, fd: int, what: str, name: str, allow_uids: frozenset[int]) -> None:
    """Raises PermissionDenied unless ``caller`` may import the object open on ``fd``."""
    if caller.same_user:
        return
    if sys.platform == "win32":
        raise PermissionDenied(
            f"importing {what} {name!r} by name over {caller.transport} on Windows is for the "
            "service's own user: run the renderer as that user, or set a bearer token with "
            "fenceline serve --token-file"
        )
    object_uid = os.fstat(fd).st_uid
    if caller.may_import(object_uid, allow_uids):
        return
    if caller.uid is None:
        raise PermissionDenied(
            f"importing {what} {name!r} by name over {caller.transport} needs to know who asks: "
            "connect from this host (the service reads the connection's owner from the kernel), "
            "or set a bearer token with fenceline serve --token-file"
        )
    if caller.uid not in allow_uids:
        raise PermissionDenied(
            f"uid {caller.uid} may not import {what} {name!r}: only the service's own user and "
            "the uids given with --allow-uid import objects by name"
        )
    raise PermissionDenied(
        f"uid {caller.uid} may not import {what} {name!r}: it belongs to uid {object_uid}; "
        "import objects your own user created, or pass an fd over the IPC socket"
    )
