"""The uid behind an HTTP connection, from the kernel's socket tables.

A TCP connection between two processes of this host (same network namespace) appears twice in
``/proc/net/tcp`` (``tcp6`` for IPv6): once as the service's socket, once as the client's, and
the client's row carries the uid that created it. Looking up the row whose local end is the
client's address and whose remote end is ours gives the caller's uid without trusting anything
the client sent. A client on another host has no row here: its uid is unknown.
"""

from __future__ import annotations

import ipaddress
import sys
from typing import Any

from starlette.requests import Request

from fenceline.interop.owners import Caller

ESTABLISHED = "01"


def _hex_address(host: str, port: int) -> tuple[str, str] | None:
    """(table, "ADDR:PORT") the way the kernel prints this end of a connection."""
    try:
        ip = ipaddress.ip_address(host.split("%", 1)[0])
    except ValueError:
        return None
    raw = ip.packed
    # Each 32-bit word is printed as the CPU reads it (%08X of a network-order word).
    words = "".join(f"{int.from_bytes(raw[i:i + 4], sys.byteorder):08X}" for i in range(0, len(raw), 4))
    table = "/proc/net/tcp" if ip.version == 4 else "/proc/net/tcp6"
    return table, f"{words}:{port:04X}"


def connection_uid(client: Any, server: Any) -> int | None:
    """The uid owning the client end of the connection ``client`` -> ``server`` (ASGI's
    ``(host, port)`` pairs), or None when it is not a live socket of this host."""
    if not client or not server:
        return None
    ends = _hex_address(str(client[0]), int(client[1])), _hex_address(str(server[0]), int(server[1]))
    if ends[0] is None or ends[1] is None or ends[0][0] != ends[1][0]:
        return None
    (table, local), (_, remote) = ends[0], ends[1]
    try:
        with open(table) as f:
            next(f, None)
            for line in f:
                fields = line.split()
                # Rows of closing sockets (TIME_WAIT, inode 0) print uid 0: never take those.
                if (len(fields) > 9 and fields[1] == local and fields[2] == remote
                        and fields[3] == ESTABLISHED and fields[9] != "0"):
                    return int(fields[7])
    except OSError:
        return None
    return None


def http_caller(request: Request) -> Caller:
    """Who sent ``request``: with a bearer token configured (the middleware has checked it),
    someone acting for the service's user; otherwise the connection's uid, if it is local."""
    if request.app.state.token_required:
        return Caller(None, trusted=True, transport="HTTP")
    scope = request.scope
    return Caller(connection_uid(scope.get("client"), scope.get("server")), transport="HTTP")
