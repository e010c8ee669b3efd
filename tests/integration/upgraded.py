"""A protocol client that follows IDENTIFY's upgrades (TLS, snappy, deflate) for tests.

The server side keeps its layers sans-IO on the raw descriptor; this client takes the
other road on purpose (trio's SSLStream plus the compression codecs), so the two
implementations check each other.
"""

from __future__ import annotations

import json
import struct
from typing import TYPE_CHECKING

import attrs
import trio

from trionsq.protocol import MAGIC_V2
from trionsq.protocol.client import ClientConnection, Response, encode_commands, encode_identify
from trionsq.protocol.compression import (
    DeflateDecoder,
    DeflateEncoder,
    SnappyDecoder,
    SnappyEncoder,
)
from trionsq.testing import GUARD_SECONDS

if TYPE_CHECKING:
    import ssl

    from trionsq.protocol import Command, IdentifyRequest
    from trionsq.protocol.client import Frame

_SIZE = struct.Struct(">i")
_OK = b"\x00\x00\x00\x00OK"
_Codec = tuple[SnappyEncoder | DeflateEncoder, SnappyDecoder | DeflateDecoder]


class UpgradedClient:
    """Connected, identified and upgraded as the server negotiated."""

    def __init__(self, stream: trio.abc.Stream, negotiated: dict[str, object]) -> None:
        self.stream = stream
        self.negotiated = negotiated
        """The IDENTIFY JSON reply."""
        self.decoder = ClientConnection()
        self.frames: list[Frame] = []
        self.codec: _Codec | None = None
        self._held = b""

    @classmethod
    async def connect(
        cls,
        address: tuple[str, int],
        request: IdentifyRequest,
        *,
        tls: ssl.SSLContext | None = None,
    ) -> UpgradedClient:
        """Magic, IDENTIFY (``feature_negotiation`` is forced on), then each upgrade
        with its ``OK`` checked, in nsqd's order.

        Until the last upgrade, frames are taken one at a time and what follows one
        is kept back: it belongs to the next layer.
        """
        sock = await trio.open_tcp_stream(*address)
        client = cls(sock, {})
        try:
            await sock.send_all(MAGIC_V2 + encode_identify(_negotiating(request)))
            reply = await client.one_frame()
            assert reply.startswith(b"\x00\x00\x00\x00"), reply  # a response frame
            client.negotiated = json.loads(reply[4:])
            if client.negotiated["tls_v1"]:
                assert tls is not None
                assert not client._held  # the server waits for our handshake
                ssl_stream = trio.SSLStream(sock, tls, server_hostname="localhost")
                client.stream = ssl_stream
                with trio.fail_after(GUARD_SECONDS):
                    await ssl_stream.do_handshake()
                assert await client.one_frame() == _OK
            if client.negotiated["snappy"]:
                client.start_codec((SnappyEncoder(), SnappyDecoder()))
                await client.expect_ok()
            elif client.negotiated["deflate"]:
                level = client.negotiated["deflate_level"]
                assert isinstance(level, int)
                client.start_codec((DeflateEncoder(level), DeflateDecoder()))
                await client.expect_ok()
        except BaseException:
            await client.aclose()
            raise
        return client

    def start_codec(self, codec: _Codec) -> None:
        """Compression from here on, both ways; bytes held back are its first input."""
        self.codec = codec
        held, self._held = self._held, b""
        plain = self._decode(held)
        if plain:  # b"" would mean EOF to the frame decoder
            self.frames += self.decoder.receive_data(plain)

    async def one_frame(self) -> bytes:
        """The next frame's type and data, read without consuming past it."""
        with trio.fail_after(GUARD_SECONDS):
            while len(self._held) < 4 or len(self._held) < 4 + _SIZE.unpack_from(self._held)[0]:
                data = await self.stream.receive_some(65536)
                assert data, "closed by the server"
                self._held += data
        end = 4 + _SIZE.unpack_from(self._held)[0]
        frame, self._held = self._held[4:end], self._held[end:]
        return frame

    def _decode(self, data: bytes) -> bytes:
        if self.codec is None:
            return data
        decoder = self.codec[1]
        data = decoder.decode(data)
        while isinstance(decoder, DeflateDecoder) and decoder.pending:
            data += decoder.decode(b"")
        return data

    async def expect_ok(self) -> None:
        (frame,) = await self.read(1)
        assert isinstance(frame, Response), frame
        assert frame.is_ok, frame

    async def send(self, *commands: Command) -> None:
        await self.send_raw(encode_commands(commands))

    async def send_raw(self, data: bytes) -> None:
        """Bytes through the client's layers."""
        if self.codec is not None:
            data = self.codec[0].encode(data)
        await self.stream.send_all(data)

    async def read(self, count: int) -> list[Frame]:
        """The next ``count`` frames (fewer if the server closes)."""
        with trio.fail_after(GUARD_SECONDS):
            while len(self.frames) < count:
                try:
                    data = await self.stream.receive_some(65536)
                except trio.BrokenResourceError:
                    data = b""
                if not data:
                    break
                self.frames += self.decoder.receive_data(self._decode(bytes(data)))
        taken, self.frames = self.frames[:count], self.frames[count:]
        return taken

    async def aclose(self) -> None:
        await trio.aclose_forcefully(self.stream)


def _negotiating(request: IdentifyRequest) -> IdentifyRequest:
    return attrs.evolve(request, feature_negotiation=True)
