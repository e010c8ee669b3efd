"""Go nsqd 1.3.0 as a lookupd and its admin page see it (Go nsqd cannot be installed by
the project's files): registered with a lookupd over TCP V1 as nsqd registers, and an
HTTP port that answers ``GET /stats?format=json`` in nsqd's shape (spec http-api.md
§2.3) and 404 to anything else, ``/admin/stream`` included: Go nsqd has no stream.

Each ``/stats`` answer counts 100 more messages per topic and channel than the one
before, as a broker being published to would, so rates derived from two answers are
not 0.
"""

from __future__ import annotations

import time
from typing import TYPE_CHECKING

import h11
import orjson
import trio

from trionsq.protocol.lookupd import PeerInfo

from .lookupd_peers import RawPeer

if TYPE_CHECKING:
    from trionsq.lookupd.server import LookupdAddresses

GROWTH = 100
"""Messages added per topic and channel between two answers."""


class FakeGoNsqd:
    """One Go nsqd with ``topics`` (each with one channel, ``c``)."""

    def __init__(self, topics: tuple[str, ...] = ("gotopic",)) -> None:
        self.topics = topics
        self.answers = 0
        """``/stats`` requests answered."""
        self.http_port = 0
        self.started = int(time.time()) - 3600
        self._peer: RawPeer | None = None

    @property
    def key(self) -> str:
        """``host:port`` of its HTTP API, as the admin page names it."""
        return f"127.0.0.1:{self.http_port}"

    def stats(self) -> dict[str, object]:
        count = GROWTH * self.answers
        latency = {"count": 0, "percentiles": None}
        return {
            "version": "1.3.0",
            "health": "OK",
            "start_time": self.started,
            "topics": [
                {
                    "topic_name": topic,
                    "channels": [
                        {
                            "channel_name": "c",
                            "depth": 7,
                            "backend_depth": 0,
                            "in_flight_count": 2,
                            "deferred_count": 0,
                            "message_count": count,
                            "requeue_count": 0,
                            "timeout_count": 0,
                            "client_count": 0,
                            "clients": [],
                            "paused": False,
                            "e2e_processing_latency": latency,
                        }
                    ],
                    "depth": 5,
                    "backend_depth": 0,
                    "message_count": count,
                    "message_bytes": 200 * count,
                    "paused": False,
                    "e2e_processing_latency": latency,
                }
                for topic in self.topics
            ],
            "producers": [],
        }

    async def serve(
        self,
        lookupd: LookupdAddresses,
        *,
        task_status: trio.TaskStatus[FakeGoNsqd] = trio.TASK_STATUS_IGNORED,
    ) -> None:
        """Listen, register with ``lookupd``, and serve until cancelled (which
        closes the lookupd connection: lookupd forgets it, as nsqd's exit does)."""
        (listener,) = await trio.open_tcp_listeners(0, host="127.0.0.1")
        self.http_port = listener.socket.getsockname()[1]
        peer = await RawPeer.connect(lookupd)
        try:
            info = PeerInfo(
                version="1.3.0",
                tcp_port=4150,
                http_port=self.http_port,
                hostname="go-nsqd",
                broadcast_address="127.0.0.1",
            )
            await peer.identify(info)
            for topic in self.topics:
                await peer.register(topic)
                await peer.register(topic, "c")
            async with trio.open_nursery() as nursery:
                task_status.started(self)
                await trio.serve_listeners(self._answer, [listener], handler_nursery=nursery)
        finally:
            await trio.aclose_forcefully(peer.stream)

    async def _answer(self, stream: trio.SocketStream) -> None:
        """One request per connection (``Connection: close``), as a plain HTTP server."""
        connection = h11.Connection(h11.SERVER)
        async with stream:
            request: h11.Request | None = None
            while request is None:
                event = connection.next_event()
                if event is h11.NEED_DATA:
                    data = await stream.receive_some(65536)
                    if not data:
                        return
                    connection.receive_data(data)
                elif isinstance(event, h11.Request):
                    request = event
                else:
                    return
            path = request.target.split(b"?", 1)[0]
            if path == b"/stats":
                self.answers += 1
                status, body = 200, orjson.dumps(self.stats())
            else:
                status, body = 404, b'{"message":"NOT_FOUND"}'
            headers = [
                (b"content-type", b"application/json; charset=utf-8"),
                (b"content-length", str(len(body)).encode()),
                (b"connection", b"close"),
            ]
            await stream.send_all(
                connection.send(h11.Response(status_code=status, headers=headers))
            )
            await stream.send_all(connection.send(h11.Data(data=body)))
            await stream.send_all(connection.send(h11.EndOfMessage()))
