"""An etcd v3 client on Trio: etcd's JSON gateway over the project's HTTP client.

Why not a library: the maintained Python etcd clients speak gRPC through grpcio,
whose aio API belongs to asyncio and cannot run under Trio; etcd 3.4 serves the
same API as JSON over HTTP/1.1 (``/v3/kv/range``, ``/v3/kv/txn``, ``/v3/lease/*``,
``/v3/watch``), which ``http/client.py`` already speaks (h11 on Trio, design §7),
so this adds no dependency and no second event loop. Unary calls open one
connection each (the coordinator makes a few a second at most); a watch keeps
its own streaming connection (``_watch_stream``).

Endpoints are tried in turn from the last one that answered, so a client given
every member of a 3-node etcd goes on when one member dies.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, Final

import attrs
import h11
import orjson
import trio

from ..config import split_host_port
from ..http.client import HttpClientError, http_request
from . import etcd_json
from .etcd_json import Compare, EtcdReplyError, KeyValue, Op, TxnReply, WatchBatch

if TYPE_CHECKING:
    from collections.abc import Callable, Iterable, Sequence

__all__ = ["EtcdClient", "EtcdUnavailable", "LeaseExpired", "endpoint_address"]

WATCH_READ: Final = 65536
MAX_WATCH_LINE: Final = 16 << 20


class EtcdUnavailable(Exception):
    """No endpoint gave a usable answer in time."""


class LeaseExpired(Exception):
    """etcd no longer knows the lease: whatever it held is gone."""


def endpoint_address(url: str) -> str:
    """``http://host:port`` (or ``host:port``) as ``host:port``.

    Raises:
        ValueError: https (not supported) or no port.
    """
    text = url.strip()
    if text.startswith("https://"):
        raise ValueError(f"{url!r}: https endpoints are not supported, use http://")
    text = text.removeprefix("http://").rstrip("/")
    split_host_port(text)  # raises ValueError on a bad address
    return text


def _addresses(urls: Iterable[str]) -> tuple[str, ...]:
    return tuple(endpoint_address(url) for url in urls)


@attrs.define
class EtcdClient:
    """Calls on an etcd cluster through any of its ``endpoints``."""

    endpoints: tuple[str, ...] = attrs.field(converter=_addresses)
    timeout: float = 2.0
    """Per call and endpoint (connect and whole exchange)."""
    _current: int = 0

    def __attrs_post_init__(self) -> None:
        if not self.endpoints:
            raise ValueError("no etcd endpoint given")

    async def call(self, path: str, request: etcd_json.Json) -> etcd_json.Json:
        """POST ``request`` to ``path`` on the first endpoint that answers.

        Raises:
            EtcdUnavailable: every endpoint failed.
            EtcdReplyError: etcd refused the request (a gRPC error).
        """
        body = orjson.dumps(request)
        failures: list[str] = []
        count = len(self.endpoints)
        for step in range(count):
            index = (self._current + step) % count
            address = self.endpoints[index]
            try:
                reply = await http_request(
                    "POST",
                    address,
                    path,
                    body=body,
                    headers=[("Content-Type", "application/json")],
                    connect_timeout=self.timeout,
                    request_timeout=self.timeout,
                    max_reply_bytes=64 << 20,
                )
            except HttpClientError as error:
                failures.append(str(error))
                continue
            if reply.status == 503 or (reply.status >= 500 and b'"code":14' in reply.body):
                failures.append(f"{address}: unavailable ({reply.status})")
                continue
            self._current = index
            return etcd_json.decode_reply(reply.body)
        raise EtcdUnavailable("; ".join(failures))

    # ------------------------------------------------------------------ keys

    async def get(self, key: bytes) -> KeyValue | None:
        """One key, or None."""
        kvs, _ = etcd_json.parse_kvs(await self.call("/v3/kv/range", etcd_json.range_json(key)))
        return kvs[0] if kvs else None

    async def get_prefix(self, prefix: bytes) -> tuple[list[KeyValue], int]:
        """Every key under ``prefix`` (sorted by key) and the revision read at."""
        request = etcd_json.range_json(prefix, prefix=True)
        return etcd_json.parse_kvs(await self.call("/v3/kv/range", request))

    async def put(self, key: bytes, value: bytes, *, lease: int = 0) -> int:
        """Set ``key``; returns the new revision."""
        request: etcd_json.Json = {"key": etcd_json.b64(key), "value": etcd_json.b64(value)}
        if lease:
            request["lease"] = str(lease)
        return etcd_json.header_revision(await self.call("/v3/kv/put", request))

    async def delete(self, key: bytes, *, prefix: bool = False) -> int:
        """Delete ``key`` (or every key under it); returns how many went."""
        reply = await self.call("/v3/kv/deleterange", etcd_json.range_json(key, prefix=prefix))
        return etcd_json.as_int(reply.get("deleted"))

    async def txn(
        self, compare: Sequence[Compare], success: Sequence[Op], failure: Sequence[Op] = ()
    ) -> TxnReply:
        """An atomic compare-and-set: ``success`` if every comparison holds, else ``failure``."""
        reply = await self.call("/v3/kv/txn", etcd_json.txn_json(compare, success, failure))
        return etcd_json.parse_txn(reply)

    # ---------------------------------------------------------------- leases

    async def grant(self, ttl: float) -> int:
        """A new lease of ``ttl`` seconds (rounded up; etcd counts whole seconds)."""
        reply = await self.call("/v3/lease/grant", {"TTL": max(1, math.ceil(ttl))})
        return etcd_json.as_int(reply.get("ID"))

    async def keep_alive_once(self, lease: int) -> int:
        """Renew ``lease``; returns its TTL.

        Raises:
            LeaseExpired: etcd no longer has it.
        """
        reply = await self.call("/v3/lease/keepalive", {"ID": str(lease)})
        result = reply.get("result")
        ttl = etcd_json.as_int(result.get("TTL") if isinstance(result, dict) else None)
        if ttl <= 0:
            raise LeaseExpired(f"lease {lease:x} expired")
        return ttl

    async def revoke(self, lease: int) -> None:
        """Drop ``lease`` and every key attached to it (an orderly exit)."""
        try:
            await self.call("/v3/lease/revoke", {"ID": str(lease)})
        except EtcdReplyError as error:
            if "not found" not in str(error):
                raise

    async def keep_alive(self, lease: int, ttl: float, on_renewed: Callable[[], None]) -> None:
        """Renew ``lease`` every third of ``ttl`` until cancelled.

        A failed renewal is retried at once and then every tenth of the TTL; the
        lease lives on in etcd meanwhile, and ``on_renewed`` (each success) lets the
        caller see how long it has gone without one.

        Raises:
            LeaseExpired: etcd dropped the lease (renewals came too late).
        """
        while True:
            try:
                await self.keep_alive_once(lease)
            except (EtcdUnavailable, EtcdReplyError):
                await trio.sleep(ttl / 10)
                continue
            on_renewed()
            await trio.sleep(ttl / 3)

    # ----------------------------------------------------------------- watch

    async def watch_prefix(
        self, prefix: bytes, start_revision: int, on_batch: Callable[[WatchBatch], None]
    ) -> None:
        """Hand every change under ``prefix`` from ``start_revision`` on to ``on_batch``
        until cancelled.

        Raises:
            EtcdUnavailable: the stream broke or no endpoint took it (the caller
                reads the keys again and watches from there).
            EtcdReplyError: etcd cancelled the watch (compacted past the revision).
        """
        create: etcd_json.Json = etcd_json.range_json(prefix, prefix=True)
        if start_revision:
            create["start_revision"] = str(start_revision)
        body = orjson.dumps({"create_request": create})
        address = self.endpoints[self._current]
        try:
            host, port = split_host_port(address)
            with trio.fail_after(self.timeout):
                stream = await trio.open_tcp_stream(host, port)
        except (OSError, trio.TooSlowError) as error:
            raise EtcdUnavailable(f"{address}: watch connect failed: {error}") from None
        async with stream:
            try:
                await _watch_stream(stream, host, body, on_batch)
            except (trio.BrokenResourceError, trio.ClosedResourceError, OSError) as error:
                raise EtcdUnavailable(f"{address}: watch broke: {error}") from None
            except h11.ProtocolError as error:
                raise EtcdUnavailable(f"{address}: bad watch reply: {error}") from None
        self._current = (self._current + 1) % len(self.endpoints)
        raise EtcdUnavailable(f"{address}: watch stream ended")


async def _watch_stream(
    stream: trio.SocketStream, host: str, body: bytes, on_batch: Callable[[WatchBatch], None]
) -> None:
    """Send the watch request and hand on each newline-delimited message until EOF."""
    connection = h11.Connection(h11.CLIENT)
    headers = [("Host", host), ("Content-Type", "application/json")]
    headers.append(("Content-Length", str(len(body))))
    request = h11.Request(method="POST", target="/v3/watch", headers=headers)
    await stream.send_all(
        connection.send(request)
        + connection.send(h11.Data(data=body))
        + connection.send(h11.EndOfMessage())
    )
    pending = b""
    while True:
        event = connection.next_event()
        if event is h11.NEED_DATA:
            data = await stream.receive_some(WATCH_READ)
            connection.receive_data(bytes(data))
            if not data:
                return
        elif isinstance(event, h11.Response):
            if event.status_code != 200:
                raise EtcdUnavailable(f"watch answered {event.status_code}")
        elif isinstance(event, h11.Data):
            pending += bytes(event.data)
            *lines, pending = pending.split(b"\n")
            if len(pending) > MAX_WATCH_LINE:
                raise EtcdReplyError("watch message too large")
            for line in lines:
                if line.strip():
                    _deliver(line, on_batch)
        elif isinstance(event, (h11.EndOfMessage, h11.ConnectionClosed)):
            if pending.strip():
                _deliver(pending, on_batch)
            return


def _deliver(line: bytes, on_batch: Callable[[WatchBatch], None]) -> None:
    batch = etcd_json.parse_watch(etcd_json.decode_reply(line))
    if batch.canceled:
        raise EtcdReplyError(f"watch cancelled (compacted to {batch.compact_revision})")
    on_batch(batch)
