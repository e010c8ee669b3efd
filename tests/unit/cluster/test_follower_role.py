"""A follower role's waiting consumer state (cluster/roles.py): applied once, at the
role's end at the latest, before the role that replaces it is made."""

from __future__ import annotations

from trionsq.broker.topic import Partition
from trionsq.cluster.epochs import EpochHistory
from trionsq.cluster.keys import PartitionState
from trionsq.cluster.roles import FollowerRole, PartitionFiles


def _role() -> tuple[FollowerRole, list[bytes]]:
    partition = Partition("q", 0, max_msg_timeout=60.0, mem_queue_size=100, ephemeral=False)
    state = PartitionState(("a", "b"), ("a", "b"), "a", 3)
    role = FollowerRole(partition, state, PartitionFiles(EpochHistory.loads(b"[]")))
    applied: list[bytes] = []
    role.apply_state = applied.append
    return role, applied


def test_the_last_waiting_state_is_applied_once_at_the_end() -> None:
    role, applied = _role()
    role.pending_state = b"first"
    role.pending_state = b"second"  # a newer shipment replaces the waiting one
    role.end()
    assert applied == [b"second"]
    assert role.scope.cancel_called
    role.end()  # ending again applies nothing more
    assert applied == [b"second"]


def test_take_state_applies_what_waits_and_nothing_when_none_does() -> None:
    role, applied = _role()
    role.take_state()
    assert applied == []
    role.pending_state = b"state"
    role.take_state()
    role.take_state()
    assert applied == [b"state"]
    assert role.pending_state is None
