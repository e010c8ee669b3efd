"""Who may open the admin stream, how many at once, and what they may do there
(issue 30, item 2; docs/admin.md, "Who may use the stream").

A browser lets any page open a websocket to any address, with the page's own
``Origin`` header; without a check, a page from another site deleted a topic and read
message bodies through a victim's browser. So a browser's upgrade (one with an
``Origin``) is taken only from:

- the broker's own pages: the origin's scheme is the listener's and its host and port
  are the ``Host`` the browser connected to, *and* that host is a name of this
  broker (an IP address, ``localhost``, its hostname, ``--broadcast-address``, the
  host of ``--http-address``/``--https-address``). The second half defeats DNS
  rebinding: a page of ``evil.example`` whose name the attacker later points at the
  broker has a matching origin and ``Host``, but ``evil.example`` is no name of
  the broker;
- the lookupds this broker registers with (their cluster page follows every broker's
  stream), by the host the broker connects to and the names and HTTP port they gave
  in their IDENTIFY answer;
- ``--admin-allowed-origins`` (``*``: any).

Everything else gets 403 before the upgrade. Clients that are no browsers send no
``Origin`` and are not concerned (``trionsq top``, scripts): a script can reach the
HTTP API as well.
"""

from __future__ import annotations

import hmac
import ipaddress
import socket
from typing import TYPE_CHECKING, Final

from ..addresses import parse_authority, parse_origin

if TYPE_CHECKING:
    from collections.abc import Callable, Iterable

    from ..config import NsqdConfig
    from ..http.messages import Request

__all__ = ["CLOSE_TRY_LATER", "AdminGate", "Origin"]

Origin = tuple[str, str, int]
"""``(scheme, host, port)``, as :func:`~trionsq.addresses.parse_origin` gives it."""
CLOSE_TRY_LATER: Final = 1013
"""RFC 6455's "Try Again Later": the stream is full (``--admin-max-subscribers``)."""


class AdminGate:
    """The admin stream's rules for one broker (its HTTP and HTTPS listeners share it)."""

    def __init__(
        self,
        config: NsqdConfig,
        lookupd_origins: Callable[[], Iterable[Origin]] = tuple,
    ) -> None:
        """``lookupd_origins``: the origins of the lookupds' pages, asked at each
        upgrade (a lookupd's HTTP port is known once it answered IDENTIFY)."""
        self.mode = config.admin_stream
        self.secret = config.admin_secret
        self.max_subscribers = config.admin_max_subscribers
        self.any_origin = "*" in config.admin_allowed_origins
        self.allowed = frozenset(
            found
            for text in config.admin_allowed_origins
            if (found := parse_origin(text)) is not None
        )
        self.own_hosts = frozenset(
            name.lower()
            for name in (
                "localhost",
                socket.gethostname(),
                config.broadcast_address,
                config.http_address.rpartition(":")[0].strip("[]"),
                config.https_address.rpartition(":")[0].strip("[]"),
            )
            if name
        )
        self._lookupd_origins = lookupd_origins
        self.subscribers = 0
        """Streams open now, on both listeners."""

    @property
    def actions_allowed(self) -> bool:
        """Whether the stream takes admin actions and gives message bodies at all."""
        return self.mode == "read-write"

    def origin_refusal(self, head: Request, scheme: str) -> str | None:
        """Why the page that sent ``head`` (an upgrade on a listener of ``scheme``)
        may not open the stream; None when it may."""
        text = head.headers.get("origin")
        if text is None or self.any_origin:
            return None
        origin = parse_origin(text)
        if origin is None:
            return f"origin {text!r} may not open the admin stream"
        if origin in self.allowed or origin in set(self._lookupd_origins()):
            return None
        host = parse_authority(head.headers.get("host", ""), scheme)
        if origin[0] == scheme and host == origin[1:] and self._is_own(origin[1]):
            return None
        return (
            f"origin {text!r} may not open the admin stream"
            " (the broker's own pages and --admin-allowed-origins may)"
        )

    def _is_own(self, host: str) -> bool:
        """A name this broker answers to (an IP address is: a page of that origin came
        from this listener), never a name an attacker's DNS could point here."""
        try:
            ipaddress.ip_address(host)
        except ValueError:
            return host in self.own_hosts or host.endswith(".localhost")
        return True

    def full(self) -> str | None:
        """Why one more stream may not open now (its close reason); None: it may."""
        if self.subscribers < self.max_subscribers:
            return None
        return (
            f"too many admin stream subscribers (--admin-max-subscribers="
            f"{self.max_subscribers}); try again later"
        )

    def secret_matches(self, given: str) -> bool:
        """``given`` is ``--admin-secret`` (compared in constant time)."""
        return bool(self.secret) and hmac.compare_digest(given.encode(), self.secret.encode())


def lookupd_origins(peers: Iterable[tuple[str, str, str, int]]) -> list[Origin]:
    """The origins a lookupd's page may have, from each connected lookupd's
    ``(configured address, broadcast address, hostname, HTTP port)``: its page is
    served on its HTTP port under any of these names."""
    origins: list[Origin] = []
    for address, broadcast, hostname, http_port in peers:
        configured = address.rpartition(":")[0].strip("[]")
        names = {configured, broadcast, hostname} - {""}
        origins.extend(("http", name.lower(), http_port) for name in names)  # no HTTPS there
    return origins
