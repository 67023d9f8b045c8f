"""The runtime's bookkeeping: objects by unguessable id and owner, the views a session asks
for, and the limits every owner is held to (runtime/service.py enforces them)."""

from __future__ import annotations

import secrets
from dataclasses import dataclass, field
from typing import Generic, TypeVar

from fenceline.errors import InvalidArgument, NotFound

T = TypeVar("T")


@dataclass
class Entry(Generic[T]):
    id: str
    owner: str
    obj: T
    users: set[str] = field(default_factory=set)  # ids of sessions that use it
    user: str = ""  # who imported it (Caller.user): what the per-user bounds count


@dataclass(frozen=True)
class ViewSpec:
    memory: str
    offset_bytes: int
    datatype: str
    shape: list[int]


@dataclass(frozen=True)
class RuntimeSettings:
    default_timeout_ms: int = 10_000
    max_timeout_ms: int = 600_000
    spin_ns: int = 50_000  # how long a fence wait spins before it sleeps on the futex
    max_sessions_per_owner: int = 256
    max_imports_per_owner: int = 1024
    # The same over all clients of one user, and over every user: each import holds an fd,
    # and the service's fds must not run out (docs/reliability.md, "Fair shares").
    max_imports_per_user: int = 4096
    max_imports: int = 60_000
    max_stream_spin_ns: int = 1_000_000  # the most a streaming session may ask to spin per wait
    max_streaming_sessions_per_owner: int = 64  # each has a thread while it runs
    max_mapped_bytes_per_owner: int = 16 << 30
    max_inflight_runs_per_owner: int = 64
    max_sessions_per_device: int = 1024  # CUDA sessions per GPU, over every client
    # Users besides the service's own who may import objects they own by name (--allow-uid).
    allow_uids: frozenset[int] = frozenset()

    def __post_init__(self) -> None:
        for name in ("default_timeout_ms", "max_timeout_ms", "max_sessions_per_owner",
                     "max_imports_per_owner", "max_imports_per_user", "max_imports",
                     "max_mapped_bytes_per_owner",
                     "max_streaming_sessions_per_owner",
                     "max_inflight_runs_per_owner", "max_sessions_per_device"):
            if getattr(self, name) <= 0:
                raise InvalidArgument(f"{name} must be positive")
        if self.spin_ns < 0:
            raise InvalidArgument("spin_ns must not be negative")


class Table(Generic[T]):
    """Objects by unguessable id. An id of another owner is reported as not found."""

    def __init__(self, kind: str) -> None:
        self.kind = kind
        self.entries: dict[str, Entry[T]] = {}
        self._of_user: dict[str, int] = {}

    def add(self, owner: str, obj: T, id: str | None = None, user: str = "") -> Entry[T]:
        entry = Entry(id or secrets.token_hex(16), owner, obj, user=user)
        self.entries[entry.id] = entry
        self._of_user[user] = self._of_user.get(user, 0) + 1
        return entry

    def remove(self, id: str) -> Entry[T]:
        entry = self.entries.pop(id)
        left = self._of_user.pop(entry.user) - 1
        if left:
            self._of_user[entry.user] = left
        return entry

    def of_user(self, user: str) -> int:
        """How many objects ``user`` holds, over all its clients."""
        return self._of_user.get(user, 0)

    def get(self, owner: str, id: str) -> Entry[T]:
        entry = self.entries.get(id)
        if entry is None or entry.owner != owner:
            raise NotFound(f"no {self.kind} with id {id!r}")
        return entry

    def owned_by(self, owner: str) -> list[Entry[T]]:
        return [e for e in self.entries.values() if e.owner == owner]
