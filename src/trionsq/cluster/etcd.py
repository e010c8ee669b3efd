"""An etcd v3 client on Trio: etcd's JSON gateway over the project's HTTP client.

Why not a library: the maintained Python etcd clients speak gRPC through grpcio,
whose aio API belongs to asyncio and cannot run under Trio; etcd 3.4 serves the
same API as JSON over HTTP/1.1 (``/v3/kv/range``, ``/v3/kv/txn``, ``/v3/lease/*``,
``/v3/watch``), which ``http/client.py`` already speaks (h11 on Trio, design §7),
so this adds no dependency and no second event loop. Unary calls go over
connections kept alive (``http/kept_connections.py``: one per call in flight, a
few kept idle per endpoint), since a connect and a TLS handshake per call cost the
broker and etcd more than the call; a watch keeps its own streaming connection
(``_watch_stream``). The client's owner closes it (``async with``, or
:meth:`EtcdClient.aclose`): the replica manager of a broker, the coordinator of a
lookupd (nursery_tree.py).

A reply lost on a reused connection after the whole request went out is asked
again on a new connection only for the calls in :data:`RETRY_SAFE`, whose second
run changes nothing the first did not: etcd may have done the first.

Endpoints are tried in turn from the last one that answered, so a client given
every member of a 3-node etcd goes on when one member dies.
"""

from __future__ import annotations

import contextlib
import logging
import math
import ssl
from typing import TYPE_CHECKING, Final

import attrs
import h11
import orjson
import trio

from ..config import split_host_port
from ..http.client import HttpClientError, connection_failure, open_http_stream
from ..http.kept_connections import KeptConnections
from . import etcd_json
from .etcd_access import EtcdAccess
from .etcd_json import Compare, EtcdReplyError, KeyValue, Op, TxnReply, WatchBatch

if TYPE_CHECKING:
    from collections.abc import Awaitable, Callable, Iterable, Sequence
    from types import TracebackType

__all__ = ["EtcdClient", "EtcdRefused", "EtcdUnavailable", "LeaseExpired", "endpoint_address"]

log = logging.getLogger("trionsq.cluster")

WATCH_READ: Final = 65536
MAX_WATCH_LINE: Final = 16 << 20
AUTHENTICATION_RETRY: Final = 5.0
"""Seconds after a refused authentication before the client tries again."""
PLAIN_TO_TLS: Final = ("bad HTTP reply", "connection closed before a complete reply")
"""How a TLS listener answers plain HTTP on a new connection, as ``http/client.py``
words it (a reused connection's failures read ``reused connection: ...``)."""
RETRY_SAFE: Final = frozenset(
    {
        "/v3/kv/range",
        "/v3/lease/keepalive",
        "/v3/lease/revoke",
        "/v3/lease/grant",
        "/v3/lease/leases",
        "/v3/auth/authenticate",
    }
)
"""Calls asked again when a reused connection broke before any byte of the reply:
reads; a renewal (twice renews once); a revoke (the second finds the lease gone,
which :meth:`EtcdClient.revoke` takes as done); a grant or an authentication (the
first one's lease or token, unused, expires by itself). Never ``put``,
``deleterange`` or ``txn``: a second put may overwrite a newer value another
client wrote in between, and a compare-and-set that won the first time loses the
second, so the caller would take an election or ISR change it made as lost."""


class EtcdUnavailable(Exception):
    """No endpoint gave a usable answer in time."""


class EtcdRefused(EtcdUnavailable):
    """etcd was reached but refused this client: wrong user or password, a
    certificate one side does not trust, TLS spoken on one side only. At start it
    stops the broker (:meth:`EtcdClient.check`); later it counts as etcd being
    unavailable (the broker keeps its leaderships and says so on ``/ping``)."""


class LeaseExpired(Exception):
    """etcd no longer knows the lease: whatever it held is gone."""


STALE_TOKEN: Final = ("invalid auth token", "auth store is old")
"""etcd's words for a token it no longer takes (expired simple token, or users and
roles changed since it was issued): authenticate again."""
REFUSED: Final = ("authentication failed", "user name is empty", "permission denied")
"""etcd's words for credentials it does not take, or none where it needs some."""


