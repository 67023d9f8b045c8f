"""The bounds one IPC peer cannot get past (docs/reliability.md, "Connections"). Kept free of
heavy imports: the settings (fenceline.config) take their defaults from here."""

from __future__ import annotations

from dataclasses import dataclass

DEFAULT_MAX_CONNECTIONS = 256
DEFAULT_MAX_CONNECTIONS_PER_USER = 128
DEFAULT_SEND_TIMEOUT_S = 5.0

# How the Unix socket's accept loop answers the connections it refuses (_native.Acceptor): each
# is answered and drained for at most REFUSAL_GRACE_S; one user's answers come REFUSAL_BURST at
# once, then at most REFUSALS_PER_S a second, at most REFUSAL_BURST of its connections waiting
# for their turn; at most MAX_HELD_REFUSALS held at once, answering and waiting. One past a
# bound is closed unanswered.
REFUSAL_GRACE_S = 1.0
MAX_HELD_REFUSALS = 1024
REFUSAL_BURST = 64
REFUSALS_PER_S = 250.0
# A connection of an allowed user has its HELLO answered by the accept loop too, paced in the
# same bucket as that user's refusals; it goes to Python with its next frame, or after GREET_S
# without one (docs/reliability.md, "Cheap churn").
GREET_S = 1.0
# The soft limit on open fds the service raises itself to (POSIX), at most its hard limit.
FD_LIMIT = 65536
# The fds kept from imports, beside the connections' (a socket and a pidfd each) and the held
# refusals': HTTP connections, model files, the threads' own (docs/reliability.md, "Fair shares").
FD_RESERVE = 512


def import_bound(fd_limit: int, max_connections: int) -> int:
    """The most imports the service holds over every client (each holds an fd): its soft fd
    limit less what connections, held refusals and FD_RESERVE may need, but never less than
    half the limit (a limit too low for the reserve); 0 where fds have no such limit
    (Windows: ``fd_limit`` 0)."""
    if fd_limit <= 0:
        return 0
    reserve = 2 * max_connections + MAX_HELD_REFUSALS + FD_RESERVE
    return max(fd_limit - reserve, fd_limit // 2)


def raise_fd_limit() -> tuple[int, int]:
    """Raises this process's soft limit on open fds towards ``FD_LIMIT`` (never past its hard
    limit, never down): the connections the limits admit, the refusals held and the fds each
    connection's imports hold need more than the 1,024 many desktops start a process with.
    Returns the soft limit (before, now); on Windows, which has no such limit, (0, 0)."""
    try:
        import resource
    except ImportError:
        return 0, 0
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    want = FD_LIMIT if hard == resource.RLIM_INFINITY else min(FD_LIMIT, hard)
    if soft != resource.RLIM_INFINITY and soft < want:
        try:
            resource.setrlimit(resource.RLIMIT_NOFILE, (want, hard))
        except (ValueError, OSError):
            return soft, soft
        return soft, want
    return soft, soft


@dataclass(frozen=True)
class ConnectionLimits:
    """``max_connections``: connections served at once, over all users; ``max_per_user``: of
    one user (a uid, or a SID on Windows), at most ``max_connections``. A connection past
    either is answered ``resource_exhausted`` and closed; those served are untouched.
    ``send_timeout_s``: how long a reply may wait for a renderer that does not read its socket
    before the connection is closed."""

    max_connections: int = DEFAULT_MAX_CONNECTIONS
    max_per_user: int = DEFAULT_MAX_CONNECTIONS_PER_USER
    send_timeout_s: float = DEFAULT_SEND_TIMEOUT_S

    def __post_init__(self) -> None:
        if self.max_connections <= 0 or self.max_per_user <= 0:
            raise ValueError("connection limits are positive")
        if not 0 < self.send_timeout_s <= 3600:
            raise ValueError("the send timeout is a number of seconds in (0, 3600]")

    @property
    def send_timeout_ms(self) -> int:
        return max(1, round(self.send_timeout_s * 1000))

    def refusal(self, peer: str, total: int, of_peer: int) -> str | None:
        """Why one more connection of ``peer`` (which holds ``of_peer`` of the ``total``) is
        refused, naming the limit; None when it is not."""
        return self.over_total(total) or self.over_peer(peer, of_peer)

    def over_total(self, total: int) -> str | None:
        """Why one more connection is refused when the service serves ``total``; None: it is
        not, by the total."""
        if total >= self.max_connections:
            return (
                f"the service already serves {total} connections, its most "
                f"(--max-connections {self.max_connections}); retry later"
            )
        return None

    def over_peer(self, peer: str, of_peer: int) -> str | None:
        """Why one more connection of ``peer``, which holds ``of_peer``, is refused; None: it
        is not, by the per-user limit."""
        if of_peer >= self.max_per_user:
            return (
                f"{peer} already holds {of_peer} connections, the most one user may "
                f"(--max-connections-per-user {self.max_per_user}); close one and retry"
            )
        return None
