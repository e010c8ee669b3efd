"""A raw protocol client over a real socket, built on the project's sans-IO codecs."""

from __future__ import annotations

import trio

from trionsq.protocol import MAGIC_V2, Command
from trionsq.protocol.client import ClientConnection, Frame, encode_commands

GUARD_SECONDS = 30.0
"""No single read in these tests may take longer (virtual seconds under a MockClock)."""


class RawClient:
    """Send commands, read frames; every read has a deadline so a test cannot hang."""

    def __init__(self, stream: trio.SocketStream) -> None:
        self.stream = stream
        self.decoder = ClientConnection()
        self.frames: list[Frame] = []

    @classmethod
    async def connect(cls, address: tuple[str, int]) -> RawClient:
        stream = await trio.open_tcp_stream(*address)
        client = cls(stream)
        await stream.send_all(MAGIC_V2)
        return client

    async def send(self, *commands: Command) -> None:
        await self.stream.send_all(encode_commands(commands))

    async def read(self, count: int) -> list[Frame]:
        """The next ``count`` frames; a guard fails the test rather than let it hang."""
        with trio.fail_after(GUARD_SECONDS):
            while len(self.frames) < count:
                data = await self.stream.receive_some(65536)
                if not data:
                    self.frames += self.decoder.receive_data(data)
                    break
                self.frames += self.decoder.receive_data(data)
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
        await self.stream.aclose()


class Clients:
    """Opens raw clients and closes them all when the test ends."""

    def __init__(self) -> None:
        self.opened: list[RawClient] = []

    async def connect(self, address: tuple[str, int]) -> RawClient:
        client = await RawClient.connect(address)
        self.opened.append(client)
        return client

    async def close_all(self) -> None:
        for client in self.opened:
            await trio.aclose_forcefully(client.stream)
