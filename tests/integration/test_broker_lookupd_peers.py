"""The broker's lookupd peers over real sockets (spec lookupd-tcp §5).

The lookupd here is a small but real V1 endpoint built on the sans-IO
:class:`LookupServerConnection`: it answers IDENTIFY with its own info and every
other command with ``OK`` (or, when a test asks, with an error, closing as
nsqlookupd does), and records what each connection sent and when. Time is Trio's
MockClock with autojump; its threshold stays above zero because bytes travel
through real sockets. The last test registers with trionsq's own lookupd.
"""

from __future__ import annotations

import itertools
import logging
import socket
from typing import TYPE_CHECKING, Final, Unpack

import attrs
import httpx
import trio
import trio.testing

from trionsq import NsqdConfig
from trionsq.lookupd.config import LookupdConfig
from trionsq.lookupd.server import LookupdAddresses, serve_lookupd
from trionsq.protocol import Pub
from trionsq.protocol.errors import ProtocolError
from trionsq.protocol.lookupd import (
    OK_REPLY,
    LookupCommand,
    LookupdInfo,
    LookupIdentify,
    LookupServerConnection,
    PeerInfo,
    Ping,
    Register,
    Unregister,
    encode_error_reply,
    encode_identify_reply,
)
from trionsq.server.lookupd_peers import PING_INTERVAL, PRECREATION_QUERIES_AT_ONCE
from trionsq.testing import wait_until
from trionsq.version import NSQD_RELEASE

from .raw import publish, start

if TYPE_CHECKING:
    from collections.abc import Callable
    from pathlib import Path

    import pytest

    from trionsq.config import NsqdOptions
    from trionsq.nursery_tree import BoundAddresses

    from .raw import Clients

GUARD: Final = 120.0
"""Longest virtual wait for what a test expects (several pings' worth)."""
LOOKUPD_INFO: Final = LookupdInfo(
    tcp_port=4160, http_port=4161, version="1.3.0", broadcast_address="lookupd.test", hostname="lk"
)

Registration = tuple[str, str | None]


def autojump(clock: trio.testing.MockClock) -> None:
    clock.autojump_threshold = 0.1  # real sockets: never jump while bytes are in flight


# ---------------------------------------------------------------------- the test lookupd


@attrs.define(eq=False)
class Session:
    """One broker connection as the lookupd saw it."""

    opened_at: float
    commands: list[tuple[float, LookupCommand]] = attrs.field(factory=list)
    registrations: set[Registration] = attrs.field(factory=set)
    """What nsqlookupd would hold for this connection (spec lookupd-tcp §2)."""
    closed: bool = False

    @property
    def identity(self) -> PeerInfo | None:
        for _, command in self.commands:
            if isinstance(command, LookupIdentify):
                return command.peer
        return None

    def sent(self, *, pings: bool = False) -> list[LookupCommand]:
        """The commands in order, PINGs left out unless asked for."""
        return [c for _, c in self.commands if pings or not isinstance(c, Ping)]

    def ping_times(self) -> list[float]:
        return [at for at, command in self.commands if isinstance(command, Ping)]

    def record(self, at: float, command: LookupCommand) -> None:
        self.commands.append((at, command))
        if isinstance(command, Register):
            self.registrations.add((command.topic, command.channel))
            self.registrations.add((command.topic, None))
        elif isinstance(command, Unregister):
            if command.channel is not None:
                self.registrations.discard((command.topic, command.channel))
            else:
                self.registrations = {r for r in self.registrations if r[0] != command.topic}


