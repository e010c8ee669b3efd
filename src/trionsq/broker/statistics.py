"""The frozen snapshots /stats, the metrics and the admin stream report a channel and a
connection in (trio's ``statistics()`` rule: the owner builds one, readers only read)."""

from __future__ import annotations

import attrs

__all__ = ["ChannelStatistics", "ClientStatistics", "PubCount"]


@attrs.frozen
class ChannelStatistics:
    """A snapshot in the shape /stats reports a channel."""

    name: str
    depth: int
    in_flight_count: int
    deferred_count: int
    message_count: int
    requeue_count: int
    timeout_count: int
    client_count: int
    paused: bool
    max_attempts: int = 0
    """The dead-letter bound in force (0: none)."""
    dead_letter_count: int = 0
    ttl_ns: int = 0
    """The topic's TTL (0: none)."""
    expired_count: int = 0
    rate_limit_msgs: int = 0
    """The channel's rate limit (0: none), messages/s and bytes/s."""
    rate_limit_bytes: int = 0
    throttled_count: int = 0
    """Routing passes the channel's limit held back (shared by its partitions)."""


@attrs.frozen
class PubCount:
    """Messages one connection published to one topic."""

    topic: str
    count: int


@attrs.frozen(kw_only=True)
class ClientStatistics:
    """A snapshot of one TCP connection in the shape /stats reports it.

    Fields are in nsqd's JSON order (``ClientV2Stats``); the zone/region counters and
    the auth fields are omitted from the JSON when they hold their default. A count,
    a setting or a topology not given is nsqd's zero value (a producer's counts, a
    TubeMQ connection's V2 settings).
    """

    client_id: str
    hostname: str
    version: str = "V2"
    remote_address: str
    state: int
    """nsqd's client state: 0 init, 3 subscribed, 4 closing."""
    ready_count: int = 0
    in_flight_count: int = 0
    message_count: int = 0
    zone_local_msg_count: int = 0
    region_local_msg_count: int = 0
    global_msg_count: int = 0
    finish_count: int = 0
    requeue_count: int = 0
    connect_ts: int
    """Unix seconds."""
    sample_rate: int = 0
    deflate: bool = False
    snappy: bool = False
    user_agent: str
    authed: bool = False
    auth_identity: str = ""
    auth_identity_url: str = ""
    topology_zone: str = ""
    topology_region: str = ""
    pub_counts: tuple[PubCount, ...] = ()
    """Per topic, by topic name; empty for a connection that never published."""
    tls: bool = False
    tls_cipher_suite: str = ""
    tls_version: str = ""
    tls_negotiated_protocol: str = ""
    tls_negotiated_protocol_is_mutual: bool = False
    group_member: str = ""
    """trionsq's consumer groups: the member this connection belongs to (the JSON has
    it only when set)."""
    max_msgs_per_sec: int = 0
    """The consumer's own rate limit (IDENTIFY; 0: none, omitted from the JSON)."""
    max_bytes_per_sec: int = 0
