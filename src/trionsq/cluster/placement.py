"""The coordinator's decisions, without I/O: where replicas go and who leads.

Rules (docs/replication.md, "Leadership"):

- a partition's replicas sit on distinct brokers; creation deals partitions round
  a ring of the live brokers, least loaded first (fewest led partitions, then fewest
  replicas, then the broker id): partition i goes on the ring's next ``replicas``
  brokers after partition i-1's (so replica counts differ by at most one), led by
  the one of them that leads fewest so far;
- a partition's leader is a live member of its ISR, the first of them in replica
  order (the preferred leader when it is in sync); a publish is acknowledged only
  once every ISR member holds it, so any ISR member holds every acknowledged
  record and may lead without losing one;
- when no ISR member is alive the partition is offline (``leader == ""``): no
  replica outside the ISR is ever made leader (no unclean election); the ISR is
  kept so the first member that comes back leads again;
- a broker that died (its lease expired, or it registered again with a new lease:
  a restart) leaves every ISR; when it led, a new leader is chosen and the epoch
  grows, which fences the old leader's stream at every follower.
"""

from __future__ import annotations

from collections import Counter
from typing import TYPE_CHECKING

import attrs

from .keys import PartitionState

if TYPE_CHECKING:
    from collections.abc import Collection, Iterable, Mapping, Sequence

__all__ = [
    "PlacementError",
    "after_loss",
    "elect",
    "place_topic",
    "reconcile",
    "with_isr",
    "with_replica",
    "without_replica",
]


class PlacementError(ValueError):
    """A topic that cannot be placed: the reason, for an HTTP 400."""


def place_topic(
    partitions: int,
    replicas: int,
    brokers: Iterable[str],
    existing: Iterable[PartitionState] = (),
) -> list[PartitionState]:
    """Replicas for ``partitions`` new partitions on the live ``brokers``.

    ``existing``: the cluster's partitions so far, so leaders and replicas spread
    over every topic, not just this one.

    Raises:
        PlacementError: fewer live brokers than ``replicas``, or counts below 1.
    """
    live = sorted(set(brokers))
    if partitions < 1 or replicas < 1:
        raise PlacementError("partition and replica counts must be at least 1")
    if replicas > len(live):
        raise PlacementError(f"{replicas} replicas need {replicas} live brokers; {len(live)} are")
    led: Counter[str] = Counter()
    held: Counter[str] = Counter()
    for state in existing:
        led[state.leader] += 1
        held.update(state.replicas)
    ring = sorted(live, key=lambda b: (led[b], held[b], b))
    count = len(ring)
    placed: list[PartitionState] = []
    for index in range(partitions):
        chosen = [ring[(index * replicas + k) % count] for k in range(replicas)]
        leader = min(chosen, key=lambda b: (led[b], chosen.index(b)))
        led[leader] += 1
        ordered = (leader, *(b for b in chosen if b != leader))
        placed.append(PartitionState(replicas=ordered, isr=ordered, leader=leader, epoch=1))
    return placed


def elect(state: PartitionState, live: Collection[str]) -> PartitionState:
    """``state`` with a live in-sync leader if it lacks one (the epoch grows when the
    leader changes); unchanged when its leader is live and in sync."""
    if state.leader and state.leader in live and state.leader in state.isr:
        return state
    candidates = [r for r in state.replicas if r in state.isr and r in live]
    if not candidates:
        if not state.leader:
            return state
        return attrs.evolve(state, leader="", epoch=state.epoch + 1)
    leader = candidates[0]
    isr = tuple(r for r in state.isr if r in live) or (leader,)
    return PartitionState(state.replicas, isr, leader, state.epoch + 1)


def after_loss(state: PartitionState, lost: str, live: Collection[str]) -> PartitionState:
    """``state`` once broker ``lost`` died: out of the ISR, and a new leader if it led.

    When no other ISR member is alive the ISR is kept whole and the partition goes
    offline: each member holds every acknowledged record, so whichever comes back
    first may lead.
    """
    if lost not in state.isr:
        return state
    remaining = tuple(r for r in state.isr if r != lost)
    if state.leader and state.leader != lost and remaining:
        return attrs.evolve(state, isr=remaining)
    alive = [r for r in state.replicas if r in remaining and r in live and r != lost]
    if alive:
        isr = tuple(r for r in remaining if r in live and r != lost)
        return PartitionState(state.replicas, isr, alive[0], state.epoch + 1)
    if not state.leader:
        return state
    return attrs.evolve(state, leader="", epoch=state.epoch + 1)


def with_isr(state: PartitionState, isr: Sequence[str]) -> PartitionState:
    """``state`` with the ISR its leader proposes (replica order, leader kept in).

    Raises:
        PlacementError: a member that is not a replica, or an ISR without the leader.
    """
    members = set(isr)
    if not members <= set(state.replicas):
        raise PlacementError(f"ISR {sorted(members)} is not within the replicas {state.replicas}")
    if state.leader not in members:
        raise PlacementError("the leader must stay in its ISR")
    return attrs.evolve(state, isr=tuple(r for r in state.replicas if r in members))


def with_replica(state: PartitionState, target: str, live: Collection[str]) -> PartitionState:
    """A replica move's first step: ``target`` holds the partition too, outside the
    ISR until it has caught up (its leader proposes it then).

    Raises:
        PlacementError: ``target`` is not a live broker or already holds the partition.
    """
    if target not in live:
        raise PlacementError(f"broker {target} is not live")
    if target in state.replicas:
        raise PlacementError(f"broker {target} already holds a replica")
    return attrs.evolve(state, replicas=(*state.replicas, target))


def without_replica(state: PartitionState, source: str) -> PartitionState:
    """A replica move's last step: ``source`` holds it no more. When it led, the next
    in-sync replica (in replica order) leads and the epoch grows, as after a loss.

    Raises:
        PlacementError: ``source`` holds no replica, or no other in-sync one is left.
    """
    if source not in state.replicas:
        raise PlacementError(f"broker {source} holds no replica")
    replicas = tuple(r for r in state.replicas if r != source)
    isr = tuple(r for r in state.isr if r != source)
    if not isr:
        raise PlacementError(f"no in-sync replica but {source}: moving it would lose records")
    if state.leader != source:
        return PartitionState(replicas, isr, state.leader, state.epoch)
    leader = next(r for r in replicas if r in isr)
    return PartitionState(replicas, isr, leader, state.epoch + 1)


def reconcile(
    partitions: Mapping[tuple[str, int], PartitionState],
    revisions: Mapping[tuple[str, int], int],
    live: Mapping[str, int],
) -> dict[tuple[str, int], PartitionState]:
    """The partitions whose state must change, given the live brokers now.

    ``revisions``: each partition key's ``mod_revision``; ``live``: each live
    broker's registration revision. An ISR member is lost when it is not live, or
    when it registered after its partition's state was written: it restarted, and
    neither what it held in memory (a leadership) nor its disk (it may have been
    replaced) can be trusted until it has caught up again. Then every partition
    without a live in-sync leader gets one, if a live ISR member is left.
    """
    changed: dict[tuple[str, int], PartitionState] = {}
    for key, state in partitions.items():
        new = state
        written = revisions.get(key, 0)
        lost = {r for r in new.isr if r not in live or live[r] > written}
        for broker in sorted(lost):
            new = after_loss(new, broker, live)
        new = elect(new, live)
        if new != state:
            changed[key] = new
    return changed