class RecordingLookupd:
    """A V1 lookupd on 127.0.0.1 that records every connection's commands."""

    def __init__(
        self,
        *,
        refuse: Callable[[LookupCommand], ProtocolError | None] | None = None,
        hang_up: int = 0,
        info: LookupdInfo = LOOKUPD_INFO,
    ) -> None:
        self.sessions: list[Session] = []
        self._info = info
        """What IDENTIFY answers: where brokers find this lookupd's HTTP API."""
        self.address = ""
        self._refuse = refuse
        self._hang_up = hang_up
        """Close this many connections at once, unread (a lookupd that is not ready)."""
        self._streams: list[trio.SocketStream] = []
        self._changed = trio.Event()

    async def serve(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        listeners = await trio.open_tcp_listeners(0, host="127.0.0.1")
        port = listeners[0].socket.getsockname()[1]
        self.address = f"127.0.0.1:{port}"
        task_status.started()
        await trio.serve_listeners(self._handle, listeners)

    async def _handle(self, stream: trio.SocketStream) -> None:
        session = Session(trio.current_time())
        self.sessions.append(session)
        self._streams.append(stream)
        self._changed_now()
        try:
            if self._hang_up > 0:
                self._hang_up -= 1
                return
            await self._converse(stream, session)
        except (trio.BrokenResourceError, trio.ClosedResourceError):
            pass
        finally:
            session.closed = True
            self._changed_now()
            await trio.aclose_forcefully(stream)

    async def _converse(self, stream: trio.SocketStream, session: Session) -> None:
        connection = LookupServerConnection()
        while True:
            data = await stream.receive_some()
            for event in connection.receive_data(data):
                if isinstance(event, ProtocolError):
                    await stream.send_all(encode_error_reply(event))
                    return
                session.record(trio.current_time(), event)
                self._changed_now()
                refusal = self._refuse(event) if self._refuse is not None else None
                if refusal is not None:
                    await stream.send_all(encode_error_reply(refusal))
                    return
                if isinstance(event, LookupIdentify):
                    await stream.send_all(encode_identify_reply(self._info))
                else:
                    await stream.send_all(OK_REPLY)
            if not data:
                return

    def _changed_now(self) -> None:
        self._changed.set()
        self._changed = trio.Event()

    async def until(self, predicate: Callable[[], object]) -> None:
        """Wait (virtual time, guarded) until ``predicate`` holds."""
        with trio.move_on_after(GUARD):
            while not predicate():
                await self._changed.wait()
            return
        sent = [session.sent(pings=True) for session in self.sessions]
        raise AssertionError(f"still waiting after {GUARD}s; each connection sent {sent}")

    async def session(self, index: int, *, registered: int = 0) -> Session:
        """The ``index``-th connection, once it has IDENTIFYed and sent ``registered``
        REGISTER/UNREGISTER commands."""
        await self.until(
            lambda: (
                len(self.sessions) > index
                and self.sessions[index].identity is not None
                and len(self.sessions[index].sent()) >= 1 + registered
            )
        )
        return self.sessions[index]

    async def ready(self, index: int) -> Session:
        """The ``index``-th connection once its first PING came: the peer is past its
        registrations then, so each later change is sent on its own (and not folded
        into the registrations, as a change made during them may be)."""
        session = await self.session(index)
        await self.until(pings(session, 1))
        return session

    async def close_connections(self) -> None:
        """Close every connection from the lookupd's side (a lookupd restart)."""
        for stream in self._streams:
            await trio.aclose_forcefully(stream)


def pings(session: Session, count: int) -> Callable[[], bool]:
    """A condition for :meth:`RecordingLookupd.until`: ``count`` PINGs came."""
    return lambda: len(session.ping_times()) >= count


async def start_lookupd(nursery: trio.Nursery, **options: object) -> RecordingLookupd:
    lookupd = RecordingLookupd(**options)  # type: ignore[arg-type]
    await nursery.start(lookupd.serve)
    return lookupd


def broker_config(*lookupds: RecordingLookupd | str, **changes: Unpack[NsqdOptions]) -> NsqdConfig:
    options: NsqdOptions = {
        "lookupd_tcp_addresses": [x if isinstance(x, str) else x.address for x in lookupds]
    }
    options.update(changes)
    return NsqdConfig.loopback(**options)


async def put_addresses(nsqd: BoundAddresses, *addresses: str) -> None:
    """``PUT /config/nsqlookupd_tcp_addresses`` over HTTP."""
    assert nsqd.http is not None
    host, port = nsqd.http
    body = "[" + ",".join(f'"{a}"' for a in addresses) + "]"
    async with httpx.AsyncClient(base_url=f"http://{host}:{port}") as http:
        answer = await http.put("/config/nsqlookupd_tcp_addresses", content=body)
    assert answer.status_code == 200, answer.text


def closed_port() -> str:
    """An address where nothing listens (connections are refused)."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return f"127.0.0.1:{sock.getsockname()[1]}"


# ---------------------------------------------------------------------- IDENTIFY


async def test_identify_sends_the_broadcast_address_and_ports(
    nursery: trio.Nursery, autojump_clock: trio.testing.MockClock
) -> None:
    autojump(autojump_clock)
    lookupd = await start_lookupd(nursery)
    config = broker_config(
        lookupd, broadcast_address="broker.test", broadcast_http_port=4999, topology_zone="z1"
    )
    nsqd = await start(nursery, config)
    session = await lookupd.session(0)
    assert session.identity == PeerInfo(
        version=NSQD_RELEASE,
        tcp_port=nsqd.tcp[1],  # broadcast_tcp_port 0: the bound port
        http_port=4999,
        hostname=socket.gethostname(),
        broadcast_address="broker.test",
        topology_zone="z1",
    )


async def test_identify_defaults_to_both_bound_ports(
    nursery: trio.Nursery, autojump_clock: trio.testing.MockClock
) -> None:
    autojump(autojump_clock)
    lookupd = await start_lookupd(nursery)
    nsqd = await start(nursery, broker_config(lookupd))
    identity = (await lookupd.session(0)).identity
    assert identity is not None
    assert nsqd.http is not None
    assert (identity.tcp_port, identity.http_port) == (nsqd.tcp[1], nsqd.http[1])
    assert identity.is_complete


# ---------------------------------------------------------------------- registrations


async def test_existing_topics_and_channels_are_registered_on_connect(
    nursery: trio.Nursery, autojump_clock: trio.testing.MockClock
) -> None:
    """nsqd's rule: a topic with channels is registered through its channels only."""
    autojump(autojump_clock)
    nsqd = await start(nursery, NsqdConfig.loopback())
    broker = nsqd.broker
    broker.topic("solo")
    await broker.create_channel("pair", "c1")
    await broker.create_channel("pair", "c2")
    broker.topic("parts", partitions=3)
    await broker.create_channel("parts", "pc")  # one channel, three partitions
    lookupd = await start_lookupd(nursery)
    await put_addresses(nsqd, lookupd.address)
    session = await lookupd.session(0, registered=4)
    await lookupd.until(pings(session, 1))
    assert session.sent()[1:] == [
        Register("solo"),
        Register("pair", "c1"),
        Register("pair", "c2"),
        Register("parts", "pc"),
    ]


async def test_recovered_topics_are_registered(
    nursery: trio.Nursery, tmp_path: Path, autojump_clock: trio.testing.MockClock
) -> None:
    autojump(autojump_clock)
    data = NsqdConfig.loopback(data_path=str(tmp_path))
    async with trio.open_nursery() as first:
        nsqd = await start(first, data)
        nsqd.broker.topic("kept")
        await nsqd.broker.create_channel("kept", "ch")
        nsqd.broker.topic("bare")
        first.cancel_scope.cancel()
    lookupd = await start_lookupd(nursery)
    await start(nursery, attrs.evolve(data, lookupd_tcp_addresses=(lookupd.address,)))
    session = await lookupd.session(0, registered=2)
    assert session.registrations == {("kept", "ch"), ("kept", None), ("bare", None)}


async def test_creations_and_deletions_are_streamed_in_order(
    nursery: trio.Nursery, autojump_clock: trio.testing.MockClock
) -> None:
    autojump(autojump_clock)
    lookupd = await start_lookupd(nursery)
    nsqd = await start(nursery, broker_config(lookupd))
    broker = nsqd.broker
    session = await lookupd.ready(0)
    broker.topic("t")
    broker.topic("t")  # exists: nothing sent
    await broker.create_channel("t", "c")
    broker.topic("p", partitions=2)
    await broker.create_channel("p", "x")  # both partitions: one REGISTER
    broker.delete_channel("p", 0, "x")  # still in partition 1: nothing
    broker.delete_channel("p", 1, "x")
    broker.delete_channel("t", 0, "c")
    await broker.create_channel("t", "d")
    assert broker.delete_topic("t")
    await lookupd.until(lambda: len(session.sent()) >= 10)
    await lookupd.until(pings(session, 2))
    assert session.sent()[1:] == [
        Register("t"),
        Register("t", "c"),
        Register("p"),
        Register("p", "x"),
        Unregister("p", "x"),
        Unregister("t", "c"),
        Register("t", "d"),
        Unregister("t", "d"),
        Unregister("t"),
    ]
    assert session.registrations == {("p", None)}


async def test_ephemeral_topics_and_channels_are_registered_too(
    nursery: trio.Nursery, clients: Clients, autojump_clock: trio.testing.MockClock
) -> None:
    autojump(autojump_clock)
    lookupd = await start_lookupd(nursery)
    nsqd = await start(nursery, broker_config(lookupd))
    session = await lookupd.ready(0)
    consumer = await clients.subscribe(nsqd.tcp, "e#ephemeral", "c#ephemeral")
    await lookupd.until(lambda: len(session.sent()) >= 3)
    assert session.registrations == {("e#ephemeral", "c#ephemeral"), ("e#ephemeral", None)}
    await consumer.aclose()  # last consumer gone: channel, then topic deleted
    await lookupd.until(lambda: len(session.sent()) >= 5)
    assert session.sent()[1:] == [
        Register("e#ephemeral"),
        Register("e#ephemeral", "c#ephemeral"),
        Unregister("e#ephemeral", "c#ephemeral"),
        Unregister("e#ephemeral"),
    ]


async def test_a_publish_registers_its_new_topic(
    nursery: trio.Nursery, clients: Clients, autojump_clock: trio.testing.MockClock
) -> None:
    autojump(autojump_clock)
    lookupd = await start_lookupd(nursery)
    nsqd = await start(nursery, broker_config(lookupd))
    session = await lookupd.ready(0)
    producer = await clients.connect(nsqd.tcp)
    await publish(producer, Pub("orders", b"1"), Pub("orders", b"2"))
    await lookupd.until(lambda: len(session.sent()) >= 2)
    await lookupd.until(pings(session, 2))
    assert session.sent()[1:] == [Register("orders")]


# ---------------------------------------------------------------------- liveness


async def test_ping_every_interval(
    nursery: trio.Nursery, autojump_clock: trio.testing.MockClock
) -> None:
    autojump(autojump_clock)
    lookupd = await start_lookupd(nursery)
    await start(nursery, broker_config(lookupd))
    session = await lookupd.session(0)
    await lookupd.until(pings(session, 4))
    connected_at = session.commands[0][0]
    times = [connected_at, *session.ping_times()]
    gaps = [later - earlier for earlier, later in itertools.pairwise(times)]
    assert all(abs(gap - PING_INTERVAL) < 0.5 for gap in gaps), gaps
    assert len(lookupd.sessions) == 1


async def test_reconnects_after_the_lookupd_closes_and_registers_everything_again(
    nursery: trio.Nursery, autojump_clock: trio.testing.MockClock
) -> None:
    autojump(autojump_clock)
    lookupd = await start_lookupd(nursery)
    nsqd = await start(nursery, broker_config(lookupd))
    broker = nsqd.broker
    await broker.create_channel("a", "x")
    broker.topic("b")
    first = await lookupd.session(0, registered=2)
    await lookupd.close_connections()
    await lookupd.until(lambda: first.closed)
    closed_at = trio.current_time()
    broker.topic("while-away")  # not queued: the next snapshot includes it
    second = await lookupd.session(1, registered=3)
    assert 0.9 < second.opened_at - closed_at < 1.5  # the first backoff, 1 s
    await lookupd.until(pings(second, 1))
    assert second.identity == first.identity
    assert second.sent()[1:] == [Register("a", "x"), Register("b"), Register("while-away")]
    broker.delete_topic("b")
    await lookupd.until(lambda: len(second.sent()) >= 5)
    assert second.registrations == {("a", "x"), ("a", None), ("while-away", None)}


async def test_backoff_doubles_up_to_its_cap_and_resets_after_a_connection(
    nursery: trio.Nursery, autojump_clock: trio.testing.MockClock
) -> None:
    autojump(autojump_clock)
    lookupd = await start_lookupd(nursery, hang_up=7)
    nsqd = await start(nursery, broker_config(lookupd))
    nsqd.broker.topic("t")
    served = await lookupd.session(7, registered=1)
    opened = [s.opened_at for s in lookupd.sessions[:8]]
    gaps = [later - earlier for earlier, later in itertools.pairwise(opened)]
    expected = [1.0, 2.0, 4.0, 8.0, 15.0, 15.0, 15.0]
    assert all(abs(gap - want) < 0.5 for gap, want in zip(gaps, expected, strict=True)), gaps
    assert served.registrations == {("t", None)}
    await lookupd.close_connections()
    await lookupd.until(lambda: served.closed)
    closed_at = trio.current_time()
    again = await lookupd.session(8, registered=1)
    assert again.opened_at - closed_at < 1.5  # back to the first delay


async def test_an_error_reply_is_logged_and_the_peer_reconnects(
    nursery: trio.Nursery, caplog: pytest.LogCaptureFixture, autojump_clock: trio.testing.MockClock
) -> None:
    autojump(autojump_clock)
    refused: list[LookupCommand] = []

    def refuse_once(command: LookupCommand) -> ProtocolError | None:
        if command == Register("t", "c") and not refused:
            refused.append(command)
            return ProtocolError("E_BAD_CHANNEL", "REGISTER channel name 'c' is not valid")
        return None

    lookupd = await start_lookupd(nursery, refuse=refuse_once)
    nsqd = await start(nursery, broker_config(lookupd))
    await lookupd.session(0)
    with caplog.at_level(logging.INFO, logger="trionsq.lookupd_peers"):
        await nsqd.broker.create_channel("t", "c")
        again = await lookupd.session(1, registered=1)
    assert again.registrations == {("t", "c"), ("t", None)}
    errors = [r.getMessage() for r in caplog.records if r.levelno == logging.ERROR]
    assert any(
        "REGISTER refused: E_BAD_CHANNEL REGISTER channel name 'c' is not valid" in e
        for e in errors
    ), errors
    infos = [r.getMessage() for r in caplog.records if r.levelno == logging.INFO]
    assert any("disconnected" in m for m in infos), infos
    assert any("connected; the lookupd says" in m for m in infos), infos


# ---------------------------------------------------------------------- several lookupds


async def test_two_lookupds_both_receive_everything(
    nursery: trio.Nursery, autojump_clock: trio.testing.MockClock
) -> None:
    autojump(autojump_clock)
    one = await start_lookupd(nursery)
    two = await start_lookupd(nursery)
    nsqd = await start(nursery, broker_config(one, two, one.address))  # a duplicate too
    first, second = await one.ready(0), await two.ready(0)
    await nsqd.broker.create_channel("t", "c")
    nsqd.broker.delete_channel("t", 0, "c")
    for lookupd, session in ((one, first), (two, second)):
        await lookupd.until(pings(session, 2))
        assert session.sent()[1:] == [Register("t"), Register("t", "c"), Unregister("t", "c")]
    assert (len(one.sessions), len(two.sessions)) == (1, 1)


async def test_address_list_changes_at_runtime(
    nursery: trio.Nursery, autojump_clock: trio.testing.MockClock
) -> None:
    autojump(autojump_clock)
    one = await start_lookupd(nursery)
    two = await start_lookupd(nursery)
    nsqd = await start(nursery, broker_config(one))
    nsqd.broker.topic("early")
    first = await one.session(0, registered=1)
    await put_addresses(nsqd, one.address, two.address)
    added = await two.session(0, registered=1)
    assert added.sent()[1:] == [Register("early")]
    await put_addresses(nsqd, two.address)  # removes the first: its connection closes
    await one.until(lambda: first.closed)
    nsqd.broker.topic("late")
    await two.until(lambda: len(added.sent()) >= 3)
    await two.until(pings(added, 1))
    assert added.sent()[1:] == [Register("early"), Register("late")]
    assert len(one.sessions) == 1
    assert Register("late") not in first.sent()
    await put_addresses(nsqd)  # none at all
    await two.until(lambda: added.closed)
    assert len(two.sessions) == 1


# ---------------------------------------------------------------------- unreachable lookupds


async def test_an_unreachable_lookupd_delays_neither_startup_nor_clients(
    nursery: trio.Nursery, clients: Clients, autojump_clock: trio.testing.MockClock
) -> None:
    autojump(autojump_clock)
    silent = (await trio.open_tcp_listeners(0, host="127.0.0.1"))[0]  # accepts, never answers
    silent_address = f"127.0.0.1:{silent.socket.getsockname()[1]}"
    working = await start_lookupd(nursery)
    config = broker_config(closed_port(), silent_address, "not an address", working)
    before = trio.current_time()
    nsqd = await start(nursery, config)
    assert trio.current_time() - before < 0.5
    producer = await clients.connect(nsqd.tcp)
    before = trio.current_time()
    await publish(producer, Pub("t", b"body"))
    assert trio.current_time() - before < 0.5
    session = await working.session(0, registered=1)
    assert session.sent()[1:] == [Register("t")]
    await silent.aclose()


# ---------------------------------------------------------------------- with trionsq's lookupd


async def test_a_broker_appears_in_the_lookup_answer_of_trionsq_lookupd(
    nursery: trio.Nursery, autojump_clock: trio.testing.MockClock
) -> None:
    autojump(autojump_clock)
    lookupd: LookupdAddresses = await nursery.start(serve_lookupd, LookupdConfig.loopback())
    tcp_address = f"{lookupd.tcp[0]}:{lookupd.tcp[1]}"
    async with trio.open_nursery() as broker_nursery:
        config = broker_config(tcp_address, broadcast_address="broker.test")
        nsqd = await start(broker_nursery, config)
        await nsqd.broker.create_channel("t", "c")
        await trio.sleep(PING_INTERVAL + 1)  # virtual: registered, and pinged once
        answer = await lookup(lookupd, "t")
        assert nsqd.http is not None
        assert answer.status_code == 200, answer.text
        document = answer.json()
        assert document["channels"] == ["c"]
        assert [
            (p["broadcast_address"], p["tcp_port"], p["http_port"], p["version"])
            for p in document["producers"]
        ] == [("broker.test", nsqd.tcp[1], nsqd.http[1], NSQD_RELEASE)]
        broker_nursery.cancel_scope.cancel()
    await trio.sleep(1)  # virtual: the lookupd sees the connection close
    answer = await lookup(lookupd, "t")
    assert answer.json()["producers"] == []  # nsqd does not unregister; the close does


async def lookup(lookupd: LookupdAddresses, topic: str) -> httpx.Response:
    host, port = lookupd.http
    async with httpx.AsyncClient(base_url=f"http://{host}:{port}") as http:
        return await http.get("/lookup", params={"topic": topic})


# ---------------------------------------------------------------------- channel pre-creation


class SilentHttp:
    """An HTTP server that reads requests and never answers (a stuck lookupd), and
    counts its connections: open now, the most at once, all so far."""

    def __init__(self) -> None:
        self.port = 0
        self.open = self.peak = self.accepted = 0

    async def serve(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        listeners = await trio.open_tcp_listeners(0, host="127.0.0.1")
        self.port = listeners[0].socket.getsockname()[1]
        task_status.started()
        await trio.serve_listeners(self._handle, listeners)

    async def _handle(self, stream: trio.SocketStream) -> None:
        self.open += 1
        self.accepted += 1
        self.peak = max(self.peak, self.open)
        try:
            while await stream.receive_some():
                pass  # until the broker gives up and closes
        except trio.BrokenResourceError:
            pass
        finally:
            self.open -= 1
            await trio.aclose_forcefully(stream)


async def test_pre_creation_asks_lookupds_a_bounded_number_of_queries_at_once(
    nursery: trio.Nursery, clients: Clients, autojump_clock: trio.testing.MockClock
) -> None:
    """Each new topic asks every lookupd for its channels over HTTP: a burst of new
    topics must not open a socket each at once (the descriptor budget reserves
    PRECREATION_QUERIES_AT_ONCE of them), yet every topic is asked in the end."""
    autojump(autojump_clock)
    stuck = SilentHttp()
    await nursery.start(stuck.serve)
    info = attrs.evolve(LOOKUPD_INFO, broadcast_address="127.0.0.1", http_port=stuck.port)
    lookupd = await start_lookupd(nursery, info=info)
    nsqd = await start(nursery, broker_config(lookupd))
    await lookupd.ready(0)
    producer = await clients.connect(nsqd.tcp)
    topics = 3 * PRECREATION_QUERIES_AT_ONCE
    await publish(producer, *(Pub(f"t{n}", b"m") for n in range(topics)))
    await wait_until(lambda: stuck.accepted >= topics, "every new topic asked", within=GUARD)
    assert stuck.peak == PRECREATION_QUERIES_AT_ONCE
