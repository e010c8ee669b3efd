"""pytest fixtures for testing code that uses NSQ, against a real in-process trionsq.

Registered through the ``pytest11`` entry point, so installing trionsq makes them
available:

- ``nsqd_config``: the :class:`NsqdConfig` the brokers below use (override it in your
  conftest.py); by default 127.0.0.1, port 0.
- ``nsqd`` (Trio tests, pytest-trio): a broker started for the test in the test's
  nursery; the value is its :class:`BoundAddresses`. Works with ``autojump_clock``.
- ``nsqd_client`` (Trio tests): a :class:`ProtocolClient` connected to ``nsqd``.
- ``nsqd_thread`` (any test, no Trio needed): a broker running in a background thread,
  for pynsq/gnsq/ansq suites; the value is its :class:`BoundAddresses`.
"""

from __future__ import annotations

import queue
import threading
from typing import TYPE_CHECKING

import pytest
import trio

from .config import NsqdConfig
from .nursery_tree import BoundAddresses, serve_nsqd
from .protocol import MAGIC_V2
from .protocol.client import ClientConnection, encode_commands

if TYPE_CHECKING:
    from collections.abc import AsyncIterator, Iterator

    from .protocol import Command
    from .protocol.client import Frame

__all__ = ["ProtocolClient", "ThreadedNsqd"]

GUARD_SECONDS = 30.0
"""No single read by the test client may take longer (virtual seconds under MockClock)."""


class ProtocolClient:
    """A raw protocol V2 client on a real socket, for tests: send commands, read frames."""

    def __init__(self, stream: trio.SocketStream) -> None:
        self.stream = stream
        self.decoder = ClientConnection()
        self.frames: list[Frame] = []

    @classmethod
    async def connect(cls, address: tuple[str, int]) -> ProtocolClient:
        """Connect and send the magic."""
        stream = await trio.open_tcp_stream(*address)
        await stream.send_all(MAGIC_V2)
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
            async with trio.open_nursery() as nursery:
                addresses = await nursery.start(serve_nsqd, self.config)
                self._started.put(addresses)


@pytest.fixture
def nsqd_config() -> NsqdConfig:
    """The brokers' configuration: override in a conftest.py to change options."""
    return NsqdConfig.loopback()


@pytest.fixture
async def nsqd(nsqd_config: NsqdConfig, nursery: trio.Nursery) -> BoundAddresses:
    """A broker for this test, in the test's nursery (pytest-trio)."""
    addresses: BoundAddresses = await nursery.start(serve_nsqd, nsqd_config)
    return addresses


@pytest.fixture
async def nsqd_client(nsqd: BoundAddresses) -> AsyncIterator[ProtocolClient]:
    """A raw protocol client connected to ``nsqd``; closed after the test."""
    client = await ProtocolClient.connect(nsqd.tcp)
    try:
        yield client
    finally:
        await client.aclose()


@pytest.fixture
def nsqd_thread(nsqd_config: NsqdConfig) -> Iterator[BoundAddresses]:
    """A broker in a background thread, for tests that do not run Trio."""
    broker = ThreadedNsqd(nsqd_config)
    addresses = broker.start()
    try:
        yield addresses
    finally:
        broker.stop()
