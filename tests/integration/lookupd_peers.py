"""Helpers for the lookupd tests: a raw nsqd-side V1 connection and a lookupd fixture.

The peer speaks bytes through trionsq.protocol.lookupd's client-side encoders, so
every test sees exactly what goes over the wire.
"""

from __future__ import annotations

import struct
from typing import TYPE_CHECKING, Final, Unpack

import pytest
import trio
import trio.testing

from trionsq.lookupd.config import LookupdConfig
from trionsq.lookupd.server import serve_lookupd
from trionsq.protocol.lookupd import (
    MAGIC_V1,
    LookupClientConnection,
    LookupIdentify,
    PeerInfo,
    Ping,
    Register,
    Unregister,
    encode_lookup_command,
)

if TYPE_CHECKING:
    from collections.abc import AsyncIterator

    from trionsq.lookupd.config import LookupdOptions
    from trionsq.lookupd.server import LookupdAddresses

GUARD: Final = 10.0
"""Longest wait for a reply or a close."""


def nsqd_info(port: int = 4150, *, host: str = "nsqd1", http_port: int = 4151) -> PeerInfo:
    """The IDENTIFY body an upstream nsqd ≥ 1.3 sends."""
    return PeerInfo(
        version="1.3.0",
        tcp_port=port,
        http_port=http_port,
        hostname=host,
        broadcast_address=host,
        topology_zone="z1",
        topology_region="r1",
    )


async def start_lookupd(
    nursery: trio.Nursery, **changes: Unpack[LookupdOptions]
) -> LookupdAddresses:
    """A lookupd on 127.0.0.1 with free ports, for the length of the test."""
    addresses: LookupdAddresses = await nursery.start(
        serve_lookupd, LookupdConfig.loopback(**changes)
    )
    return addresses


async def settle() -> None:
    """Let the lookupd handle what is already on the wire (a close, a command)."""
    await trio.testing.wait_all_tasks_blocked(cushion=0.02)


class RawPeer:
    """The nsqd side of one connection, byte-exact."""

    def __init__(self, stream: trio.SocketStream) -> None:
        self.stream = stream
        self.replies = LookupClientConnection()
        self._pending: list[bytes] = []
        host, port = stream.socket.getsockname()[:2]
        self.local_address = f"{host}:{port}"
        """The id the lookupd gives this peer: our end's ``ip:port``."""

    @classmethod
    async def connect(cls, addresses: LookupdAddresses, *, magic: bytes = MAGIC_V1) -> RawPeer:
        stream = await trio.open_tcp_stream(*addresses.tcp)
        peer = cls(stream)
        if magic:
            await stream.send_all(magic)
        return peer

    async def send(self, data: bytes) -> None:
        await self.stream.send_all(data)

    async def reply(self) -> bytes:
        """The next ``[size][data]`` reply's data."""
        with trio.fail_after(GUARD):
            while not self._pending:
                data = await self.stream.receive_some(65536)
                assert data, "lookupd closed the connection"
                self._pending.extend(self.replies.receive_data(data))
        return self._pending.pop(0)

    async def raw_reply(self) -> bytes:
        """The next reply with its size prefix, as bytes on the wire."""
        data = await self.reply()
        return struct.pack(">i", len(data)) + data

    async def command(self, command: LookupIdentify | Register | Unregister | Ping) -> bytes:
        await self.send(encode_lookup_command(command))
        return await self.reply()

    async def identify(self, info: PeerInfo | None = None) -> bytes:
        return await self.command(LookupIdentify(info or nsqd_info()))

    async def register(self, topic: str, channel: str | None = None) -> bytes:
        return await self.command(Register(topic, channel))

    async def unregister(self, topic: str, channel: str | None = None) -> bytes:
        return await self.command(Unregister(topic, channel))

    async def wait_closed(self) -> None:
        """The lookupd closed the connection (after any replies already read)."""
        with trio.fail_after(GUARD):
            while True:
                data = await self.stream.receive_some(65536)
                if not data:
                    return
                self._pending.extend(self.replies.receive_data(data))

    async def aclose(self) -> None:
        await self.stream.aclose()


class RawPeers:
    """Every raw peer a test opens, closed at teardown."""

    def __init__(self) -> None:
        self.opened: list[RawPeer] = []

    async def connect(self, addresses: LookupdAddresses, *, magic: bytes = MAGIC_V1) -> RawPeer:
        peer = await RawPeer.connect(addresses, magic=magic)
        self.opened.append(peer)
        return peer

    async def close_all(self) -> None:
        for peer in self.opened:
            await trio.aclose_forcefully(peer.stream)


@pytest.fixture
async def peers() -> AsyncIterator[RawPeers]:
    """Raw nsqd-side connections, all closed at teardown."""
    opened = RawPeers()
    try:
        yield opened
    finally:
        await opened.close_all()
