"""Raw protocol clients for the integration tests: the plugin's ProtocolClient, plus helpers."""

from __future__ import annotations

from typing import TYPE_CHECKING

import httpx
import trio

from trionsq import NsqdConfig, serve_nsqd
from trionsq.protocol import Nop, Rdy, Sub
from trionsq.protocol.client import ErrorReply, MessageFrame, Response, encode_identify
from trionsq.testing import ProtocolClient

if TYPE_CHECKING:
    from trionsq.nursery_tree import BoundAddresses
    from trionsq.protocol import Command, IdentifyRequest
    from trionsq.protocol.client import Frame
    from trionsq.protocol.message import Message

LOCAL = NsqdConfig.loopback()


class Clients:
    """Opens clients and closes them all when the test ends."""

    def __init__(self) -> None:
        self.opened: list[ProtocolClient] = []

    async def connect(self, address: tuple[str, int]) -> ProtocolClient:
        client = await ProtocolClient.connect(address)
        self.opened.append(client)
        return client

    async def subscribe(
        self,
        address: tuple[str, int],
        topic: str,
        channel: str,
        *,
        rdy: int = 0,
        identify: IdentifyRequest | None = None,
    ) -> ProtocolClient:
        """A consumer: connected, optionally identified, subscribed (OK checked), RDY sent."""
        client = await self.connect(address)
        if identify is not None:
            await client.stream.send_all(encode_identify(identify))
            assert ok(await next_frame(client))
        await client.send(Sub(topic, channel))
        assert ok(await next_frame(client))
        if rdy:
            await client.send(Rdy(rdy))
        return client

    async def close_all(self) -> None:
        for client in self.opened:
            await trio.aclose_forcefully(client.stream)


async def start(nursery: trio.Nursery, config: NsqdConfig = LOCAL) -> BoundAddresses:
    addresses: BoundAddresses = await nursery.start(serve_nsqd, config)
    return addresses


async def http(
    addresses: BoundAddresses, method: str, path: str, body: bytes = b""
) -> httpx.Response:
    """One request to the broker's HTTP listener."""
    assert addresses.http is not None
    host, port = addresses.http
    async with httpx.AsyncClient(base_url=f"http://{host}:{port}") as client:
        return await client.request(method, path, content=body)


async def stats_channel(addresses: BoundAddresses, topic: str) -> dict[str, object]:
    """The topic's first channel in ``/stats`` JSON."""
    document = (await http(addresses, "GET", f"/stats?format=json&topic={topic}")).json()
    channel: dict[str, object] = document["topics"][0]["channels"][0]
    return channel


def ok(frame: object) -> bool:
    return isinstance(frame, Response) and frame.is_ok


def is_heartbeat(frame: object) -> bool:
    return isinstance(frame, Response) and frame.is_heartbeat


async def next_frame(client: ProtocolClient) -> Frame:
    """The next frame that is not a heartbeat (heartbeats are answered with NOP)."""
    while True:
        frames = await client.read(1)
        assert frames, "the server closed the connection"
        if not is_heartbeat(frames[0]):
            return frames[0]
        await client.send(Nop())


async def next_message(client: ProtocolClient) -> Message:
    frame = await next_frame(client)
    assert isinstance(frame, MessageFrame), frame
    return frame.message


async def message_by(client: ProtocolClient, deadline: float) -> Message | None:
    """The next message, or None at ``deadline`` (Trio time, however far: no read
    guard); heartbeats are answered."""
    with trio.move_on_at(deadline):
        while True:
            while client.frames:
                frame = client.frames.pop(0)
                if isinstance(frame, MessageFrame):
                    return frame.message
                assert is_heartbeat(frame), frame
                await client.send(Nop())
            data = await client.stream.receive_some(65536)
            assert data, "the broker closed the connection"
            client.frames += client.decoder.receive_data(data)
    return None


async def next_error(client: ProtocolClient) -> ErrorReply:
    frame = await next_frame(client)
    assert isinstance(frame, ErrorReply), frame
    return frame


async def publish(client: ProtocolClient, *commands: Command) -> None:
    """Send publishes and check each is answered OK."""
    await client.send(*commands)
    for _ in commands:
        assert ok(await next_frame(client))


async def quiet(client: ProtocolClient, seconds: float) -> list[Frame]:
    """Every frame but heartbeats until nothing has come for ``seconds``."""
    return [f for f in await client.drain(quiet=seconds) if not is_heartbeat(f)]


def bodies(frames: list[Frame]) -> list[bytes]:
    return [f.message.body for f in frames if isinstance(f, MessageFrame)]
