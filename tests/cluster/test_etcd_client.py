"""The etcd client against a real etcd: keys, transactions, leases and watches."""

from __future__ import annotations

from typing import TYPE_CHECKING

import pytest
import trio

from trionsq.cluster.etcd import EtcdClient, EtcdUnavailable, LeaseExpired
from trionsq.cluster.etcd_json import Compare, EtcdReplyError, Op, WatchBatch
from trionsq.cluster.etcd_process import start_etcd

if TYPE_CHECKING:
    from pathlib import Path

    from trionsq.cluster.etcd_process import EtcdServer


async def test_put_get_prefix_delete(etcd: EtcdServer, cluster_id: str) -> None:
    async with EtcdClient(etcd.endpoints) as client:
        base = f"/{cluster_id}/".encode()
        first = await client.put(base + b"a", b"1")
        second = await client.put(base + b"b", b"\x00\xff")
        assert second > first
        kv = await client.get(base + b"b")
        assert kv is not None
        assert kv.value == b"\x00\xff"
        assert kv.mod_revision == second
        assert await client.get(base + b"missing") is None
        kvs, revision = await client.get_prefix(base)
        assert [k.key for k in kvs] == [base + b"a", base + b"b"]
        assert revision >= second
        assert await client.delete(base, prefix=True) == 2
        assert (await client.get_prefix(base))[0] == []


async def test_txn_creates_once(etcd: EtcdServer, cluster_id: str) -> None:
    async with EtcdClient(etcd.endpoints) as client:
        key = f"/{cluster_id}/leader".encode()
        absent = [Compare(key, "CREATE", "EQUAL", 0)]
        won = await client.txn(absent, [Op("put", key, b"me")], [Op("range", key)])
        assert won.succeeded
        lost = await client.txn(absent, [Op("put", key, b"you")], [Op("range", key)])
        assert not lost.succeeded
        assert lost.ranges[0][0].value == b"me"
        swapped = await client.txn(
            [Compare(key, "VALUE", "EQUAL", b"me")], [Op("put", key, b"you")]
        )
        assert swapped.succeeded
        assert (await client.get(key)) is not None


async def test_lease_holds_keys_until_it_expires(etcd: EtcdServer, cluster_id: str) -> None:
    async with EtcdClient(etcd.endpoints) as client:
        key = f"/{cluster_id}/broker".encode()
        lease = await client.grant(1)
        await client.put(key, b"alive", lease=lease)
        assert (await client.keep_alive_once(lease)) >= 1
        kv = await client.get(key)
        assert kv is not None
        assert kv.lease == lease
        gone = trio.Event()

        def on_batch(batch: WatchBatch) -> None:
            if any(event.kind == "DELETE" for event in batch.events):
                gone.set()

        async with trio.open_nursery() as nursery:
            nursery.start_soon(client.watch_prefix, key, kv.mod_revision, on_batch)
            with trio.fail_after(10):  # etcd expires it within ~1-2 s
                await gone.wait()
            nursery.cancel_scope.cancel()
        assert await client.get(key) is None
        with pytest.raises(LeaseExpired):
            await client.keep_alive_once(lease)


async def test_keep_alive_keeps_the_key_past_its_ttl(etcd: EtcdServer, cluster_id: str) -> None:
    async with EtcdClient(etcd.endpoints) as client:
        key = f"/{cluster_id}/kept".encode()
        lease = await client.grant(1)
        await client.put(key, b"x", lease=lease)
        renewals: list[float] = []
        async with trio.open_nursery() as nursery:
            nursery.start_soon(
                client.keep_alive, lease, 1.0, lambda: renewals.append(trio.current_time())
            )
            await trio.sleep(2.5)
            assert await client.get(key) is not None
            nursery.cancel_scope.cancel()
        assert len(renewals) >= 5
        await client.revoke(lease)
        assert await client.get(key) is None


async def test_watch_sees_puts_and_deletes_in_order(etcd: EtcdServer, cluster_id: str) -> None:
    async with EtcdClient(etcd.endpoints) as client:
        base = f"/{cluster_id}/w/".encode()
        start = await client.put(base + b"before", b"0")
        seen: list[tuple[str, bytes, bytes]] = []
        done = trio.Event()

        def on_batch(batch: WatchBatch) -> None:
            seen.extend((e.kind, e.kv.key, e.kv.value) for e in batch.events)
            if len(seen) >= 3:
                done.set()

        async with trio.open_nursery() as nursery:
            nursery.start_soon(client.watch_prefix, base, start, on_batch)
            await client.put(base + b"a", b"1")
            await client.delete(base + b"before")
            with trio.fail_after(10):
                await done.wait()
            nursery.cancel_scope.cancel()
        assert seen == [
            ("PUT", base + b"before", b"0"),
            ("PUT", base + b"a", b"1"),
            ("DELETE", base + b"before", b""),
        ]


async def test_a_dead_endpoint_is_skipped(etcd: EtcdServer, cluster_id: str) -> None:
    dead = "http://127.0.0.1:1"  # nothing listens on port 1
    async with EtcdClient([dead, *etcd.endpoints], timeout=1.0) as client:
        await client.put(f"/{cluster_id}/k".encode(), b"v")
        with pytest.raises(EtcdUnavailable, match="connect failed"):
            await EtcdClient([dead], timeout=1.0).get(b"k")


async def test_etcd_errors_are_raised(etcd: EtcdServer) -> None:
    async with EtcdClient(etcd.endpoints) as client:
        with pytest.raises(EtcdReplyError, match="lease not found"):
            await client.put(b"k", b"v", lease=0x1234)


async def test_three_member_etcd_survives_a_member(tmp_path: Path) -> None:
    """The client given every member goes on when the one it used dies: keys, leases
    and a watch (which reconnects through follow_cluster's caller; here, once)."""
    server = start_etcd(tmp_path, members=3)
    try:
        async with EtcdClient(server.endpoints, timeout=1.0) as client:
            lease = await client.grant(5)
            first = await client.put(b"/three/k", b"1", lease=lease)
            await trio.to_thread.run_sync(server.members[0].stop)  # the one it talked to
            assert await client.put(b"/three/k", b"2", lease=lease) > first
            assert await client.keep_alive_once(lease) >= 1
            kv = await client.get(b"/three/k")
            assert kv is not None
            assert kv.value == b"2"
            txn = await client.txn(
                [Compare(b"/three/k", "VALUE", "EQUAL", b"2")], [Op("put", b"/three/k", b"3")]
            )
            assert txn.succeeded
    finally:
        server.stop()
