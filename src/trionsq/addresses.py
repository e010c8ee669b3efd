"""Network addresses written the way Go writes them, for logs, /stats and auth, and
the web origins browsers send; and the two shapes an address is given in.

nsqd prints ``net.Addr`` values with ``net.JoinHostPort``: IPv6 hosts in brackets.
Clients, nsqadmin and auth servers read these strings, so every place that shows an
address uses the same two functions.

An :data:`Address` is ``"host:port"`` (as NSQ's tools and configurations write it) or
``(host, port)`` (as sockets and :class:`~trionsq.BoundAddresses` give it); whatever
takes an address takes both, and :func:`normalize_address` makes the string.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, TypeAlias, TypeGuard, cast
from urllib.parse import urlsplit

if TYPE_CHECKING:
    from collections.abc import Sequence

    import trio

__all__ = [
    "Address",
    "address_list",
    "host_and_port",
    "is_host_port_pair",
    "join_host_port",
    "local_address",
    "normalize_address",
    "parse_authority",
    "parse_origin",
    "peer_address",
    "split_host_port",
]

DEFAULT_PORTS = {"http": 80, "https": 443}
Address: TypeAlias = str | tuple[str, int]
"""``"host:port"`` (``"[v6 host]:port"``) or ``(host, port)``."""


def split_host_port(address: str) -> tuple[str, int]:
    """``"host:port"`` (``[v6]:port`` too) to a pair; an empty host means every interface.

    Raises:
        ValueError: no port, or a port that is not a number in [0, 65535].
    """
    host, colon, port = address.rpartition(":")
    if not colon or not port.isdigit() or int(port) > 65535:
        raise ValueError(f"{address!r} is not <addr>:<port>")
    return host.strip("[]") or "0.0.0.0", int(port)  # noqa: S104 - nsqd's default


def normalize_address(address: Address) -> str:
    """``"host:port"`` for an address in either shape: a ``(host, port)`` pair joined
    as Go joins it (``[::1]:4150``), a ``"host:port"`` string as given.

    Raises:
        ValueError: one line saying what is wrong (no port, a port out of range, not
            an address at all).
    """
    if isinstance(address, str):
        split_host_port(address)
        return address
    if isinstance(address, tuple) and len(address) == 2 and isinstance(address[0], str):
        host, number = address
        if isinstance(number, int) and not isinstance(number, bool) and 0 <= number <= 65535:
            return join_host_port(host, number)
        raise ValueError(f"{address!r} is not (host, port) with a port in [0,65535]")
    raise ValueError(f"{address!r} is not <host>:<port> or (host, port)")


def host_and_port(address: Address) -> tuple[str, int]:
    """``(host, port)`` for an address in either shape, to connect to.

    Raises:
        ValueError: as :func:`normalize_address`.
    """
    return split_host_port(normalize_address(address))


def address_list(addresses: Address | Sequence[Address]) -> list[str]:
    """``"host:port"`` strings for one address or a sequence of them, in either shape
    (a ``(str, int)`` pair is one address, not two).

    Raises:
        ValueError: as :func:`normalize_address`.
    """
    if isinstance(addresses, str) or is_host_port_pair(addresses):
        return [normalize_address(addresses)]
    return [normalize_address(address) for address in cast("Sequence[Address]", addresses)]


def is_host_port_pair(value: object) -> TypeGuard[tuple[str, int]]:
    """Whether ``value`` is one ``(host, port)`` address, not a sequence of them."""
    return (
        isinstance(value, tuple)
        and len(value) == 2
        and isinstance(value[0], str)
        and isinstance(value[1], int)
    )


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
