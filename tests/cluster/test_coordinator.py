"""The coordinator against a real etcd: one elected, replicas placed, leaders moved."""

from __future__ import annotations

import contextlib
from typing import TYPE_CHECKING

import pytest
import trio

from trionsq.cluster.coordinator import Coordinator, NotCoordinator
from trionsq.cluster.etcd import EtcdClient, endpoint_address
from trionsq.cluster.keys import (
    BrokerInfo,
    ClusterKeys,
    CoordinatorInfo,
    PartitionState,
    TopicMeta,
    encode,
)
from trionsq.cluster.membership import Registration, propose_state
from trionsq.cluster.placement import PlacementError, with_isr
from trionsq.cluster.view import ClusterView, follow_cluster

if TYPE_CHECKING:
    from collections.abc import Callable

    from trionsq.cluster.etcd_process import EtcdServer

TTL = 1.0


def _coordinator(etcd: EtcdServer, keys: ClusterKeys, name: str) -> Coordinator:
    return Coordinator(EtcdClient(etcd.endpoints), keys, CoordinatorInfo(name, f"{name}:4161"), TTL)


def _broker(name: str) -> BrokerInfo:
    return BrokerInfo(name, "127.0.0.1", 4150, 4151, 4152)


async def _until(
    view_owner: Coordinator, condition: Callable[[], bool], within: float = 10
) -> float:
    """Wait (on the view's changes) until ``condition()``; returns the seconds taken."""
    start = trio.current_time()
    with trio.fail_after(within):
        while not condition():
            await view_owner.wait_change()
    return trio.current_time() - start


async def test_one_coordinator_then_another_when_its_lease_goes(
    etcd: EtcdServer, cluster_id: str
) -> None:
    keys = ClusterKeys(cluster_id)
    first, second = _coordinator(etcd, keys, "l1"), _coordinator(etcd, keys, "l2")
    async with trio.open_nursery() as nursery:
        scope_first = trio.CancelScope()

        async def run_first() -> None:
            with scope_first:
                await first.run()

        nursery.start_soon(run_first)
        await trio.sleep(0.3)
        await nursery.start(second.run)
        await _until(second, lambda: second.view.coordinator is not None)
        assert first.leading
        assert not second.leading
        assert second.view.coordinator == CoordinatorInfo("l1", "l1:4161")
        with pytest.raises(NotCoordinator):
            await second.create_topic("t", TopicMeta(1, 1))
        scope_first.cancel()  # l1 stops renewing: its lease expires in etcd
        taken = await _until(second, lambda: second.leading)
        assert taken < TTL + 3
        assert second.view.coordinator == CoordinatorInfo("l2", "l2:4161")
        nursery.cancel_scope.cancel()


async def test_topic_placed_and_leader_moved_when_a_broker_dies(
    etcd: EtcdServer, cluster_id: str
) -> None:
    keys = ClusterKeys(cluster_id)
    async with EtcdClient(etcd.endpoints) as client:
        coordinator = _coordinator(etcd, keys, "l1")
        async with trio.open_nursery() as nursery:
            registrations = [Registration(client, keys, _broker(f"b{i}"), TTL) for i in (1, 2)]
            for registration in registrations:
                await nursery.start(registration.run)
            # b3 "crashes": its key sits on a lease nobody renews
            dying = await client.grant(TTL)
            await client.put(keys.broker("b3"), encode(_broker("b3")), lease=dying)
            await nursery.start(coordinator.run)
            await _until(
                coordinator, lambda: coordinator.leading and len(coordinator.view.brokers) == 3
            )
            with pytest.raises(PlacementError, match="4 replicas need 4 live brokers"):
                await coordinator.create_topic("t", TopicMeta(4, 4))
            placed = await coordinator.create_topic("t", TopicMeta(4, 3, min_isr=2))
            assert [len(set(s.replicas)) for s in placed] == [3, 3, 3, 3]
            assert await coordinator.create_topic("t", TopicMeta(4, 3)) == placed
            led_by_b3 = [n for n, s in enumerate(placed) if s.leader == "b3"]
            assert led_by_b3
            await _until(coordinator, lambda: len(coordinator.view.topic_partitions("t")) == 4)
            moved = await _until(coordinator, lambda: "b3" not in coordinator.view.brokers)
            await _until(
                coordinator,
                lambda: all("b3" not in s.isr for _, s in coordinator.view.topic_partitions("t")),
            )
            assert moved < TTL + 3
            for n, state in coordinator.view.topic_partitions("t"):
                assert "b3" not in state.isr
                assert state.leader in {"b1", "b2"}
                assert state.epoch == (2 if n in led_by_b3 else 1)
            assert coordinator.elections == len(led_by_b3)
            # b1 exits in order (revokes its lease): its partitions move at once
            nursery.cancel_scope.cancel()


