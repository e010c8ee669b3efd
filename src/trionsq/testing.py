"""pytest fixtures for testing code that uses NSQ, against a real in-process trionsq.

Registered through the ``pytest11`` entry point, so installing trionsq makes them
available:

- ``nsqd_config``: the :class:`NsqdConfig` the brokers below use (override it in your
  conftest.py); by default 127.0.0.1, port 0.
- ``nsqd`` (Trio tests, pytest-trio): a broker started for the test in the test's
  nursery; the value is its :class:`BoundAddresses`. Works with ``autojump_clock``:
  its wall clock follows Trio's (:class:`FollowingWallClock`).
- ``nsqd_client`` (Trio tests): a :class:`ProtocolClient` connected to ``nsqd``.
- ``client`` (Trio tests): a :class:`ClientKit`: a :mod:`trionsq.client` producer
  connected to ``nsqd``, consumers on demand, and ``publish``/``take`` shortcuts.
- ``nsqd_thread`` (any test, no Trio needed): a broker running in a background thread,
  for pynsq/gnsq/ansq suites; the value is its :class:`BoundAddresses`.
- ``lookupd_config``: the :class:`LookupdConfig` the lookupds below use (override it);
  by default 127.0.0.1, free ports.
- ``lookupd`` (Trio tests): a lookupd started in the test's nursery; the value is its
  :class:`LookupdAddresses`.
- ``nsq_cluster`` (Trio tests): N brokers (default 3) registered with M lookupds
  (default 2), ``@pytest.mark.nsq_cluster(brokers=N, lookupds=M)`` to change them; the
  value is an :class:`NsqCluster` (addresses, stop/start/restart of one node). Every
  broker has identified with every lookupd before the test starts.
"""

from __future__ import annotations

import functools
import queue
import threading
from typing import TYPE_CHECKING, Final, Unpack

import trio
import trio.testing

try:
    import pytest
except ImportError as missing:  # pragma: no cover - exercised in a subprocess
    raise ImportError(
        "trionsq.testing is a pytest plugin and needs pytest and pytest-trio:"
        " pip install 'trionsq[testing]'"
    ) from missing

from .addresses import host_and_port, normalize_address
from .client import open_consumer, open_producer
from .config import NsqdConfig
from .harness import (
    POLL_INTERVAL_AUTOJUMP,
    REGISTRATION_TIMEOUT,
    FollowingWallClock,
    NsqCluster,
    even_group,
    group_member,
    is_registered,
    open_nsq_cluster,
    wait_until,
)
from .listen import open_server
from .lookupd.config import LookupdConfig
from .lookupd.server import LookupdAddresses, serve_lookupd
from .nursery_tree import BoundAddresses, serve_nsqd
from .protocol import MAGIC_V2
from .protocol.client import ClientConnection, encode_commands

if TYPE_CHECKING:
    from collections.abc import AsyncIterator, Iterator
    from contextlib import AbstractAsyncContextManager

    from .addresses import Address
    from .client import ClientMessage, Consumer, Producer
    from .client.consumer_settings import ConsumerKeywords
    from .protocol import Command
    from .protocol.client import Frame

__all__ = [
    "POLL_INTERVAL_AUTOJUMP",
    "REGISTRATION_TIMEOUT",
    "ClientKit",
    "FollowingWallClock",
    "NsqCluster",
    "ProtocolClient",
    "ThreadedNsqd",
    "even_group",
    "group_member",
    "is_registered",
    "open_nsq_cluster",
    "wait_until",
]

GUARD_SECONDS = 30.0
"""No single read by the test client may take longer (virtual seconds under MockClock)."""


