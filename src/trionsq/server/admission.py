"""Connections within the descriptor budget: admitted, or closed at once.

nsqd accepts until the process is out of descriptors, and then ``accept`` fails
for every listener, ``/ping`` included, until some close. Here each accepted
connection asks the broker's :class:`~trionsq.descriptors.DescriptorBudget` first:
one over the budget is closed at once (its client sees the connection end and
retries, as after any broker restart), so the kernel always has the reserve left
to accept with, and HTTP keeps a share TCP cannot take. Refusals are logged once
a minute with their count, not once each.
"""

from __future__ import annotations

import logging
import time
from typing import TYPE_CHECKING, Final

import trio

from ..auth.client import MAX_REQUESTS_AT_ONCE
from .lookupd_peers import PRECREATION_QUERIES_AT_ONCE

if TYPE_CHECKING:
    from collections.abc import Callable

    from ..config import NsqdConfig
    from ..descriptors import DescriptorBudget

__all__ = ["ConnectionGate", "reserved_sockets"]

log = logging.getLogger("trionsq.descriptors")

COMPLAINT_INTERVAL: Final = 60.0
"""Seconds between two log lines about refused connections."""


class ConnectionGate:
    """Admits connections while the budget has room, refuses the rest politely."""

    def __init__(
        self, budget: DescriptorBudget, clock: Callable[[], float] = time.monotonic
    ) -> None:
        self.budget = budget
        self._clock = clock
        self._complained_at: float | None = None
        self._unreported = 0

    def admit(self, kind: str) -> bool:
        """Whether a connection just accepted by the ``kind`` listener ("TCP",
        "HTTP", "HTTPS", "TubeMQ") may stay; if so, :meth:`closed` when it ends."""
        if self.budget.admit(http=kind in ("HTTP", "HTTPS")):
            return True
        self._unreported += 1
        now = self._clock()
        if self._complained_at is None or now - self._complained_at >= COMPLAINT_INTERVAL:
            budget = self.budget
            log.warning(
                "%s: refused %d connection(s) over the descriptor budget: %d connections"
                " and %d open files share %d of the open-file limit %d (raise it with"
                " ulimit -n)",
                kind,
                self._unreported,
                budget.connections,
                budget.files_open,
                budget.pool,
                budget.limit,
            )
            self._complained_at = now
            self._unreported = 0
        return False

    def closed(self) -> None:
        """An admitted connection ended."""
        self.budget.connection_closed()

    async def refuse(self, stream: trio.abc.AsyncResource) -> None:
        """Close a connection that was not admitted, before reading anything."""
        await trio.aclose_forcefully(stream)


LISTENER_SOCKETS: Final = 2
"""Sockets of one listener address (an IPv4 and an IPv6 one for a wildcard)."""
PEER_SOCKETS: Final = 2
"""Sockets of one lookupd peer: its connection, and a second while it dials again
(happy eyeballs may try two families)."""
SPARE_PEERS: Final = 2
"""lookupd addresses ``PUT /config`` may add beyond those configured at start."""


def reserved_sockets(config: NsqdConfig) -> int:
    """Sockets a broker opens besides the connections it accepts: its listeners,
    its lookupd peers and their channel queries for new topics (lookupds may be
    added at runtime), statsd's and the auth queries'."""
    listeners = 1 + bool(config.http_address) + (config.tls_enabled and bool(config.https_address))
    peers = PEER_SOCKETS * (len(config.lookupd_tcp_addresses) + SPARE_PEERS)
    lookupd_queries = PRECREATION_QUERIES_AT_ONCE
    auth = MAX_REQUESTS_AT_ONCE if config.auth_http_addresses else 0
    statsd = 1 if config.statsd_address else 0
    tubemq = 2 if config.tubemq_enabled else 0  # the master and the broker service
    return LISTENER_SOCKETS * (listeners + tubemq) + peers + lookupd_queries + auth + statsd