async def test_an_offline_partition_leads_again_when_its_last_isr_member_returns(
    etcd: EtcdServer, cluster_id: str
) -> None:
    keys = ClusterKeys(cluster_id)
    async with EtcdClient(etcd.endpoints) as client:
        coordinator = _coordinator(etcd, keys, "l1")
        async with trio.open_nursery() as nursery:
            await nursery.start(Registration(client, keys, _broker("b2"), TTL).run)
            only = await client.grant(2)
            await client.put(keys.broker("b1"), encode(_broker("b1")), lease=only)
            await nursery.start(coordinator.run)
            await _until(
                coordinator, lambda: coordinator.leading and len(coordinator.view.brokers) == 2
            )
            [state] = await coordinator.create_topic("solo", TopicMeta(1, 2))
            assert state.leader == "b1"  # the ring starts at the first broker id
            await _until(coordinator, lambda: ("solo", 0) in coordinator.view.partitions)
            # the leader shrinks the ISR to itself (b2 lags), then b1 dies
            narrowed = with_isr(state, ["b1"])
            revision = coordinator.view.revisions["solo", 0]
            assert await propose_state(client, keys, ("solo", 0), narrowed, revision)
            assert not await propose_state(client, keys, ("solo", 0), narrowed, revision)  # stale
            await _until(coordinator, lambda: coordinator.view.partitions["solo", 0].leader == "")
            offline = coordinator.view.partitions["solo", 0]
            assert offline == PartitionState(state.replicas, ("b1",), "", 2)  # b2 never leads
            # b1 comes back (a new lease: a restart): it holds every acknowledged record
            await client.put(keys.broker("b1"), encode(_broker("b1")), lease=await client.grant(5))
            await _until(coordinator, lambda: coordinator.view.partitions["solo", 0].leader == "b1")
            assert coordinator.view.partitions["solo", 0].epoch == 3
            nursery.cancel_scope.cancel()


async def test_view_follows_changes_and_survives_a_reconnect(
    etcd: EtcdServer, cluster_id: str
) -> None:
    keys = ClusterKeys(cluster_id)
    async with EtcdClient(etcd.endpoints) as client:
        view = ClusterView(keys)
        changes = trio.Event()

        def changed() -> None:
            changes.set()

        await client.put(keys.topic_meta("x"), encode(TopicMeta(2, 1)))
        async with trio.open_nursery() as nursery:
            await nursery.start(follow_cluster, client, view, changed)
            assert view.topics == {"x": TopicMeta(2, 1)}
            state = PartitionState(("b1",), ("b1",), "b1", 1)
            await client.put(keys.partition("x", 0), encode(state))
            with trio.fail_after(5):
                while ("x", 0) not in view.partitions:
                    await changes.wait()
                    changes = trio.Event()
            assert view.partitions["x", 0] == state
            await client.put(keys.root + b"topics/x/garbage", b"{")  # ignored, not fatal
            await client.delete(keys.topic_meta("x"))
            with trio.fail_after(5):
                while "x" in view.topics:
                    await changes.wait()
                    changes = trio.Event()
            nursery.cancel_scope.cancel()