class ProtocolClient:
    """A raw protocol V2 client on a real socket, for tests: send commands, read frames."""

    def __init__(self, stream: trio.SocketStream) -> None:
        self.stream = stream
        self.decoder = ClientConnection()
        self.frames: list[Frame] = []

    @classmethod
    async def connect(cls, address: Address) -> ProtocolClient:
        """Connect (``(host, port)`` or ``"host:port"``) and send the magic; a
        connection whose magic could not go (cancelled, reset) is closed, not left
        to the garbage collector."""
        stream = await trio.open_tcp_stream(*host_and_port(address))
        try:
            await stream.send_all(MAGIC_V2)
        except BaseException:
            await trio.aclose_forcefully(stream)
            raise
        return cls(stream)

    async def send(self, *commands: Command) -> None:
        """Encode and send commands in one write."""
        await self.stream.send_all(encode_commands(commands))

    async def read(self, count: int) -> list[Frame]:
        """The next ``count`` frames; a guard fails the test rather than let it hang."""
        with trio.fail_after(GUARD_SECONDS):
            while len(self.frames) < count:
                data = await self.stream.receive_some(65536)
                self.frames += self.decoder.receive_data(data)
                if not data:
                    break
        taken, self.frames = self.frames[:count], self.frames[count:]
        return taken

    async def drain(self, *, quiet: float = 0.3) -> list[Frame]:
        """Every frame that arrives until nothing has come for ``quiet`` seconds."""
        while True:
            with trio.move_on_after(quiet) as scope:
                data = await self.stream.receive_some(65536)
                self.frames += self.decoder.receive_data(data)
            if scope.cancelled_caught or not data:
                break
        taken, self.frames = self.frames, []
        return taken

    async def wait_closed(self) -> None:
        """Return when the server closes the connection (frames on the way are kept)."""
        with trio.fail_after(GUARD_SECONDS):
            while True:
                data = await self.stream.receive_some(65536)
                if not data:
                    return
                self.frames += self.decoder.receive_data(data)

    async def aclose(self) -> None:
        """Close the socket."""
        await trio.aclose_forcefully(self.stream)


class ThreadedNsqd:
    """A broker in a background thread with its own Trio run, for non-Trio code."""

    def __init__(self, config: NsqdConfig) -> None:
        self.config = config
        self._started: queue.Queue[BoundAddresses | BaseException] = queue.Queue()
        self._scope: trio.CancelScope | None = None
        self._token: trio.lowlevel.TrioToken | None = None
        self._thread = threading.Thread(target=self._run, name="trionsq-broker", daemon=True)

    def start(self, timeout: float = 10.0) -> BoundAddresses:
        """Start the thread; returns once the broker listens."""
        self._thread.start()
        result = self._started.get(timeout=timeout)
        if isinstance(result, BaseException):
            raise result
        return result

    def stop(self, timeout: float = 10.0) -> None:
        """Cancel the broker's run and wait for the thread."""
        if self._scope is not None and self._token is not None:
            trio.from_thread.run_sync(self._scope.cancel, trio_token=self._token)
        self._thread.join(timeout)

    def _run(self) -> None:
        try:
            trio.run(self._main)
        except BaseException as error:
            self._started.put(error)

    async def _main(self) -> None:
        self._token = trio.lowlevel.current_trio_token()
        with trio.CancelScope() as scope:
            self._scope = scope
            # a broker that cannot start raises its error itself, not in a group
            async with open_server(serve_nsqd, self.config) as addresses:
                self._started.put(addresses)
                await trio.sleep_forever()


@pytest.fixture
def nsqd_config() -> NsqdConfig:
    """The brokers' configuration: override in a conftest.py to change options."""
    return NsqdConfig.loopback()


@pytest.fixture
def checked_nsqd_config(nsqd_config: NsqdConfig) -> NsqdConfig:
    """``nsqd_config``, validated before the test's Trio run starts a broker with it: a
    bad configuration is then the ``ConfigError`` itself at setup, not a failure inside
    pytest-trio's ExceptionGroup."""
    nsqd_config.validate()
    return nsqd_config


@pytest.fixture
def checked_lookupd_config(lookupd_config: LookupdConfig) -> LookupdConfig:
    """``lookupd_config``, validated as :func:`checked_nsqd_config`."""
    lookupd_config.validate()
    return lookupd_config


@pytest.fixture
async def nsqd(checked_nsqd_config: NsqdConfig, nursery: trio.Nursery) -> BoundAddresses:
    """A broker for this test, in the test's nursery (pytest-trio)."""
    serve = functools.partial(serve_nsqd, checked_nsqd_config, wall_clock=FollowingWallClock())
    addresses: BoundAddresses = await nursery.start(serve)
    return addresses


@pytest.fixture
async def nsqd_client(nsqd: BoundAddresses) -> AsyncIterator[ProtocolClient]:
    """A raw protocol client connected to ``nsqd``; closed after the test."""
    client = await ProtocolClient.connect(nsqd.tcp)
    try:
        yield client
    finally:
        await client.aclose()


