"""Network addresses written the way Go writes them, for logs, /stats and auth.

nsqd prints ``net.Addr`` values with ``net.JoinHostPort``: IPv6 hosts in brackets.
Clients, nsqadmin and auth servers read these strings, so every place that shows an
address uses the same two functions.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import trio

__all__ = ["join_host_port", "peer_address"]


def join_host_port(host: str, port: int) -> str:
    """Go's ``net.JoinHostPort``: ``host:port``, ``[v6 host]:port``."""
    return f"[{host}]:{port}" if ":" in host else f"{host}:{port}"


def peer_address(sock: trio.socket.SocketType) -> str:
    """The other end of a connected socket as Go prints it; a unix socket's path;
    ``""`` once the peer has reset the connection."""
    try:
        peer = sock.getpeername()
    except OSError:
        return ""
    if not isinstance(peer, tuple):
        return str(peer)
    return join_host_port(peer[0], peer[1])
