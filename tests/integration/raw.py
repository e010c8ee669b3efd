"""Raw protocol clients for the integration tests: the plugin's ProtocolClient."""

from __future__ import annotations

import trio

from trionsq.testing import ProtocolClient


class Clients:
    """Opens clients and closes them all when the test ends."""

    def __init__(self) -> None:
        self.opened: list[ProtocolClient] = []

    async def connect(self, address: tuple[str, int]) -> ProtocolClient:
        client = await ProtocolClient.connect(address)
        self.opened.append(client)
        return client

    async def close_all(self) -> None:
        for client in self.opened:
            await trio.aclose_forcefully(client.stream)
