"""Network addresses written the way Go writes them, for logs, /stats and auth, and
the web origins browsers send.

nsqd prints ``net.Addr`` values with ``net.JoinHostPort``: IPv6 hosts in brackets.
Clients, nsqadmin and auth servers read these strings, so every place that shows an
address uses the same two functions.
"""

from __future__ import annotations

from typing import TYPE_CHECKING
from urllib.parse import urlsplit

if TYPE_CHECKING:
    import trio

__all__ = ["join_host_port", "local_address", "parse_authority", "parse_origin", "peer_address"]

DEFAULT_PORTS = {"http": 80, "https": 443}


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


def parse_origin(text: str) -> tuple[str, str, int] | None:
    """A web origin (``scheme://host[:port]``, as an ``Origin`` header carries it) as
    ``(scheme, host, port)``, lower-cased, the scheme's default port filled in; None
    for anything else (``null``, a path, a user, another scheme)."""
    try:
        parts = urlsplit(text)
        port = parts.port
    except ValueError:
        return None
    scheme = parts.scheme.lower()
    if scheme not in DEFAULT_PORTS or not parts.hostname or parts.username is not None:
        return None
    if parts.path or parts.query or parts.fragment or text.endswith(("?", "#")):
        return None
    return scheme, parts.hostname, port if port is not None else DEFAULT_PORTS[scheme]


def parse_authority(text: str, scheme: str) -> tuple[str, int] | None:
    """A ``Host`` header (``host[:port]``) as ``(host, port)``, lower-cased, the
    scheme's default port filled in; None when it is not one."""
    found = parse_origin(f"{scheme}://{text}")
    return None if found is None else (found[1], found[2])
