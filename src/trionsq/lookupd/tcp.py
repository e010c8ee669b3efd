"""One nsqd connection to the lookupd (TCP protocol V1, spec lookupd-tcp.md).

The sans-IO :class:`~trionsq.protocol.lookupd.LookupServerConnection` turns bytes
into commands; this module applies them to the :class:`RegistrationDB` and writes
the replies. Every protocol error is fatal: its text is sent and the connection
closed. However the connection ends, the peer leaves every registration it held
(the keys stay), which is how nsqlookupd forgets an nsqd that went away.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import TYPE_CHECKING, Final

import attrs
import trio

from ..addresses import peer_address
from ..protocol.errors import ProtocolError
from ..protocol.lookupd import (
    OK_REPLY,
    LookupdInfo,
    LookupIdentify,
    LookupServerConnection,
    Ping,
    Register,
    Unregister,
    encode_error_reply,
    encode_identify_reply,
)
from .brokers import BrokerSync
from .registry import Peer, RegistrationDB

if TYPE_CHECKING:
    from ..protocol.lookupd import LookupCommand
    from .registry import Registration

__all__ = ["LookupSession"]

log = logging.getLogger("trionsq.lookupd")

READ_SIZE: Final = 65536


def _describe(registration: Registration) -> str:
    return f"category:{registration.category} key:{registration.key} subkey:{registration.subkey}"


@attrs.define(eq=False)
class LookupSession:
    """Serves one nsqd connection until it closes; see :meth:`run`."""

    stream: trio.SocketStream
    registry: RegistrationDB
    info: LookupdInfo
    """This lookupd's IDENTIFY reply (its own bound ports)."""
    clock: Callable[[], float] = trio.current_time
    brokers: BrokerSync | None = None
    """Told of every IDENTIFY and REGISTER, so placed brokers get their topics."""
    remote: str = attrs.field(init=False)
    """The peer id nsqlookupd uses: the connection's remote ``ip:port``."""
    peer: Peer | None = attrs.field(init=False, default=None)
    _protocol: LookupServerConnection = attrs.field(init=False, factory=LookupServerConnection)

    @remote.default
    def _remote(self) -> str:
        return peer_address(self.stream.socket)

    async def run(self) -> None:
        """Read commands and answer them until EOF, a fatal error or cancellation.

        However the connection ends, its registrations are dropped; a failure ends
        only this connection (the listener's task around it logs it and closes the
        stream: listen.py).
        """
        log.info("TCP: new client(%s)", self.remote)
        try:
            await self._loop()
        finally:
            self._forget()

    async def _loop(self) -> None:
        protocol = self._protocol
        while not protocol.closed:
            data = await self.stream.receive_some(READ_SIZE)
            replies: list[bytes] = []
            for event in protocol.receive_data(data):
                if isinstance(event, ProtocolError):
                    log.error("[%s] - %s", self.remote, event.text)
                    replies.append(encode_error_reply(event))
                    break
                replies.append(self._execute(event))
            if replies:
                await self.stream.send_all(b"".join(replies))
        log.info("CLIENT(%s): closing", self.remote)

    def _execute(self, command: LookupCommand) -> bytes:
        """Apply one command; its reply."""
        registry = self.registry
        if isinstance(command, Ping):
            if self.peer is not None:
                now = self.clock()
                log.info(
                    "CLIENT(%s): pinged (last ping %.3fs)",
                    self.peer.id,
                    now - self.peer.last_update,
                )
                registry.ping(self.peer, now)
                if self.brokers is not None:
                    self.brokers.broker_registered(self.peer)
            return OK_REPLY
        if isinstance(command, LookupIdentify):
            info = command.peer
            self.peer = Peer(self.remote, info, self.clock())
            log.info(
                "CLIENT(%s): IDENTIFY Address:%s TCP:%d HTTP:%d Version:%s",
                self.remote,
                info.broadcast_address,
                info.tcp_port,
                info.http_port,
                info.version,
            )
            if registry.identify(self.peer):
                log.info("DB: client(%s) REGISTER category:client key: subkey:", self.remote)
            if self.brokers is not None:
                self.brokers.broker_identified(self.peer)
            return encode_identify_reply(self.info)
        peer = self.peer
        if peer is None:  # cannot happen: the protocol refuses (UN)REGISTER before IDENTIFY
            raise AssertionError(command)
        # Youzan's "<topic> <partition> [<channel>]": the partition is recorded for
        # /lookup's partitions map; the keys stay per topic and channel.
        if isinstance(command, Register):
            for key in registry.register(peer, command.topic, command.channel, command.partition):
                log.info("DB: client(%s) REGISTER %s", self.remote, _describe(key))
            if self.brokers is not None:
                self.brokers.broker_registered(peer)
        elif isinstance(command, Unregister):
            for key in registry.unregister(
                peer.id, command.topic, command.channel, command.partition
            ):
                log.info("DB: client(%s) UNREGISTER %s", self.remote, _describe(key))
        return OK_REPLY

    def _forget(self) -> None:
        """The connection is over: the peer leaves every registration."""
        if self.peer is None:
            return
        for key in self.registry.remove_peer(self.peer.id):
            log.info("DB: client(%s) UNREGISTER %s", self.remote, _describe(key))
        self.peer = None
