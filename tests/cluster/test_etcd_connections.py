"""The etcd client's unary calls over kept-alive connections, against a real etcd
(through :class:`~tests.cluster.etcd_proxy.EtcdProxy`, which counts connections and
loses or stalls a reply on demand): one connection for many calls, a connection
etcd closed while idle, a reply lost after the request went out, a call cancelled
mid-reply, calls at once."""

from __future__ import annotations

from typing import TYPE_CHECKING

import pytest
import trio

from tests.cluster.etcd_proxy import EtcdProxy
from trionsq.cluster.etcd import EtcdClient, EtcdUnavailable
from trionsq.cluster.etcd_json import Compare, Op
from trionsq.cluster.etcd_process import start_etcd
from trionsq.http.kept_connections import MAX_IDLE
from trionsq.testing import wait_until

if TYPE_CHECKING:
    from collections.abc import Awaitable, Callable
    from pathlib import Path

    from trionsq.cluster.etcd_process import EtcdServer


async def test_calls_reuse_one_connection(etcd: EtcdServer, cluster_id: str) -> None:
    key = f"/{cluster_id}/k".encode()
    proxy = EtcdProxy(etcd.endpoints[0])
    async with trio.open_nursery() as nursery:
        url = await nursery.start(proxy.serve)
        async with EtcdClient([url]) as client:
            for value in range(10):
                await client.put(key, b"%d" % value)
                kv = await client.get(key)
                assert kv is not None
                assert kv.value == b"%d" % value
            lease = await client.grant(5)
            assert await client.keep_alive_once(lease) >= 1
            swapped = await client.txn(
                [Compare(key, "VALUE", "EQUAL", b"9")], [Op("put", key, b"x")]
            )
            assert swapped.succeeded
            await client.revoke(lease)
            assert await client.delete(key) == 1
            assert proxy.accepted == 1, f"{proxy.accepted} connections for 25 calls"
        await wait_until(lambda: proxy.open == 0, "the kept connection closed with the client")
        nursery.cancel_scope.cancel()


async def test_a_restarted_etcd_does_not_fail_the_next_call(tmp_path: Path) -> None:
    """Each restart leaves the kept connection closed by etcd; the next call, of
    each kind (a put and a txn are never sent twice), goes on a new one."""
    server = start_etcd(tmp_path)
    key = b"/restarted/k"
    try:
        async with EtcdClient(server.endpoints) as client:
            await client.put(key, b"0")
            calls: list[Callable[[], Awaitable[object]]] = [
                lambda: client.get(key),
                lambda: client.put(key, b"1"),
                lambda: client.txn([Compare(key, "VALUE", "EQUAL", b"1")], [Op("put", key, b"2")]),
                lambda: client.grant(5),
            ]
            for call in calls:
                await trio.to_thread.run_sync(server.stop)
                await trio.to_thread.run_sync(server.start)
                await call()
            kv = await client.get(key)
            assert kv is not None
            assert (kv.value, kv.version) == (b"2", 3)
            assert client.connections.opened == 1 + len(calls)
    finally:
        server.stop()


async def test_a_reply_lost_is_asked_again_only_when_safe(
    etcd: EtcdServer, cluster_id: str
) -> None:
    """etcd did the call but its reply never came: a put or a txn is not sent again
    (it fails, and was done once), a read is (on a new connection)."""
    key = f"/{cluster_id}/k".encode()
    proxy = EtcdProxy(etcd.endpoints[0])
    async with trio.open_nursery() as nursery:
        url = await nursery.start(proxy.serve)
        async with EtcdClient([url]) as client:
            await client.put(key, b"0")
            proxy.trouble = "drop reply"
            with pytest.raises(EtcdUnavailable, match="closed before"):
                await client.put(key, b"1")
            kv = await client.get(key)
            assert kv is not None
            assert (kv.value, kv.version) == (b"1", 2), "the put was done once"
            proxy.trouble = "drop reply"
            kv = await client.get(key)  # dropped, asked again on a new connection
            assert kv is not None
            assert kv.value == b"1"
            proxy.trouble = "drop reply"
            with pytest.raises(EtcdUnavailable, match="closed before"):
                await client.txn([Compare(key, "VERSION", "EQUAL", 2)], [Op("put", key, b"2")])
            kv = await client.get(key)
            assert kv is not None
            assert (kv.value, kv.version) == (b"2", 3), "the txn was done once"
            assert proxy.accepted == 4
        nursery.cancel_scope.cancel()


async def test_a_call_cancelled_mid_reply_does_not_poison_the_next(
    etcd: EtcdServer, cluster_id: str
) -> None:
    """A reply half read when the call is cancelled (or times out): its connection
    is closed, and the next call gets its own reply, not the rest of that one."""
    big, small = f"/{cluster_id}/big".encode(), f"/{cluster_id}/small".encode()
    proxy = EtcdProxy(etcd.endpoints[0])
    proxy.stall_at = 100
    async with trio.open_nursery() as nursery:
        url = await nursery.start(proxy.serve)
        async with EtcdClient([url], timeout=1.0) as client:
            await client.put(big, b"b" * 20000)
            await client.put(small, b"s")
            proxy.trouble = "stall reply"
            async with trio.open_nursery() as caller:

                async def cancel_when_stalled() -> None:
                    await proxy.stalled.wait()
                    caller.cancel_scope.cancel()

                caller.start_soon(cancel_when_stalled)
                await client.get(big)
                pytest.fail("the stalled call returned")
            kv = await client.get(small)
            assert kv is not None
            assert kv.value == b"s"
            assert proxy.accepted == 2
            proxy.trouble = "stall reply"
            with pytest.raises(EtcdUnavailable, match="no reply within"):
                await client.get(big)
            kv = await client.get(small)
            assert kv is not None
            assert kv.value == b"s"
            assert proxy.accepted == 3
        nursery.cancel_scope.cancel()


async def test_concurrent_calls_do_not_mix_replies(etcd: EtcdServer, cluster_id: str) -> None:
    """40 reads at once, values of different sizes: each gets its own key's value;
    afterwards no more than MAX_IDLE connections stay open, and an owner cancelled
    while it closes the client still closes every one."""
    values = {
        f"/{cluster_id}/c{i}".encode(): bytes([65 + i % 26]) * (i * 997 % 30000 + 1)
        for i in range(40)
    }
    proxy = EtcdProxy(etcd.endpoints[0])
    async with trio.open_nursery() as nursery:
        url = await nursery.start(proxy.serve)
        client = EtcdClient([url])
        for key, value in values.items():
            await client.put(key, value)
        got: dict[bytes, bytes] = {}

        async def read(key: bytes) -> None:
            kv = await client.get(key)
            assert kv is not None
            got[key] = kv.value

        for _ in range(2):
            got.clear()
            async with trio.open_nursery() as readers:
                for key in values:
                    readers.start_soon(read, key)
            assert got == values
        await wait_until(lambda: proxy.open <= MAX_IDLE, "the extra connections closed")
        assert proxy.open >= 2, "the reads ran one after another"
        with trio.CancelScope() as owner:
            owner.cancel()
            await client.aclose()
        await wait_until(lambda: proxy.open == 0, "every kept connection closed")
        nursery.cancel_scope.cancel()