class ClientKit:
    """The ``client`` fixture: trionsq.client pointed at the ``nsqd`` fixture."""

    def __init__(self, address: Address, producer: Producer) -> None:
        self.address = normalize_address(address)
        """The broker's ``host:port`` for TCP clients."""
        self.producer = producer

    def consumer(
        self, topic: str, channel: str, **options: Unpack[ConsumerKeywords]
    ) -> AbstractAsyncContextManager[Consumer]:
        """``async with client.consumer("t", "c") as consumer:`` on the broker, with
        ``open_consumer``'s keyword options (``settings=ConsumerSettings(...)`` for
        the rest), typed (:class:`~trionsq.client.consumer_settings.ConsumerKeywords`)."""
        return open_consumer(topic, channel, self.address, **options)

    async def publish(self, topic: str, *bodies: bytes) -> None:
        """Store ``bodies`` in ``topic`` (one MPUB)."""
        await self.producer.publish_many(topic, bodies)

    async def take(self, topic: str, channel: str, count: int) -> list[ClientMessage]:
        """The next ``count`` messages of ``topic``/``channel``, each finished (within
        :data:`GUARD_SECONDS`: wrap it in ``trio.fail_after`` for less)."""
        taken: list[ClientMessage] = []
        with trio.fail_after(GUARD_SECONDS):
            async with self.consumer(topic, channel, max_in_flight=max(1, count)) as consumer:
                async for message in consumer:
                    message.finish()
                    taken.append(message)
                    if len(taken) == count:
                        break
        return taken


@pytest.fixture
async def client(nsqd: BoundAddresses) -> AsyncIterator[ClientKit]:
    """trionsq.client on the ``nsqd`` fixture: a producer, consumers on demand."""
    async with open_producer(nsqd.tcp) as producer:
        yield ClientKit(nsqd.tcp, producer)


@pytest.fixture
def nsqd_thread(nsqd_config: NsqdConfig) -> Iterator[BoundAddresses]:
    """A broker in a background thread, for tests that do not run Trio."""
    broker = ThreadedNsqd(nsqd_config)
    addresses = broker.start()
    try:
        yield addresses
    finally:
        broker.stop()


def pytest_configure(config: pytest.Config) -> None:
    """Register the ``nsq_cluster`` marker (for ``--strict-markers`` suites)."""
    config.addinivalue_line(
        "markers",
        "nsq_cluster(brokers=3, lookupds=2): the size of the nsq_cluster fixture's cluster",
    )


TRIO_FIXTURES: Final = frozenset({"nsqd", "nsqd_client", "client", "lookupd", "nsq_cluster"})
"""The fixtures that run in the test's Trio nursery, which pytest-trio provides."""


@pytest.hookimpl(tryfirst=True)
def pytest_runtest_setup(item: pytest.Item) -> None:
    """Say what is missing when a Trio fixture is used without pytest-trio, instead of
    pytest's ``fixture 'nursery' not found`` (installing trionsq does not install
    pytest-trio: the ``testing`` extra does). Suites that use none of them, or only
    ``nsqd_thread``, run as before."""
    used = TRIO_FIXTURES.intersection(getattr(item, "fixturenames", ()))
    if used and not item.config.pluginmanager.hasplugin("trio"):
        pytest.fail(
            f"trionsq's Trio fixtures ({', '.join(sorted(used))}) need pytest-trio:"
            " pip install 'trionsq[testing]'",
            pytrace=False,
        )


@pytest.fixture
def lookupd_config() -> LookupdConfig:
    """The lookupds' configuration: override in a conftest.py to change options."""
    return LookupdConfig.loopback()


@pytest.fixture
async def lookupd(checked_lookupd_config: LookupdConfig, nursery: trio.Nursery) -> LookupdAddresses:
    """A lookupd for this test on 127.0.0.1 with free ports, in the test's nursery."""
    addresses: LookupdAddresses = await nursery.start(serve_lookupd, checked_lookupd_config)
    return addresses


@pytest.fixture
async def nsq_cluster(
    request: pytest.FixtureRequest,
    checked_nsqd_config: NsqdConfig,
    checked_lookupd_config: LookupdConfig,
) -> AsyncIterator[NsqCluster]:
    """Brokers registered with lookupds (3 and 2; ``@pytest.mark.nsq_cluster(brokers=,
    lookupds=)`` to change), every broker identified with every lookupd on return."""
    marker = request.node.get_closest_marker("nsq_cluster")
    size: dict[str, int] = dict(marker.kwargs) if marker is not None else {}
    async with open_nsq_cluster(
        size.get("brokers", 3),
        size.get("lookupds", 2),
        nsqd_config=checked_nsqd_config,
        lookupd_config=checked_lookupd_config,
    ) as cluster:
        yield cluster
