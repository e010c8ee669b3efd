"""A partition leader's view of its followers: what is committed, who lags. Sans-IO.

Ids are the log's record ids; an *end* is the id after the last record held (the
log's ``next_id``). The commit end (Kafka's high watermark) is the smallest end
over the ISR, the leader's own included: a record below it is on every in-sync
replica, so it may be acknowledged to its publisher and read by consumers.

A follower lags once it has been behind the leader's end for longer than
``max_lag`` seconds (the time it was last caught up is kept, as Kafka's
``replica.lag.time.max.ms`` does): the leader then asks etcd to drop it from the
ISR, and asks to add it back when it has caught up again. Until etcd confirms a
change, the leader counts with the larger of the two sets (a member leaving still
counts, a member joining already does), so nothing is committed that a replica
etcd may elect lacks.

Time (``now``, seconds) is passed in.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from collections.abc import Iterable

__all__ = ["FollowerProgress"]


class FollowerProgress:
    """The leader's record of each follower's end, and the commit end it implies."""

    __slots__ = (
        "_committed",
        "_since",
        "acked",
        "counted",
        "end",
        "isr",
        "joining",
        "leader",
        "max_lag",
    )

    def __init__(
        self,
        leader: str,
        isr: Iterable[str],
        end: int,
        *,
        now: float,
        max_lag: float,
        committed: int = 0,
    ) -> None:
        """``end``: the leader's log end now; ``committed``: the commit end it knew
        (what was committed before it led: at most ``end``)."""
        self.leader = leader
        self.isr: frozenset[str] = frozenset(isr) | {leader}
        """Confirmed by etcd."""
        self.joining: frozenset[str] = frozenset()
        """Proposed to etcd, already counted."""
        self.end = end
        self.acked: dict[str, int] = {}
        """Each follower's end as it last acknowledged (absent: none yet)."""
        self._since: dict[str, float] = {f: now for f in self.isr if f != leader}
        self.max_lag = max_lag
        self._committed = min(committed, end)
        self.counted: frozenset[str] = self.isr - {leader}
        """The followers whose acknowledgements commit records (the ISR and those
        joining it): kept as they change, as every append and ACK reads it."""

    def _count_with(self, isr: frozenset[str], joining: frozenset[str]) -> None:
        self.isr, self.joining = isr, joining
        self.counted = (isr | joining) - {self.leader}

    @property
    def committed(self) -> int:
        """The commit end: every record below it is on every counted replica."""
        return self._committed

    def _recompute(self) -> int:
        candidate = self.end
        if self.counted:  # none (replicas=1): everything appended is committed
            acked = self.acked
            candidate = min(candidate, *[acked.get(f, 0) for f in self.counted])
        if candidate > self._committed:
            self._committed = candidate
        return self._committed

    def appended(self, end: int, now: float) -> int:
        """The leader's log now ends at ``end``; returns the commit end (which grows
        here only when the leader has no follower to wait for)."""
        for follower, acked in self.acked.items():
            if acked >= self.end:
                self._since[follower] = now  # caught up until this append
        self.end = end
        return self._recompute()

    def ack(self, follower: str, end: int, now: float) -> int:
        """``follower`` holds every record below ``end`` durably; returns the commit end."""
        end = min(end, self.end)
        if end >= self.acked.get(follower, 0):
            self.acked[follower] = end
        if end >= self.end:
            self._since[follower] = now
        return self._recompute()

    def lagging(self, now: float) -> list[str]:
        """Counted followers (the ISR and those joining it) behind the leader's end for
        longer than ``max_lag``: a joiner whose proposal etcd never took would
        otherwise hold commits back for good once it stops acknowledging."""
        return sorted(
            f
            for f in self.counted
            if self.acked.get(f, 0) < self.end and now - self._since.get(f, now) > self.max_lag
        )

    def caught_up(self, replicas: Iterable[str]) -> list[str]:
        """Replicas outside the ISR that hold everything the leader has."""
        return sorted(
            f
            for f in replicas
            if f not in self.isr and f not in self.joining and self.acked.get(f, -1) >= self.end
        )

    def unconfirmed(self) -> list[str]:
        """Followers proposed to join that etcd has not confirmed: the proposal may
        have failed (etcd unreachable, or another write came first)."""
        return sorted(self.joining - self.isr)

    def propose_join(self, follower: str) -> None:
        """Count ``follower`` from now on (asked etcd to add it)."""
        self._count_with(self.isr, self.joining | {follower})

    def confirm(self, isr: Iterable[str], now: float) -> int:
        """etcd holds ``isr`` now: count exactly it; returns the commit end."""
        self._count_with(frozenset(isr) | {self.leader}, frozenset())
        for follower in self.isr:
            self._since.setdefault(follower, now)
        return self._recompute()

    def forget(self, follower: str) -> None:
        """``follower``'s stream ended: its next acknowledgement starts afresh (it may
        have truncated)."""
        self.acked.pop(follower, None)
