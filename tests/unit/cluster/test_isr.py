"""The leader's commit end and lag detection (Kafka's high watermark and ISR rules)."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from trionsq.cluster.isr import FollowerProgress


def test_commit_waits_for_every_isr_member() -> None:
    progress = FollowerProgress("a", ["a", "b", "c"], 1, now=0.0, max_lag=10.0, committed=1)
    assert progress.appended(11, now=1.0) == 1
    assert progress.ack("b", 11, now=1.1) == 1
    assert progress.ack("c", 6, now=1.2) == 6
    assert progress.ack("c", 11, now=1.3) == 11


def test_a_leader_alone_commits_at_once() -> None:
    progress = FollowerProgress("a", ["a"], 1, now=0.0, max_lag=10.0)
    assert progress.appended(5, now=0.0) == 5


def test_lagging_follower_is_found_after_max_lag() -> None:
    progress = FollowerProgress("a", ["a", "b", "c"], 1, now=0.0, max_lag=10.0)
    progress.appended(5, now=1.0)
    progress.ack("b", 5, now=2.0)
    assert progress.lagging(now=9.5) == []
    assert progress.lagging(now=10.5) == ["c"]  # caught up last at 0 (when it joined)
    progress.appended(9, now=12.0)
    assert progress.lagging(now=21.9) == ["c"]  # b was caught up until the append at 12
    assert progress.lagging(now=22.1) == ["b", "c"]


def test_an_idle_caught_up_follower_never_lags() -> None:
    progress = FollowerProgress("a", ["a", "b"], 1, now=0.0, max_lag=1.0)
    progress.appended(3, now=0.0)
    progress.ack("b", 3, now=0.1)
    assert progress.lagging(now=1000.0) == []


def test_dropping_a_member_counts_only_once_etcd_confirms() -> None:
    progress = FollowerProgress("a", ["a", "b", "c"], 1, now=0.0, max_lag=1.0, committed=1)
    progress.appended(4, now=0.0)
    progress.ack("b", 4, now=0.0)
    assert progress.committed == 1  # c still counts
    assert progress.confirm(["a", "b"], now=2.0) == 4


def test_a_joining_member_counts_before_etcd_confirms() -> None:
    progress = FollowerProgress("a", ["a"], 1, now=0.0, max_lag=1.0)
    progress.appended(4, now=0.0)
    progress.ack("b", 4, now=0.0)
    assert progress.caught_up(["a", "b", "c"]) == ["b"]
    progress.propose_join("b")
    assert progress.appended(6, now=0.1) == 4  # b must have 4..5 first
    assert progress.ack("b", 6, now=0.2) == 6


def test_a_join_etcd_never_confirmed_stays_asked_and_lags_like_a_member() -> None:
    """A joiner whose proposal failed (etcd down) is asked again, and once it stops
    acknowledging it lags as an ISR member does: it must not hold commits for good."""
    progress = FollowerProgress("a", ["a"], 1, now=0.0, max_lag=1.0)
    progress.appended(4, now=0.0)
    progress.ack("b", 4, now=0.0)
    progress.propose_join("b")
    assert progress.unconfirmed() == ["b"]
    assert progress.appended(6, now=0.5) == 4  # b counts, and b went silent
    assert progress.lagging(now=1.2) == []
    assert progress.lagging(now=1.6) == ["b"]
    assert progress.confirm(["a"], now=2.0) == 6  # etcd's ISR never had it
    assert progress.unconfirmed() == []


@given(
    st.lists(
        st.one_of(
            st.tuples(st.just("append"), st.integers(0, 5)),
            st.tuples(st.sampled_from(["b", "c"]), st.integers(0, 40)),
        ),
        max_size=50,
    )
)
def test_commit_never_passes_an_isr_member_nor_goes_back(
    steps: list[tuple[str, int]],
) -> None:
    progress = FollowerProgress("a", ["a", "b", "c"], 1, now=0.0, max_lag=5.0, committed=1)
    holds = {"b": 1, "c": 1}
    last = progress.committed
    for when, (what, n) in enumerate(steps):
        if what == "append":
            progress.appended(progress.end + n, now=float(when))
        else:
            holds[what] = min(n, progress.end)
            progress.ack(what, n, now=float(when))
        committed = progress.committed
        assert committed >= last
        assert committed <= progress.end
        assert committed <= max(progress.acked.get(f, 0) for f in ["b"]) or committed == 1
        assert all(progress.acked.get(f, 0) >= committed or committed == 1 for f in ["b", "c"])
        last = committed
