"""A lookupd's side of the cluster: the coordinator campaign, ``/lookup`` from etcd,
``/topic/create`` and ``/topic/partition/move`` through the coordinator
(lookupd/replicated.py's protocol)."""

from __future__ import annotations

import contextlib
from typing import TYPE_CHECKING

from ..lookupd.replicated import ReplicationRefused
from .coordinator import Coordinator, NotCoordinator
from .etcd import EtcdClient, EtcdUnavailable
from .etcd_json import EtcdReplyError
from .keys import BrokerInfo, ClusterKeys, CoordinatorInfo
from .keys import TopicMeta as ClusterTopicMeta
from .placement import PlacementError

if TYPE_CHECKING:
    from collections.abc import Iterator

    import trio

    from ..lookupd.topics import TopicMeta

__all__ = ["ClusterLookup"]


def broker_json(info: BrokerInfo) -> dict[str, str | int]:
    """A broker as Youzan's ``/lookup`` lists it (its PeerY)."""
    return {
        "id": info.id,
        "remote_address": info.id,
        "hostname": info.broadcast_address,
        "broadcast_address": info.broadcast_address,
        "tcp_port": info.tcp_port,
        "http_port": info.http_port,
        "version": info.version,
        "distributed_id": info.id,
    }


@contextlib.contextmanager
def _refusals() -> Iterator[None]:
    """The coordinator's refusals as the HTTP 400 texts of lookupd/replicated.py."""
    try:
        yield
    except NotCoordinator:
        raise ReplicationRefused("E_FAILED_ON_NOT_LEADER") from None
    except PlacementError as error:
        raise ReplicationRefused(str(error)) from None
    except EtcdUnavailable:
        raise ReplicationRefused("E_FAILED_ON_NOT_WRITABLE etcd unreachable") from None
    except EtcdReplyError as error:
        raise ReplicationRefused(f"E_FAILED_ON_NOT_WRITABLE {error}") from None


class ClusterLookup:
    """The coordinator of this lookupd and the views it answers from."""

    def __init__(
        self, client: EtcdClient, cluster_id: str, me: CoordinatorInfo, ttl: float
    ) -> None:
        self.coordinator = Coordinator(client, ClusterKeys(cluster_id), me, ttl)

    async def run(self, *, task_status: trio.TaskStatus[None]) -> None:
        """Campaign and follow etcd until cancelled."""
        await self.coordinator.run(task_status=task_status)

    def lookup(
        self, topic: str, *, write: bool, partition: str, metainfo: bool
    ) -> dict[str, object] | None:
        """Each partition's leader, for writers and readers alike (``write`` changes
        nothing): a follower refuses both, so only leaders are listed."""
        view = self.coordinator.view
        meta = view.topics.get(topic)
        if meta is None:
            return None
        partitions: dict[str, dict[str, str | int]] = {}
        for index, state in view.topic_partitions(topic):
            info = view.brokers.get(state.leader)
            if info is None or (partition != "*" and partition != str(index)):
                continue
            partitions[str(index)] = broker_json(info)
        producers = list({json["id"]: json for json in partitions.values()}.values())
        document: dict[str, object] = {"producers": producers, "partitions": partitions}
        if metainfo:
            document["meta"] = {
                "partition_num": meta.partitions,
                "replica": meta.replicas,
                "extend_support": meta.ext,
                "ordered": meta.ordered,
                "multi_part": False,
                "disable_channel_auto_create": False,
            }
        return document

    async def create(self, topic: str, meta: TopicMeta, min_isr: int) -> None:
        wanted = ClusterTopicMeta(
            partitions=meta.partition_num,
            replicas=meta.replica,
            min_isr=min(min_isr, meta.replica),
            ext=meta.extend_support,
            ordered=meta.ordered,
        )
        with _refusals():
            await self.coordinator.create_topic(topic, wanted)

    async def move(
        self, topic: str, partition: int, source: str, target: str, within: float
    ) -> dict[str, object]:
        with _refusals():
            state = await self.coordinator.move_replica(
                topic, partition, source, target, within=within
            )
        return {
            "topic": topic,
            "partition": partition,
            "replicas": list(state.replicas),
            "isr": list(state.isr),
            "leader": state.leader,
            "epoch": state.epoch,
        }