class RefusingProxy:
    """Between a coordinator and etcd: relays every call, but closes unanswered the
    connection of each request whose request line holds ``path`` (etcd out of reach
    for that one call). The client keeps its connections alive: every request on
    one is looked at (each comes whole in one read: a small request, sent at once)."""

    def __init__(self, etcd: str, path: bytes) -> None:
        self.etcd = endpoint_address(etcd)
        self.path = path
        self.refused = trio.Event()

    async def serve(self, *, task_status: trio.TaskStatus[str] = trio.TASK_STATUS_IGNORED) -> None:
        (listener,) = await trio.open_tcp_listeners(0, host="127.0.0.1")
        task_status.started(f"http://127.0.0.1:{listener.socket.getsockname()[1]}")
        await trio.serve_listeners(self._relay, [listener])

    async def _relay(self, client: trio.SocketStream) -> None:
        host, port = self.etcd.rsplit(":", 1)
        async with (
            client,
            await trio.open_tcp_stream(host, int(port)) as upstream,
            trio.open_nursery() as nursery,
        ):
            nursery.start_soon(self._requests, client, upstream, nursery.cancel_scope)
            nursery.start_soon(_pipe, upstream, client, nursery.cancel_scope)

    async def _requests(
        self, client: trio.SocketStream, upstream: trio.SocketStream, done: trio.CancelScope
    ) -> None:
        """Requests to etcd, until one names ``path`` (then the connection closes)."""
        with contextlib.suppress(trio.BrokenResourceError, trio.ClosedResourceError):
            while data := await client.receive_some(65536):
                if self.path in data.split(b"\r\n", 1)[0]:
                    self.refused.set()
                    break
                await upstream.send_all(data)
        done.cancel()


async def _pipe(source: trio.SocketStream, sink: trio.SocketStream, done: trio.CancelScope) -> None:
    """Bytes from ``source`` to ``sink`` until either side closes; then the relay ends."""
    with contextlib.suppress(trio.BrokenResourceError, trio.ClosedResourceError):
        while data := await source.receive_some(65536):
            await sink.send_all(data)
    done.cancel()


async def test_a_campaign_lost_while_etcd_cannot_take_the_revoke_goes_on(
    etcd: EtcdServer, cluster_id: str
) -> None:
    """A lookupd that loses the campaign revokes the lease it asked for; etcd out of
    reach for that call must not end it (it ended the lookupd: EtcdUnavailable out
    of Coordinator.run), and it coordinates once the coordinator's lease goes."""
    keys = ClusterKeys(cluster_id)
    first = _coordinator(etcd, keys, "l1")
    proxy = RefusingProxy(etcd.endpoints[0], b"/v3/lease/revoke")
    async with trio.open_nursery() as nursery:
        through = await nursery.start(proxy.serve)
        second = Coordinator(EtcdClient([through]), keys, CoordinatorInfo("l2", "l2:4161"), TTL)
        scope_first = trio.CancelScope()

        async def run_first() -> None:
            with scope_first:
                await first.run()

        nursery.start_soon(run_first)
        await _until(first, lambda: first.leading)
        await nursery.start(second.run)
        with trio.fail_after(5):
            await proxy.refused.wait()  # second lost, and its revoke found etcd gone
        assert not second.leading
        scope_first.cancel()  # l1 stops renewing: its lease expires in etcd
        await _until(second, lambda: second.leading)
        assert second.view.coordinator == CoordinatorInfo("l2", "l2:4161")
        nursery.cancel_scope.cancel()


async def test_brokers_registering_again_during_a_reconcile_are_not_missed(
    etcd: EtcdServer, cluster_id: str
) -> None:
    """Reduced from chaos seed 308 (benchmarks/chaos.py --brokers 3): every lease
    revoked; the coordinator, campaigning again, wrote every partition offline while
    the brokers registered again, and never looked again: a change that came while
    it was writing was lost, and the partitions stayed without a leader for good."""
    keys = ClusterKeys(cluster_id)
    async with EtcdClient(etcd.endpoints) as client:
        coordinator = _coordinator(etcd, keys, "l1")
        async with trio.open_nursery() as nursery:
            registrations = [Registration(client, keys, _broker(f"b{i}"), TTL) for i in (1, 2)]
            for registration in registrations:
                await nursery.start(registration.run)
            await nursery.start(coordinator.run)
            await _until(
                coordinator, lambda: coordinator.leading and len(coordinator.view.brokers) == 2
            )
            await coordinator.create_topic("many", TopicMeta(100, 2))

            def every_partition_led() -> bool:
                states = coordinator.view.topic_partitions("many")
                return len(states) == 100 and all(s.leader for _, s in states)

            await _until(coordinator, every_partition_led)
            for _ in range(3):
                # both brokers' leases go; each registers again at once (as a broker does)
                for registration in registrations:
                    await client.revoke(registration.lease)
                await trio.sleep(0.5)  # the coordinator reacts (or, stale, would seem done)
                with trio.move_on_after(5):
                    await _until(coordinator, every_partition_led)
                offline = [n for n, s in coordinator.view.topic_partitions("many") if not s.leader]
                assert offline == [], f"partitions {offline} left without a leader"
            nursery.cancel_scope.cancel()
