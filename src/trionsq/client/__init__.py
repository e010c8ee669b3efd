"""The Trio client: :func:`open_producer` and :func:`open_consumer` over the
project's sans-IO protocol core (:mod:`trionsq.protocol.client`), implementing
Youzan's smart-client design: discovery through nsqlookupd, one connection per
partition, ordered consumption, tracing, ext headers and tags, with go-nsq's RDY,
backoff and retry rules where the design is silent. Everything it raises is an
:class:`NsqClientError` (:mod:`.errors`). :mod:`trionsq.client.blocking` offers the
same for code that is not Trio. See docs/client.md.
"""

from __future__ import annotations

from . import errors
from .connection import Connection, open_connection
from .consumer import Consumer, ConsumerSettings, open_consumer
from .discovery import Placement, Target
from .errors import *  # noqa: F403  (the exception classes: errors.__all__)
from .errors import renamed
from .message import ClientMessage
from .options import ConnectionOptions
from .ordering import OffsetSkip
from .partitioning import partition_for_key
from .producer import Producer, ProducerSettings, open_producer

__all__ = [
    "ClientMessage",
    "Connection",
    "ConnectionOptions",
    "Consumer",
    "ConsumerSettings",
    "OffsetSkip",
    "Placement",
    "Producer",
    "ProducerSettings",
    "Target",
    "open_connection",
    "open_consumer",
    "open_producer",
    "partition_for_key",
]
__all__ += errors.__all__


def __getattr__(name: str) -> type[errors.NsqClientError]:
    """``LookupError_``, the old name of :class:`NsqDiscoveryError` (deprecated)."""
    return renamed(__name__, name)
