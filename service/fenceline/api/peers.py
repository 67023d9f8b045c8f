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


def _ip(host: str) -> ipaddress.IPv4Address | ipaddress.IPv6Address | None:
    try:
        return ipaddress.ip_address(host.split("%", 1)[0])
    except ValueError:
        return None


def _hex(ip: ipaddress.IPv4Address | ipaddress.IPv6Address, port: int) -> str:
    """``ADDR:PORT`` as the kernel prints it: each 32-bit word of the address as the CPU reads
    it (%08X of a network-order word), then the port."""
    raw = ip.packed
    words = "".join(f"{int.from_bytes(raw[i:i + 4], sys.byteorder):08X}" for i in range(0, len(raw), 4))
    return f"{words}:{port:04X}"


def _lookups(client: Any, server: Any) -> list[tuple[str, str, str]]:
    """(table, client end, server end) to look for. A service listening on ``::`` sees IPv4
    clients as ``::ffff:a.b.c.d``; their sockets are in the IPv4 table unless they are IPv6
    sockets themselves, so both places are tried."""
    c, s = _ip(str(client[0])), _ip(str(server[0]))
    if c is None or s is None or c.version != s.version:
        return []
    cport, sport = int(client[1]), int(server[1])
    table = "/proc/net/tcp" if c.version == 4 else "/proc/net/tcp6"
    found = [(table, _hex(c, cport), _hex(s, sport))]
    c4 = getattr(c, "ipv4_mapped", None)
    s4 = getattr(s, "ipv4_mapped", None)
    if c4 is not None and s4 is not None:
        found.append(("/proc/net/tcp", _hex(c4, cport), _hex(s4, sport)))
    return found


def connection_uid(client: Any, server: Any) -> int | None:
    """The uid owning the client end of the connection ``client`` -> ``server`` (ASGI's
    ``(host, port)`` pairs), or None when it is not a live socket of this host."""
    if not client or not server:
        return None
    for table, local, remote in _lookups(client, server):
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
            continue
    return None


def http_caller(request: Request) -> Caller:
    """Who sent ``request``: with a bearer token configured (the middleware has checked it),
    someone acting for the service's user; otherwise the connection's uid, if it is local."""
    if request.app.state.token_required:
        return Caller(None, trusted=True, transport="HTTP")
    scope = request.scope
    if sys.platform == "win32":
        return Caller(None, transport="HTTP", sid=connection_sid(scope.get("client"), scope.get("server")))
    return Caller(connection_uid(scope.get("client"), scope.get("server")), transport="HTTP")


def connection_sid(client: Any, server: Any) -> str | None:
    """Windows: the user SID owning the client end (the TCP table with owner pids), or None."""
    if not client or not server:
        return None
    from fenceline import _native

    sid = getattr(_native, "tcp_client_sid")(str(client[0]), int(client[1]), int(server[1]))  # noqa: B009
    return None if sid is None else str(sid)
