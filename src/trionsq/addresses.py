"""Network addresses written the way Go writes them, for logs, /stats and auth.

nsqd prints ``net.Addr`` values with ``net.JoinHostPort``: IPv6 hosts in brackets.
Clients, nsqadmin and auth servers read these strings, so every place that shows an
address uses the same two functions.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import trio

__all__ = ["join_host_port", "local_address", "peer_address"]


def join_host_port(host: str, port: int) -> str:
    """Go's ``net.JoinHostPort``: ``host:port``, ``[v6 host]:port``."""
    return f"[{host}]:{port}" if ":" in host else f"{host}:{port}"


def peer_address(sock: trio.socket.SocketType) -> str:
    """The other end of a connected socket as Go prints it; a unix socket's path;
    ``""`` once the peer has reset the connection."""
    try:
        return _socket_name(sock.getpeername())
    except OSError:
        return ""


def local_address(sock: trio.socket.SocketType) -> str:
    """This end of a socket as Go prints it; ``""`` once the socket is closed."""
    try:
        return _socket_name(sock.getsockname())
    except OSError:
        return ""


def _socket_name(name: object) -> str:
    if not isinstance(name, tuple):
        return str(name)
    return join_host_port(name[0], name[1])
