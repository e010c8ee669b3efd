"""The descriptor reserve of a cluster broker (issue 35): its replication listener
and its etcd client's connections, bounded, on top of a single broker's."""

from __future__ import annotations

from trionsq import NsqdConfig
from trionsq.http.kept_connections import MAX_IDLE
from trionsq.server.admission import (
    ETCD_CALLS_AT_ONCE,
    ETCD_WATCHES,
    LISTENER_SOCKETS,
    cluster_sockets,
    reserved_sockets,
)


def test_a_cluster_broker_reserves_its_listener_and_etcd_connections() -> None:
    single = NsqdConfig.loopback()
    endpoints = ("http://127.0.0.1:2379", "http://127.0.0.1:2380", "http://127.0.0.1:2381")
    clustered = NsqdConfig.loopback(etcd_endpoints=endpoints, cluster_id="c")
    per_endpoint = min(MAX_IDLE, ETCD_CALLS_AT_ONCE)
    expected = LISTENER_SOCKETS + 3 * per_endpoint + ETCD_CALLS_AT_ONCE + ETCD_WATCHES
    assert cluster_sockets(clustered) == expected == 2 + 9 + 3 + 1
    assert reserved_sockets(clustered) == reserved_sockets(single) + expected
