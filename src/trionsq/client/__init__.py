"""The Trio client: :func:`open_producer` and :func:`open_consumer` over the
project's sans-IO protocol core (:mod:`trionsq.protocol.client`).

Built in steps (issue 16): connections with IDENTIFY and AUTH, a pipelined producer
(PUB, MPUB, DPUB, PUB_EXT, PUB_TRACE, partitions) and a consumer of one or more
nsqd and partitions with reconnects. Discovery through lookupd, ordered consumption
checks, TLS/compression and the blocking client come next.
"""

from __future__ import annotations

from .connection import Connection, ConnectionClosedError, NsqError, open_connection
from .consumer import ClientMessage, Consumer, open_consumer
from .options import ConnectionOptions
from .producer import Producer, open_producer

__all__ = [
    "ClientMessage",
    "Connection",
    "ConnectionClosedError",
    "ConnectionOptions",
    "Consumer",
    "NsqError",
    "Producer",
    "open_connection",
    "open_consumer",
    "open_producer",
]
