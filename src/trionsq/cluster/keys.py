"""Where a trionsq cluster keeps its state in etcd, and the JSON of each value.

Every key lives under ``/trionsq/<cluster-id>/`` (docs/replication.md, "Keys"):

- ``brokers/<broker-id>``: a live broker (``BrokerInfo``), on the broker's lease, so
  it is gone within the lease TTL of the broker's death;
- ``coordinator``: the lookupd that coordinates (``CoordinatorInfo``), on that
  lookupd's lease; created only if absent (the election). Its ``create_revision``
  is the coordinator's epoch: it grows with every new coordinator, and each write
  a coordinator makes compares it, so a deposed one writes nothing;
- ``topics/<topic>/meta``: the topic's partition and replica counts (``TopicMeta``);
- ``topics/<topic>/partitions/<n>``: one partition's replicas, leader, ISR and
  leader epoch (``PartitionState``), changed only by compare-and-swap on its
  ``mod_revision``.

Pure: names and JSON, no I/O.
"""

from __future__ import annotations

from typing import Final, TypeVar

import attrs

from ..serialization import JsonDecodeError, dumps, structure_json

__all__ = [
    "BrokerInfo",
    "ClusterKeys",
    "CoordinatorInfo",
    "JsonDecodeError",
    "PartitionState",
    "TopicMeta",
    "decode",
    "encode",
]

ROOT: Final = "/trionsq/"

T = TypeVar("T")


@attrs.frozen
class BrokerInfo:
    """How clients and other brokers reach a live broker."""

    id: str
    broadcast_address: str
    tcp_port: int
    http_port: int
    replication_port: int
    version: str = ""

    @property
    def replication_address(self) -> str:
        """``host:port`` of its replication listener."""
        return f"{self.broadcast_address}:{self.replication_port}"


@attrs.frozen
class CoordinatorInfo:
    """The lookupd that coordinates, and where its HTTP API is."""

    id: str
    http_address: str


@attrs.frozen
class TopicMeta:
    """A replicated topic's shape, fixed at creation (partitions may grow)."""

    partitions: int
    replicas: int
    min_isr: int = 1
    """Fewest in-sync replicas (leader included) that may acknowledge a publish:
    fewer, and publishes get ``E_FAILED_ON_NOT_WRITABLE``."""
    ext: bool = False
    ordered: bool = False


@attrs.frozen
class PartitionState:
    """One partition's placement and leadership.

    ``replicas``: the brokers that hold it, the preferred leader first; ``isr``: those
    that hold every committed record (the leader among them while there is one);
    ``leader``: ``""`` while no in-sync replica is alive (the partition is offline
    until one returns: no unclean election); ``epoch``: grows with every leader
    change, fencing the old leader's stream at the followers.
    """

    replicas: tuple[str, ...]
    isr: tuple[str, ...]
    leader: str
    epoch: int = 0

    @property
    def followers(self) -> tuple[str, ...]:
        """The replicas other than the leader."""
        return tuple(r for r in self.replicas if r != self.leader)


@attrs.frozen
class ClusterKeys:
    """The key names of one cluster."""

    cluster: str

    def __attrs_post_init__(self) -> None:
        if not self.cluster or "/" in self.cluster:
            raise ValueError(f"cluster id {self.cluster!r}: one non-empty path segment expected")

    @property
    def root(self) -> bytes:
        return f"{ROOT}{self.cluster}/".encode()

    @property
    def brokers(self) -> bytes:
        """The prefix of every live broker's key."""
        return self.root + b"brokers/"

    def broker(self, broker_id: str) -> bytes:
        return self.brokers + broker_id.encode()

    @property
    def coordinator(self) -> bytes:
        return self.root + b"coordinator"

    @property
    def topics(self) -> bytes:
        """The prefix of every topic's keys."""
        return self.root + b"topics/"

    def topic_meta(self, topic: str) -> bytes:
        return self.topics + topic.encode() + b"/meta"

    def partition(self, topic: str, partition: int) -> bytes:
        return self.topics + f"{topic}/partitions/{partition}".encode()

    def parse_topic_key(self, key: bytes) -> tuple[str, int | None] | None:
        """``(topic, None)`` for a meta key, ``(topic, n)`` for a partition key."""
        if not key.startswith(self.topics):
            return None
        parts = key[len(self.topics) :].decode(errors="replace").split("/")
        if len(parts) == 2 and parts[1] == "meta":
            return parts[0], None
        if len(parts) == 3 and parts[1] == "partitions" and parts[2].isdigit():
            return parts[0], int(parts[2])
        return None

    def broker_id_of(self, key: bytes) -> str | None:
        """The broker id of a ``brokers/`` key."""
        if not key.startswith(self.brokers):
            return None
        return key[len(self.brokers) :].decode(errors="replace")


def encode(value: BrokerInfo | CoordinatorInfo | TopicMeta | PartitionState) -> bytes:
    """A value as the JSON etcd keeps."""
    return dumps(value)


def decode(data: bytes, kind: type[T]) -> T:
    """A value read from etcd.

    Raises:
        JsonDecodeError: not the JSON of ``kind``.
    """
    return structure_json(data, kind)
