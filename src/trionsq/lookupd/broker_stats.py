"""``GET /admin/broker_stats?broker=host:port``: a registered broker's ``/stats``
(JSON, without the memory block), fetched by the lookupd for its admin page.

The page follows each broker's admin stream; a Go nsqd has none, and a browser may
not read its ``/stats`` from the lookupd's page (another origin, and nsqd sends no
CORS headers), so the page polls it here instead. Only the HTTP address of a broker
this lookupd lists (``broadcast_address``, or ``hostname``, with ``http_port``, as
``/nodes`` gives them) is asked: the lookupd is no proxy to anywhere else.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Final

from ..addresses import join_host_port
from ..http.client import HttpClientError, http_get
from ..http.messages import JSON_CONTENT_TYPE, Response

if TYPE_CHECKING:
    from collections.abc import Iterable

    from ..http.messages import Request
    from .registry import Node

__all__ = ["STATS_TIMEOUT", "broker_stats"]

STATS_TIMEOUT: Final = 5.0
"""Seconds to connect to the broker, and again for its whole answer."""
STATS_TARGET: Final = "/stats?format=json&include_mem=false"


def _listed(nodes: Iterable[Node], broker: str) -> bool:
    for node in nodes:
        info = node.peer.info
        for host in (info.broadcast_address, info.hostname):
            if host and join_host_port(host, info.http_port) == broker:
                return True
    return False


async def broker_stats(request: Request, nodes: Iterable[Node]) -> Response:
    """The answer for ``request``, given the brokers the lookupd lists now.

    400 ``MISSING_ARG_BROKER``; 404 ``UNKNOWN_BROKER`` (not listed); 502
    ``BROKER_STATS_FAILED <why>`` (no answer, or not a 200 JSON document); else the
    broker's JSON as it sent it.
    """
    broker = request.arg("broker")
    if not broker:
        return Response.error(400, "MISSING_ARG_BROKER")
    if not _listed(nodes, broker):
        return Response.error(404, "UNKNOWN_BROKER")
    try:
        reply = await http_get(
            broker, STATS_TARGET, connect_timeout=STATS_TIMEOUT, request_timeout=STATS_TIMEOUT
        )
    except HttpClientError as error:
        return Response.error(502, f"BROKER_STATS_FAILED {error}")
    if reply.status != 200 or not reply.body.startswith(b"{"):
        return Response.error(502, f"BROKER_STATS_FAILED HTTP {reply.status}")
    return Response(200, reply.body, ((b"Content-Type", JSON_CONTENT_TYPE),))
