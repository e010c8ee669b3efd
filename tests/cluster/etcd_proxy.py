"""A TCP relay between an etcd client and etcd that counts the client's connections,
and on demand drops or stalls the next reply (bytes only: TLS passes through it)."""

from __future__ import annotations

import contextlib
from typing import Literal

import trio

from trionsq.cluster.etcd import endpoint_address

Trouble = Literal["none", "drop reply", "stall reply", "cut reply", "garble reply"]


class EtcdProxy:
    """Relays to ``etcd`` (a client URL); ``url`` is where the client should go."""

    def __init__(self, etcd: str) -> None:
        self.scheme = "https" if etcd.startswith("https://") else "http"
        self.host, port = endpoint_address(etcd).rsplit(":", 1)
        self.port = int(port)
        self.url = ""
        self.accepted = 0
        """Connections the client opened so far."""
        self.open = 0
        """Connections open now."""
        self.trouble: Trouble = "none"
        """For the next reply etcd sends: ``drop reply`` closes the client's connection
        instead of relaying it (etcd did the call; the client hears nothing);
        ``stall reply`` relays its first ``stall_at`` bytes and nothing more; ``cut
        reply`` relays them and closes the connection (over TLS: half a record);
        ``garble reply`` relays the reply with every byte after them inverted (over
        TLS: a record that fails its integrity check)."""
        self.stall_at = 8
        self.stalled = trio.Event()
        """Set once a stalled reply's first bytes went to the client."""

    async def serve(self, *, task_status: trio.TaskStatus[str] = trio.TASK_STATUS_IGNORED) -> None:
        (listener,) = await trio.open_tcp_listeners(0, host="127.0.0.1")
        self.url = f"{self.scheme}://127.0.0.1:{listener.socket.getsockname()[1]}"
        task_status.started(self.url)
        await trio.serve_listeners(self._relay, [listener])

    async def _relay(self, client: trio.SocketStream) -> None:
        self.accepted += 1
        self.open += 1
        try:
            async with (
                client,
                await trio.open_tcp_stream(self.host, self.port) as upstream,
                trio.open_nursery() as nursery,
            ):
                nursery.start_soon(self._requests, client, upstream, nursery.cancel_scope)
                nursery.start_soon(self._replies, upstream, client, nursery.cancel_scope)
        finally:
            self.open -= 1

    @staticmethod
    async def _requests(
        client: trio.SocketStream, upstream: trio.SocketStream, done: trio.CancelScope
    ) -> None:
        with contextlib.suppress(trio.BrokenResourceError, trio.ClosedResourceError):
            while data := await client.receive_some(65536):
                await upstream.send_all(data)
        done.cancel()

    async def _replies(
        self, upstream: trio.SocketStream, client: trio.SocketStream, done: trio.CancelScope
    ) -> None:
        with contextlib.suppress(trio.BrokenResourceError, trio.ClosedResourceError):
            while data := await upstream.receive_some(65536):
                trouble, self.trouble = self.trouble, "none"
                if trouble == "drop reply":
                    break
                if trouble == "garble reply":
                    data = data[: self.stall_at] + bytes(b ^ 0xFF for b in data[self.stall_at :])
                elif trouble in ("stall reply", "cut reply"):
                    await client.send_all(data[: self.stall_at])
                    self.stalled.set()
                    if trouble == "cut reply":
                        break
                    await trio.sleep_forever()
                await client.send_all(data)
        done.cancel()
