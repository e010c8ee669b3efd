"""nsqd's side of nsqlookupd: keep every configured lookupd told what this broker has.

One :class:`LookupdPeer` task per ``--lookupd-tcp-address`` (spec lookupd-tcp §5),
all children of the ``lookupd peers`` nursery that :class:`LookupdPeers` opens. A
peer connects, sends the V1 magic, IDENTIFYs with the broker's :class:`PeerInfo`,
REGISTERs every topic and channel that exists, then sends, in order, the changes
the broker announces (:class:`~.topology.TopologyChange`), and a PING every
:data:`PING_INTERVAL`. Every command waits for its reply under nsqd's 1 s deadlines.

Which form (issue 38): a lookupd that knows partitions gets Youzan's nsqd's
registrations, ``REGISTER <topic> <partition>`` for every partition and ``REGISTER
<topic> <partition> <channel>`` for every channel of each; any other gets nsqd 1.3's
``REGISTER <topic> [<channel>]``, once per name (nsqlookupd 1.3 would read
``REGISTER t 1`` as channel "1"). Youzan's lookupd names itself in its IDENTIFY
answer (a version with ``HA``); trionsq's answers IDENTIFY exactly as nsqlookupd
1.3, so the peer asks its ``/info`` (``trionsq_version``) at the address nsqd's
channel pre-creation uses; no answer means nsqd 1.3's form (:func:`knows_partitions`).

Any failure (refused dial, deadline, an ``E_...`` reply, the lookupd closing) ends
the connection; the peer reconnects after a capped exponential backoff and registers
everything again, which is also why changes are queued only while connected: the
snapshot taken after IDENTIFY covers whatever happened in between. nsqd itself
reconnects only when its next command (at worst the 15 s PING) finds the connection
gone; a reader task here notices a close at once.

``PUT /config/nsqlookupd_tcp_addresses`` reaches :meth:`LookupdPeers.set_addresses`:
removed peers are cancelled (their connection closes, so the lookupd drops their
registrations) and new ones started. As nsqd, nothing is UNREGISTERed on shutdown.

Channel pre-creation (spec semantics §2): when the broker creates a topic, every
connected lookupd is asked ``GET /channels?topic=`` over HTTP (its broadcast address
and HTTP port from IDENTIFY) and the channels it names, ``#ephemeral`` ones aside,
are created, so messages published before any consumer connects here reach channels
that exist elsewhere in the cluster. nsqd does this before the topic's pump starts,
blocking the publisher; here it runs in the peers' nursery and the publish goes on:
the new topic holds what is published meanwhile (it has no channel yet), and the
channels are created together with the topic held paused for that instant, so each
of them starts at the oldest held message, as each would get it from nsqd's pump.
"""

from __future__ import annotations

import logging
import math
import socket
from collections import deque
from typing import TYPE_CHECKING, Final
from urllib.parse import quote

import attrs
import orjson
import trio

from ..addresses import join_host_port
from ..config import split_host_port
from ..http.client import HttpClientError, http_get
from ..protocol.errors import ProtocolError
from ..protocol.lookupd import (
    DEFAULT_MAX_REPLY_SIZE,
    MAGIC_V1,
    LookupClientConnection,
    LookupCommand,
    LookupdInfo,
    LookupIdentify,
    PeerInfo,
    Ping,
    Register,
    Unregister,
    decode_identify_reply,
    encode_lookup_command,
    reply_error,
)
from ..protocol.names import is_ephemeral

if TYPE_CHECKING:
    from collections.abc import Iterable

    from ..broker.broker import Broker
    from ..broker.topic import Topic
    from ..broker.topology import TopologyChange
    from ..config import NsqdConfig

__all__ = [
    "PING_INTERVAL",
    "LookupdAnswerError",
    "LookupdPeer",
    "LookupdPeers",
    "PeerTiming",
    "change_commands",
    "knows_partitions",
    "lookupd_json",
    "lookupd_topic_channels",
    "peer_identity",
]

log = logging.getLogger("trionsq.lookupd_peers")

PING_INTERVAL: Final = 15.0
"""nsqd pings every lookupd every 15 s (fixed upstream)."""


@attrs.frozen
class PeerTiming:
    """The peer's clocks, nsqd's values by default; tests and embedders may shorten them."""

    ping_interval: float = PING_INTERVAL
    dial_timeout: float = 1.0
    """nsqd dials a lookupd with a 1 s timeout."""
    io_timeout: float = 1.0
    """nsqd's read and write deadline for each command and its reply."""
    backoff_initial: float = 1.0
    """First wait before reconnecting; doubles with each failure in a row."""
    backoff_max: float = PING_INTERVAL
    """The longest wait: nsqd's own worst case, reconnecting at the next PING."""