def endpoint_address(url: str) -> str:
    """``http(s)://host:port`` (or ``host:port``) as ``host:port``.

    Raises:
        ValueError: no port.
    """
    text = url.strip().removeprefix("https://").removeprefix("http://").rstrip("/")
    split_host_port(text)  # raises ValueError on a bad address
    return text


def _addresses(urls: Iterable[str]) -> tuple[str, ...]:
    return tuple(endpoint_address(url) for url in urls)


def _urls(urls: Iterable[str]) -> tuple[str, ...]:
    return tuple(urls)


@attrs.define
class EtcdClient:
    """Calls on an etcd cluster through any of its ``endpoints`` (``http://`` or, all
    of them, ``https://`` URLs), with the TLS files and user of ``access``."""

    urls: tuple[str, ...] = attrs.field(converter=_urls)
    timeout: float = 2.0
    """Per call and endpoint (connect and whole exchange)."""
    access: EtcdAccess = attrs.field(factory=EtcdAccess)
    probe_key: bytes = b"/trionsq/"
    """What :meth:`check` reads: a key a role limited to the cluster's keys may read."""
    endpoints: tuple[str, ...] = attrs.field(init=False)
    """``host:port`` of each URL."""
    refused: str = attrs.field(default="", init=False)
    """Why etcd refused the latest call ("": it did not), for ``/ping``."""
    authentications: int = attrs.field(default=0, init=False)
    """Tokens obtained so far (one at the start, one more each time etcd dropped it)."""
    _ssl: ssl.SSLContext | None = attrs.field(default=None, init=False)
    _token: str = attrs.field(default="", init=False, repr=False)
    _authenticating: trio.Lock = attrs.field(factory=trio.Lock, init=False, repr=False)
    _authentication_refused: str = attrs.field(default="", init=False)
    _retry_authentication_at: float = attrs.field(default=-math.inf, init=False)
    _current: int = attrs.field(default=0, init=False)
    connections: KeptConnections = attrs.field(factory=KeptConnections, init=False)
    """The unary calls' connections, kept alive between calls."""

    def __attrs_post_init__(self) -> None:
        if not self.urls:
            raise ValueError("no etcd endpoint given")
        self.endpoints = _addresses(self.urls)
        if any(url.strip().startswith("https://") for url in self.urls):
            self._ssl = self.access.ssl_context()

    async def aclose(self) -> None:
        """Close the kept connections (a watch closes its own when it ends)."""
        await self.connections.aclose()

    async def __aenter__(self) -> EtcdClient:
        return self

    async def __aexit__(
        self,
        kind: type[BaseException] | None,
        error: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        await self.aclose()

    async def check(self) -> None:
        """One authenticated read (at start, and with a user after each lease renewal):
        etcd reachable or not, but not refusing.

        Raises:
            EtcdRefused: etcd refused (credentials, certificates, TLS on one side).
        """
        try:
            await self.call(
                "/v3/kv/range", {**etcd_json.range_json(self.probe_key), "count_only": True}
            )
        except EtcdRefused:
            raise
        except EtcdUnavailable:
            return  # down for now: the broker waits for it, as without TLS or users

    async def call(
        self, path: str, request: etcd_json.Json, *, vouches: bool = True
    ) -> etcd_json.Json:
        """POST ``request`` to ``path`` on the first endpoint that answers, with a
        token when ``access`` names a user (a new one if etcd dropped the last).
        ``vouches``: a success shows etcd took the token (clears ``refused``).

        Raises:
            EtcdUnavailable: every endpoint failed;
            EtcdRefused: etcd refused the credentials or certificates.
            EtcdReplyError: etcd refused the request (a gRPC error).
        """
        body = orjson.dumps(request)
        try:
            token = await self._get_token()
            try:
                reply = await self._authorized(path, body, token)
            except EtcdReplyError as error:
                if not token or not _stale(str(error)):
                    raise
                self._drop(token)  # expired or outdated: once more with a new one
                reply = await self._authorized(path, body, await self._get_token())
        except EtcdReplyError as error:
            if any(word in str(error) for word in (*REFUSED, *STALE_TOKEN)):
                raise self._refusal(f"etcd refused {self._who()}: {error}") from None
            raise
        except EtcdRefused as error:
            self.refused = str(error)
            raise
        if vouches:
            self.refused = ""
        return reply

    def _refusal(self, reason: str) -> EtcdRefused:
        self.refused = reason
        return EtcdRefused(reason)

    def _who(self) -> str:
        if self.access.username:
            return f"user {self.access.username!r}"
        return "a client without user (--etcd-username, --etcd-password)"

    async def _authorized(self, path: str, body: bytes, token: str) -> etcd_json.Json:
        headers = _json_headers(token)
        return etcd_json.decode_reply(await self._post(path, body, headers))

    def _drop(self, token: str) -> None:
        """Forget ``token`` (unless another task has already replaced it)."""
        if self._token == token:
            self._token = ""

    async def _get_token(self) -> str:
        """The current token ("" without a user), or a new one from
        ``/v3/auth/authenticate``: one task asks while the others wait for it, and
        after a refusal nobody asks again for :data:`AUTHENTICATION_RETRY` (etcd
        spends a bcrypt on each: many brokers with an old password would load it)."""
        if not self.access.username:
            return ""
        async with self._authenticating:
            if not self._token:
                if trio.current_time() < self._retry_authentication_at:
                    raise EtcdReplyError(self._authentication_refused)
                request = {"name": self.access.username, "password": self.access.password}
                body = orjson.dumps(request)
                try:
                    reply = etcd_json.decode_reply(
                        await self._post("/v3/auth/authenticate", body, _json_headers())
                    )
                except EtcdReplyError as error:
                    self._authentication_refused = str(error)
                    self._retry_authentication_at = trio.current_time() + AUTHENTICATION_RETRY
                    raise
                token = reply.get("token")
                if not isinstance(token, str) or not token:
                    raise EtcdReplyError("authenticate answered no token")
                self._token = token
                self.authentications += 1
                if self.authentications > 1:
                    log.info("etcd: new token for user %r", self.access.username)
            return self._token

    async def _post(self, path: str, body: bytes, headers: list[tuple[str, str]]) -> bytes:
        """The body of the first endpoint's answer that is not "unavailable".

        Raises:
            EtcdUnavailable: every endpoint failed; EtcdRefused if one refused TLS.
        """
        failures: list[str] = []
        refusals: list[str] = []
        count = len(self.endpoints)
        for step in range(count):
            index = (self._current + step) % count
            address = self.endpoints[index]
            try:
                reply = await self.connections.request(
                    "POST",
                    address,
                    path,
                    body=body,
                    headers=headers,
                    request_timeout=self.timeout,
                    max_reply_bytes=64 << 20,
                    ssl_context=self._ssl,
                    idempotent=path in RETRY_SAFE,
                )
            except HttpClientError as error:
                failures.append(str(error))
                if error.tls:
                    refusals.append(f"{error}{_tls_hint(error.reason)}")
                elif self._ssl is None and error.reason.startswith(PLAIN_TO_TLS):
                    refusals.append(f"{address}: no HTTP answer: is etcd serving TLS? use https://")
                continue
            if reply.status == 503 or (reply.status >= 500 and b'"code":14' in reply.body):
                failures.append(f"{address}: unavailable ({reply.status})")
                continue
            self._current = index
            return reply.body
        if refusals:
            raise self._refusal("; ".join(refusals))
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

        etcd 3.4 renews a lease without looking at the token: when etcd refuses this
        client's user (its password changed), the renewal goes without one, so the
        broker keeps its lease and leaderships while ``refused`` says why.

        Raises:
            LeaseExpired: etcd no longer has it.
        """
        request: etcd_json.Json = {"ID": str(lease)}
        try:
            reply = await self.call("/v3/lease/keepalive", request, vouches=False)
        except EtcdRefused:
            if not self.access.username:
                raise
            body = await self._post("/v3/lease/keepalive", orjson.dumps(request), _json_headers())
            reply = etcd_json.decode_reply(body)
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
        caller see how long it has gone without one. With a user, each renewal is
        followed by :meth:`check`, so ``refused`` follows a password changed in etcd
        within a third of the TTL.

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
            if self.access.username:  # the renewal did not test the token: this does
                with contextlib.suppress(EtcdUnavailable, EtcdReplyError):
                    await self.check()
            await trio.sleep(ttl / 3)

    # ----------------------------------------------------------------- watch

    async def watch_prefix(
        self, prefix: bytes, start_revision: int, on_batch: Callable[[WatchBatch], None]
    ) -> None:
        """Hand every change under ``prefix`` from ``start_revision`` on to ``on_batch``
        until cancelled. etcd checks the token when the watch is created (a watch
        outlives its token): one refused as stale is created again with a new token.

        Raises:
            EtcdUnavailable: the stream broke or no endpoint took it (the caller
                reads the keys again and watches from there); EtcdRefused: etcd
                refused the credentials or certificates.
            EtcdReplyError: etcd cancelled the watch (compacted past the revision).
        """
        create: etcd_json.Json = etcd_json.range_json(prefix, prefix=True)
        if start_revision:
            create["start_revision"] = str(start_revision)
        body = orjson.dumps({"create_request": create})
        token = await self._refused_as_such(self._get_token())
        try:
            await self._watch(body, on_batch, token)
        except _StaleToken:
            self._drop(token)
            token = await self._refused_as_such(self._get_token())
            try:
                await self._watch(body, on_batch, token)
            except _StaleToken as error:
                raise self._refusal(f"etcd refused {self._who()}: {error}") from None

    async def _refused_as_such(self, getting: Awaitable[str]) -> str:
        """The token, with a refused password raised as :class:`EtcdRefused`."""
        try:
            return await getting
        except EtcdReplyError as error:
            if any(word in str(error) for word in REFUSED):
                raise self._refusal(f"etcd refused {self._who()}: {error}") from None
            raise

    async def _watch(self, body: bytes, on_batch: Callable[[WatchBatch], None], token: str) -> None:
        address = self.endpoints[self._current]
        headers = _json_headers(token)
        try:
            stream = await open_http_stream(address, self.timeout, self._ssl)
        except HttpClientError as error:
            raise EtcdUnavailable(f"watch: {error}") from None
        async with stream:
            try:
                await _watch_stream(stream, address, headers, body, on_batch)
            except EtcdRefused as error:
                raise self._refusal(str(error)) from None
            except (trio.BrokenResourceError, trio.ClosedResourceError, OSError) as error:
                failure = connection_failure(address, error)
                if failure.tls:
                    raise self._refusal(f"watch: {failure}") from None
                raise EtcdUnavailable(f"watch broke: {failure}") from None
            except h11.ProtocolError as error:
                raise EtcdUnavailable(f"{address}: bad watch reply: {error}") from None
        self._current = (self._current + 1) % len(self.endpoints)
        raise EtcdUnavailable(f"{address}: watch stream ended")


class _StaleToken(Exception):
    """The watch was refused for its token (expired, or users changed since)."""


def _json_headers(token: str = "") -> list[tuple[str, str]]:
    headers = [("Content-Type", "application/json")]
    if token:
        headers.append(("Authorization", token))
    return headers


def _tls_hint(reason: str) -> str:
    """Which flag a TLS failure points at."""
    if "CERTIFICATE_VERIFY_FAILED" in reason:
        return " (is --etcd-cacert the CA that signed etcd's certificate?)"
    if "CERTIFICATE" in reason:
        return " (etcd wants a client certificate it trusts: --etcd-cert, --etcd-key)"
    return ""


def _stale(reason: str) -> bool:
    return any(word in reason for word in STALE_TOKEN)


async def _watch_stream(
    stream: trio.abc.Stream,
    address: str,
    headers: list[tuple[str, str]],
    body: bytes,
    on_batch: Callable[[WatchBatch], None],
) -> None:
    """Send the watch request and hand on each newline-delimited message until EOF."""
    connection = h11.Connection(h11.CLIENT)
    headers = [("Host", split_host_port(address)[0]), *headers]
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
        if _stale(batch.cancel_reason):
            raise _StaleToken(batch.cancel_reason)
        if any(word in batch.cancel_reason for word in REFUSED):
            raise EtcdRefused(f"etcd refused the watch: {batch.cancel_reason}")
        raise EtcdReplyError(f"watch cancelled (compacted to {batch.compact_revision})")
    on_batch(batch)
