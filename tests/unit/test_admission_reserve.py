"""The descriptor reserve of a cluster broker (issue 35): its replication listener
and its etcd client's connections, bounded, on top of a single broker's."""

from __future__ import annotations

from trionsq import NsqdConfig
from trionsq.descriptors import DescriptorBudget
from trionsq.http.kept_connections import MAX_IDLE
from trionsq.server.admission import (
    ETCD_CALLS_AT_ONCE,
    ETCD_WATCHES,
    LISTENER_SOCKETS,
    WAITING_WINDOW,
    ConnectionGate,
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


def test_ping_says_replication_waits_only_while_its_refusals_go_on() -> None:
    """Claimed replication connections refused by this budget degrade /ping (the
    text names how many and the limit to raise) until none was refused for
    WAITING_WINDOW seconds, or every claim is held."""
    now = [100.0]
    budget = DescriptorBudget(60, 10)  # the smallest pool: 32
    gate = ConnectionGate(budget, clock=lambda: now[0])
    budget.claim_replication(40)  # more than the pool's shared room
    assert gate.replication_waiting() is None  # not refused yet: dialing is no waiting
    held = 0
    while gate.admit_replication("t/0 from b:1"):
        held += 1
    assert 0 < held < 40
    waiting = gate.replication_waiting()
    assert waiting is not None
    assert waiting.startswith(f"descriptor budget full: {40 - held} replication connection(s)")
    assert "raise it with ulimit -n" in waiting
    now[0] += WAITING_WINDOW + 0.1
    assert gate.replication_waiting() is None  # nobody asked again: nothing waits
    assert not gate.admit_replication("t/0 from b:1")
    assert gate.replication_waiting() is not None
    budget.claim_replication(held)  # the roles want no more than what is held
    assert gate.replication_waiting() is None