def peer_identity(config: NsqdConfig, version: str, tcp_port: int, http_port: int) -> PeerInfo:
    """The IDENTIFY body: broadcast address and ports, the bound ports by default.

    ``http_port`` 0 (HTTP disabled) makes a lookupd refuse IDENTIFY (``missing
    fields``); nsqd cannot run without HTTP, so there is nothing better to send.
    """
    return PeerInfo(
        version=version,
        tcp_port=config.broadcast_tcp_port or tcp_port,
        http_port=config.broadcast_http_port or http_port,
        hostname=socket.gethostname(),
        broadcast_address=config.broadcast_address,
        topology_zone=config.topology_zone,
        topology_region=config.topology_region,
    )


def knows_partitions(reply: LookupdInfo, info: object) -> bool:
    """Whether a lookupd reads Youzan's ``REGISTER <topic> <partition>``: its IDENTIFY
    ``reply`` names Youzan's HA version, or its ``/info`` document (None when it gave
    none) is trionsq's (``trionsq_version``) or Youzan's (``ha_support``)."""
    if "HA" in reply.version:  # Youzan's nsqlookupd tells an HA nsqd apart the same way
        return True
    return isinstance(info, dict) and ("trionsq_version" in info or "ha_support" in info)


def change_commands(change: TopologyChange, partitioned: bool) -> list[Register | Unregister]:
    """What a lookupd is told of one change: a command per partition in Youzan's form
    (``partitioned``), else nsqd's one command when the name itself came or went."""
    command = Register if change.exists else Unregister
    if partitioned:
        return [command(change.topic, change.channel, pid) for pid in change.partitions]
    return [command(change.topic, change.channel)] if change.whole else []


class _PeerFailure(Exception):
    """The connection to a lookupd cannot go on (closed, refused, bad reply)."""


_FAILURES: Final = (
    _PeerFailure,
    OSError,
    ProtocolError,
    trio.BrokenResourceError,
    trio.ClosedResourceError,
    trio.TooSlowError,
)


def _leaves(error: BaseException) -> list[BaseException]:
    if isinstance(error, BaseExceptionGroup):
        return [leaf for inner in error.exceptions for leaf in _leaves(inner)]
    return [error]


def _describe(error: BaseException) -> str:
    if isinstance(error, trio.TooSlowError):
        return "no answer within the deadline"
    return str(error) or type(error).__name__


