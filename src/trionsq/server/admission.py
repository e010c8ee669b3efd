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

import attrs
import trio

from ..auth.client import MAX_REQUESTS_AT_ONCE
from ..http.kept_connections import MAX_IDLE
from .lookupd_peers import PRECREATION_QUERIES_AT_ONCE

if TYPE_CHECKING:
    from collections.abc import Callable

    from ..config import NsqdConfig
    from ..descriptors import DescriptorBudget

__all__ = ["ConnectionGate", "cluster_sockets", "reserved_sockets"]

log = logging.getLogger("trionsq.descriptors")

WAITING_WINDOW: Final = 3.0
"""Seconds a replication refusal keeps ``/ping`` degraded (what is still missing
is tried again every second)."""
COMPLAINT_INTERVAL: Final = 60.0
"""Seconds between two log lines about refused connections (clients' and
replication's each)."""


@attrs.define
class _Complaints:
    """Refusals of one kind (clients', replication's) since the last log line."""

    at: float | None = None
    unreported: int = 0


class ConnectionGate:
    """Admits connections while the budget has room, refuses the rest politely."""

    def __init__(
        self, budget: DescriptorBudget, clock: Callable[[], float] = time.monotonic
    ) -> None:
        self.budget = budget
        self._clock = clock
        self._clients = _Complaints()
        self._replication = _Complaints()
        self._replication_refused_at: float | None = None

    def admit(self, kind: str) -> bool:
        """Whether a connection just accepted by the ``kind`` listener ("TCP",
        "HTTP", "HTTPS", "TubeMQ") may stay; if so, :meth:`closed` (HTTP's:
        :meth:`http_closed`) when it ends."""
        if self.budget.admit(http=kind in ("HTTP", "HTTPS")):
            return True
        self._complain(self._clients, f"{kind}: refused %d connection(s)")
        return False

    def admit_replication(self, what: str) -> bool:
        """Whether a replication connection (``what``: its partition and peer) may
        be held; if so, :meth:`replication_closed` when it ends. Not: the follower
        tries again (``cluster/follower_stream.py``), said here once a minute."""
        if self.budget.admit_replication():
            return True
        self._replication_refused_at = self._clock()
        self._complain(
            self._replication,
            f"replication ({what} and others): %d connection(s) not held, retried,",
        )
        return False

    def replication_waiting(self) -> str | None:
        """What ``/ping`` says while replica roles wait for descriptors this budget
        refused them (in the last :data:`WAITING_WINDOW`: refused followers try every
        second, and a leader refuses each of their tries); None otherwise."""
        refused_at = self._replication_refused_at
        budget = self.budget
        missing = budget.replication_claimed - budget.replication_connections
        if refused_at is None or missing <= 0 or self._clock() - refused_at > WAITING_WINDOW:
            return None
        return (
            f"descriptor budget full: {missing} replication connection(s) wait for room"
            f" ({budget.connections} connections and {budget.files_open} open files share"
            f" {budget.pool} of the open-file limit {budget.limit}: raise it with ulimit -n)"
        )

    def _complain(self, complaints: _Complaints, refused: str) -> None:
        """A refusal counted, and logged with those since the last line if a
        :data:`COMPLAINT_INTERVAL` has passed (``refused`` has a %d for the count)."""
        complaints.unreported += 1
        now = self._clock()
        if complaints.at is None or now - complaints.at >= COMPLAINT_INTERVAL:
            budget = self.budget
            log.warning(
                refused + " over the descriptor budget: %d connections (%d of them"
                " replication, %d more claimed) and %d open files share %d of the"
                " open-file limit %d (raise it with ulimit -n)",
                complaints.unreported,
                budget.connections,
                budget.replication_connections,
                max(budget.replication_claimed - budget.replication_connections, 0),
                budget.files_open,
                budget.pool,
                budget.limit,
            )
            complaints.at = now
            complaints.unreported = 0

    def closed(self) -> None:
        """An admitted connection ended."""
        self.budget.connection_closed()

    def http_closed(self) -> None:
        """An admitted HTTP or HTTPS connection ended."""
        self.budget.connection_closed(http=True)

    def replication_closed(self) -> None:
        """A replication connection held ended."""
        self.budget.replication_closed()

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
ETCD_CALLS_AT_ONCE: Final = 3
"""etcd calls a cluster broker makes at once, one per task of its replica manager
(``cluster/replica_manager.py``): the registration's (lease grant, key, renewals),
the view's (a read of the keys after its watch broke), the ISR upkeep's proposal."""
ETCD_WATCHES: Final = 1
"""The view's watch, on a streaming connection of its own."""


def reserved_sockets(config: NsqdConfig) -> int:
    """Sockets a broker opens besides the connections it accepts: its listeners,
    its lookupd peers and their channel queries for new topics (lookupds may be
    added at runtime), statsd's and the auth queries', a cluster broker's own."""
    listeners = 1 + bool(config.http_address) + (config.tls_enabled and bool(config.https_address))
    peers = PEER_SOCKETS * (len(config.lookupd_tcp_addresses) + SPARE_PEERS)
    lookupd_queries = PRECREATION_QUERIES_AT_ONCE
    auth = MAX_REQUESTS_AT_ONCE if config.auth_http_addresses else 0
    statsd = 1 if config.statsd_address else 0
    tubemq = 2 if config.tubemq_enabled else 0  # the master and the broker service
    own = LISTENER_SOCKETS * (listeners + tubemq) + peers + lookupd_queries + auth + statsd
    return own + (cluster_sockets(config) if config.cluster_enabled else 0)


def cluster_sockets(config: NsqdConfig) -> int:
    """A cluster broker's sockets that do not grow with its partitions: the
    replication listener, and the etcd client's (per endpoint as many idle as were
    ever in use at once, at most ``MAX_IDLE``; one per call in flight; the watch).
    The replication connections themselves come from the pool (``descriptors.py``)."""
    endpoints = len(config.etcd_urls)
    etcd = endpoints * min(MAX_IDLE, ETCD_CALLS_AT_ONCE) + ETCD_CALLS_AT_ONCE + ETCD_WATCHES
    return LISTENER_SOCKETS + etcd