class LookupdPeer:
    """One lookupd address: its connection, reconnection and queued changes."""

    def __init__(
        self,
        address: str,
        broker: Broker,
        identity: PeerInfo,
        *,
        timing: PeerTiming,
        max_reply_size: int = DEFAULT_MAX_REPLY_SIZE,
    ) -> None:
        self.address: Final = address
        self.cancel_scope: Final = trio.CancelScope()
        """Cancelled when the address is removed (or the broker stops)."""
        self.info: LookupdInfo | None = None
        """The lookupd's own addresses from its IDENTIFY answer, while connected."""
        self.partitioned = False
        """The connection registers in Youzan's form (:func:`knows_partitions`)."""
        self.connections = 0
        """Connections that got through IDENTIFY (tests and logs)."""
        self._broker = broker
        self._identity = identity
        self._timing = timing
        self._max_reply_size = max_reply_size
        self._queue: deque[Register | Unregister] = deque()
        """Commands to send, in order (queued by :meth:`enqueue`)."""
        self._queueing = False
        """True from the registration snapshot until the connection ends."""
        self._wake = trio.Event()
        self._awaiting_reply = False

    def __repr__(self) -> str:
        return f"<LookupdPeer {self.address}>"

    def enqueue(self, change: TopologyChange) -> None:
        """Send what tells of ``change`` after what is queued; dropped while not
        connected, since the registrations sent on the next connect include it."""
        if self._queueing:
            commands = change_commands(change, self.partitioned)
            if commands:
                self._queue.extend(commands)
                self._wake.set()

    async def run(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        """Connect, register, stream changes and ping; reconnect with backoff on failure."""
        with self.cancel_scope:
            task_status.started()
            try:
                host, port = split_host_port(self.address)
            except ValueError as error:
                log.error("lookupd %s: not an address (%s); this peer stays idle", self, error)
                await trio.sleep_forever()
            failures = 0
            while True:
                connections = self.connections
                try:
                    await self._connection(host, port)
                except* _FAILURES as group:
                    reason = "; ".join(_describe(leaf) for leaf in _leaves(group))
                except* Exception as group:  # a bug here must not take the broker down
                    log.exception("lookupd %s: peer failed", self, exc_info=group)
                    reason = "internal error"
                else:  # pragma: no cover - _connection returns only by raising
                    reason = "connection ended"
                finally:
                    self._queueing = False
                    self._queue.clear()
                    self.info = None
                    self.partitioned = False
                if self.connections > connections:
                    failures = 0
                delay = min(self._timing.backoff_initial * 2.0**failures, self._timing.backoff_max)
                failures += 1
                if self.connections > connections:
                    log.info(
                        "lookupd %s: disconnected (%s); reconnecting in %.1fs", self, reason, delay
                    )
                else:
                    log.warning(
                        "lookupd %s: cannot connect (%s); next attempt in %.1fs",
                        self,
                        reason,
                        delay,
                    )
                await trio.sleep(delay)

    async def _connection(self, host: str, port: int) -> None:
        """One connection, from dial to failure (it never ends otherwise)."""
        with trio.fail_after(self._timing.dial_timeout):
            stream = await trio.open_tcp_stream(host, port)
        async with stream:
            send, receive = trio.open_memory_channel[bytes](1)
            async with trio.open_nursery() as nursery:  # lookupd peer reader
                nursery.start_soon(self._read_replies, stream, send)
                await self._converse(stream, receive)

    async def _read_replies(
        self, stream: trio.SocketStream, replies: trio.MemorySendChannel[bytes]
    ) -> None:
        """Split replies off the stream; a close or an unasked-for reply is a failure."""
        parser = LookupClientConnection(self._max_reply_size)
        while True:
            data = await stream.receive_some()
            for reply in parser.receive_data(data):
                if not self._awaiting_reply:
                    raise _PeerFailure(f"reply to no command: {bytes(reply[:64])!r}")
                self._awaiting_reply = False
                replies.send_nowait(reply)
            if not data:
                raise _PeerFailure("closed by the lookupd")

    async def _converse(
        self, stream: trio.SocketStream, replies: trio.MemoryReceiveChannel[bytes]
    ) -> None:
        """IDENTIFY, register everything, then changes and pings, forever."""
        with trio.fail_after(self._timing.io_timeout):
            await stream.send_all(MAGIC_V1)
        answer = await self._command(stream, replies, LookupIdentify(self._identity))
        next_ping = trio.current_time() + self._timing.ping_interval
        self.info = info = decode_identify_reply(answer)
        self.partitioned = knows_partitions(info, await self._ask_info(info))
        self.connections += 1
        form = "each partition (Youzan's form)" if self.partitioned else "nsqd 1.3's form"
        log.info("lookupd %s: connected; the lookupd says %s; registering %s", self, info, form)
        # snapshot and start queueing with no await in between: nothing is missed
        self._queue.clear()
        self._queueing = True
        for command in self._registrations():
            await self._command(stream, replies, command)
        while True:
            while self._queue:
                await self._command(stream, replies, self._queue.popleft())
            self._wake = trio.Event()
            with trio.move_on_at(next_ping):
                await self._wake.wait()
            if trio.current_time() >= next_ping:
                await self._command(stream, replies, Ping())
                next_ping = trio.current_time() + self._timing.ping_interval

    async def _ask_info(self, info: LookupdInfo) -> object:
        """The lookupd's ``/info`` document, or None when it gives none in time."""
        if not info.broadcast_address or not info.http_port:
            return None
        address = join_host_port(info.broadcast_address, info.http_port)
        config = self._broker.config
        try:
            return await lookupd_json(
                address,
                "/info",
                connect_timeout=config.http_client_connect_timeout,
                request_timeout=config.http_client_request_timeout,
            )
        except LookupdAnswerError as error:
            log.info("lookupd %s: no /info from %s (%s): nsqd 1.3's form", self, address, error)
            return None

    def _registrations(self) -> list[Register]:
        """Everything the broker has, in this connection's form."""
        if self.partitioned:
            return [Register(t, c, p) for t, p, c in self._broker.partition_registrations()]
        return [Register(t, c) for t, c in self._broker.registrations()]

    async def _command(
        self,
        stream: trio.SocketStream,
        replies: trio.MemoryReceiveChannel[bytes],
        command: LookupCommand,
    ) -> bytes:
        """Send one command and wait for its reply (1 s each way); an error ends it."""
        try:
            data = encode_lookup_command(command)
        except ValueError as error:  # a name no lookupd accepts: skip it, keep going
            log.error("lookupd %s: not sent, %s", self, error)
            return b""
        if not isinstance(command, Ping | LookupIdentify):
            log.info("lookupd %s: %s", self, data.rstrip(b"\n").decode("utf-8", "replace"))
        else:
            log.debug("lookupd %s: %s", self, data.split(b"\n", 1)[0].decode())
        self._awaiting_reply = True
        with trio.fail_after(self._timing.io_timeout):
            await stream.send_all(data)
        with trio.fail_after(self._timing.io_timeout):
            answer = await replies.receive()
        refusal = reply_error(answer)
        if refusal is not None:
            verb = data.split(b"\n", 1)[0].split(b" ", 1)[0].decode()
            log.error("lookupd %s: %s refused: %s", self, verb, refusal)
            raise _PeerFailure(f"{verb} refused: {refusal}")
        return answer


PRECREATION_QUERIES_AT_ONCE: Final = 16
"""HTTP queries to lookupds for new topics' channels in flight at once: a burst of
new topics waits its turn instead of opening a socket each (the broker's
descriptor budget reserves this many)."""
V1_ACCEPT: Final = ("Accept", "application/vnd.nsq; version=1.0")
"""What nsqd's HTTP client asks for: the bare JSON object, no status envelope."""


class LookupdAnswerError(Exception):
    """A lookupd gave no usable JSON answer (the text says which and why)."""


async def lookupd_json(
    address: str, target: str, *, connect_timeout: float, request_timeout: float
) -> object:
    """GET ``target`` from a lookupd's HTTP API: the JSON document of a 200 answer,
    without a pre-1.0 ``{"data": ...}`` envelope.

    Raises:
        LookupdAnswerError: no answer, another status, or not JSON.
    """
    try:
        reply = await http_get(
            address,
            target,
            headers=[V1_ACCEPT],
            connect_timeout=connect_timeout,
            request_timeout=request_timeout,
        )
    except HttpClientError as error:
        raise LookupdAnswerError(str(error)) from None
    if reply.status != 200:
        raise LookupdAnswerError(f"{address}: status {reply.status}")
    try:
        document: object = orjson.loads(reply.body)
    except orjson.JSONDecodeError:
        raise LookupdAnswerError(f"{address}: not JSON: {reply.body[:100]!r}") from None
    if isinstance(document, dict) and "data" in document:  # a pre-1.0 envelope
        return document["data"]
    return document


async def lookupd_topic_channels(
    topic: str,
    http_addresses: Iterable[str],
    *,
    connect_timeout: float,
    request_timeout: float,
    limiter: trio.CapacityLimiter | None = None,
) -> tuple[list[str], list[str]]:
    """Ask every lookupd at once for the topic's channels (nsqd's
    ``GetLookupdTopicChannels``): the sorted union and one reason per lookupd that
    gave no usable answer. A lookupd that does not know the topic answers ``[]``.
    ``limiter``: a token per query in flight (shared by all topics)."""
    found: set[str] = set()
    failures: list[str] = []
    target = f"/channels?topic={quote(topic, safe='')}"
    queries = limiter if limiter is not None else trio.CapacityLimiter(math.inf)

    async def ask(address: str) -> None:
        try:
            async with queries:
                document = await lookupd_json(
                    address,
                    target,
                    connect_timeout=connect_timeout,
                    request_timeout=request_timeout,
                )
        except LookupdAnswerError as error:
            failures.append(str(error))
            return
        channels = document.get("channels") if isinstance(document, dict) else None
        if not isinstance(channels, list):
            failures.append(f"{address}: not a /channels reply")
            return
        found.update(name for name in channels if isinstance(name, str))

    async with trio.open_nursery() as nursery:
        for address in dict.fromkeys(http_addresses):
            nursery.start_soon(ask, address)
    return sorted(found), failures


class LookupdPeers:
    """Every lookupd peer of one broker, following the configured address list."""

    def __init__(
        self,
        broker: Broker,
        identity: PeerInfo,
        addresses: Iterable[str] = (),
        *,
        timing: PeerTiming | None = None,
        max_reply_size: int = DEFAULT_MAX_REPLY_SIZE,
    ) -> None:
        self.identity: Final = identity
        """What each peer IDENTIFYs with."""
        self.peers: dict[str, LookupdPeer] = {}
        """Running peers by address, in the configured order."""
        self._broker = broker
        self._timing = timing or PeerTiming()
        self._max_reply_size = max_reply_size
        self._addresses = tuple(addresses)
        self._nursery: trio.Nursery | None = None
        self._queries = trio.CapacityLimiter(PRECREATION_QUERIES_AT_ONCE)

    @property
    def addresses(self) -> tuple[str, ...]:
        """The address list as last set (duplicates and all)."""
        return self._addresses

    def http_addresses(self) -> list[str]:
        """``host:port`` of every connected lookupd's HTTP API, from its IDENTIFY answer
        (what nsqd asks for a new topic's channels)."""
        return [
            join_host_port(peer.info.broadcast_address, peer.info.http_port)
            for peer in self.peers.values()
            if peer.info is not None and peer.info.broadcast_address
        ]

    def page_names(self) -> list[tuple[str, str, str, int]]:
        """What each connected lookupd's admin page may be opened as: (the address
        configured here, its broadcast address, its hostname, its HTTP port)."""
        return [
            (peer.address, peer.info.broadcast_address, peer.info.hostname, peer.info.http_port)
            for peer in self.peers.values()
            if peer.info is not None
        ]

    async def run(
        self, *, task_status: trio.TaskStatus[LookupdPeers] = trio.TASK_STATUS_IGNORED
    ) -> None:
        """The ``lookupd peers`` nursery: started at once, peers connect in the background."""
        async with trio.open_nursery() as nursery:
            self._nursery = nursery
            self._broker.add_listener(self._changed)
            try:
                self._sync()
                task_status.started(self)
                await trio.sleep_forever()
            finally:
                self._broker.remove_listener(self._changed)
                self._nursery = None
                self.peers.clear()

    def set_addresses(self, addresses: Iterable[str]) -> None:
        """A new address list (``PUT /config/nsqlookupd_tcp_addresses``): stop the peers
        of removed addresses, start peers for new ones, keep the others connected."""
        self._addresses = tuple(addresses)
        if self._nursery is not None:
            self._sync()

    def _sync(self) -> None:
        nursery = self._nursery
        assert nursery is not None  # noqa: S101 - only called while running
        wanted = dict.fromkeys(address for address in self._addresses if address)
        for address in [address for address in self.peers if address not in wanted]:
            log.info("lookupd %s: removing peer", address)
            self.peers.pop(address).cancel_scope.cancel()
        for address in wanted:
            if address not in self.peers:
                log.info("lookupd %s: adding peer", address)
                peer = LookupdPeer(
                    address,
                    self._broker,
                    self.identity,
                    timing=self._timing,
                    max_reply_size=self._max_reply_size,
                )
                self.peers[address] = peer
                nursery.start_soon(peer.run, name=f"lookupd peer {address}")

    def _changed(self, change: TopologyChange) -> None:
        """The broker's listener: queue the change on every peer (no await here);
        a new topic also gets its channels pre-created, in the background."""
        if change.whole and change.channel is None and change.exists and self._nursery is not None:
            topic = self._broker.topics.get(change.topic)
            if topic is not None:
                self._nursery.start_soon(
                    self.precreate_channels, topic, name=f"pre-create channels {topic.name}"
                )
        for peer in self.peers.values():
            peer.enqueue(change)

    async def precreate_channels(self, topic: Topic) -> list[str]:
        """Create the channels the lookupds know for a topic this broker just created;
        returns the names created (spec semantics §2).

        A topic deleted (or deleted and created again) meanwhile is left alone. Only
        channels that do not exist yet are created, together, so that each starts at
        the oldest message the topic holds (when it had no channel yet).
        """
        name = topic.name
        addresses = self.http_addresses()
        if not addresses:
            if any(self._addresses):
                log.error(
                    "no available nsqlookupd to query for channels to pre-create for topic %s",
                    name,
                )
            return []
        config = self._broker.config
        channels, failures = await lookupd_topic_channels(
            name,
            addresses,
            connect_timeout=config.http_client_connect_timeout,
            request_timeout=config.http_client_request_timeout,
            limiter=self._queries,
        )
        if failures:
            log.warning(
                "failed to query nsqlookupd for channels to pre-create for topic %s - %s",
                name,
                "; ".join(failures),
            )
        if self._broker.topics.get(name) is not topic:
            return []
        missing = [
            channel
            for channel in channels
            if not is_ephemeral(channel)
            and not any(channel in p.channels for p in topic.partitions)
        ]
        if not missing:
            return []
        await self._broker.create_first_channels(name, missing)
        log.info("TOPIC(%s): pre-created channels from nsqlookupd: %s", name, ", ".join(missing))
        return missing
