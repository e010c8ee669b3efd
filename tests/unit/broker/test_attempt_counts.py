"""Attempt counts a restart must keep (issue 30): what a channel persists, what a
bounded channel journals before its frames go out, what a restart brings back, and a
dead letter that stays in its channel until the move is done."""

from __future__ import annotations

from typing import TYPE_CHECKING

from trionsq.broker.channel import Channel, Consumer
from trionsq.dispatch.routing import route
from trionsq.queues.cursor import ChannelCursor
from trionsq.queues.cursor_state import (
    ChannelState,
    capture_state,
    decode_state,
    encode_state,
    restore_channel,
)
from trionsq.queues.delivery_journal import DeliveryJournal
from trionsq.queues.memory_log import MemoryLog

if TYPE_CHECKING:
    from pathlib import Path

WALL = 1_700_000_000_000_000_000


def make(count: int, journal: DeliveryJournal | None = None) -> tuple[MemoryLog, Channel]:
    log = MemoryLog()
    log.append([b"m%d" % i for i in range(count)], timestamp=WALL)
    return log, Channel("ch", log, 1, max_msg_timeout=900.0, journal=journal)


def subscribed(channel: Channel, client_id: int, rdy: int) -> None:
    consumer = Consumer(client_id, msg_timeout=60.0)
    consumer.rdy = rdy
    channel.subscribe(consumer)


def saved_and_restored(log: MemoryLog, channel: Channel) -> dict[int, int]:
    """The channel's state through its file format and back: the counts restored."""
    state = decode_state(encode_state(captured(channel)))
    return restore_channel(log, state, now_monotonic=0.0, now_wall_ns=WALL).attempts


def captured(channel: Channel) -> ChannelState:
    assert isinstance(channel.cursor, ChannelCursor)
    return capture_state(
        channel.cursor,
        channel.deferred,
        paused=False,
        now_monotonic=0.0,
        now_wall_ns=WALL,
        attempts=channel.delivery_counts(),
    )


def test_the_state_keeps_the_count_of_every_message_delivered_and_not_finished() -> None:
    log, channel = make(6)
    subscribed(channel, 1, 4)
    route(channel, 0.0, WALL)  # 1..4 in flight
    channel.finish(1, 2)
    channel.requeue(1, 3, 0.0, 0.0)  # 3 back with one delivery, behind 5 and 6
    route(channel, 0.0, WALL)  # 5 and 6
    channel.finish(1, 5)
    route(channel, 0.0, WALL)  # 3 again: its 2nd delivery
    channel.requeue(1, 4, 0.0, 0.0)  # waiting, delivered once
    assert saved_and_restored(log, channel) == {1: 1, 3: 2, 4: 1, 6: 1}
    # nothing delivered: the member is left out, as in files written before it
    assert b'"attempts"' not in encode_state(captured(make(1)[1]))


def test_a_restored_count_goes_on_and_holds_against_the_bound() -> None:
    _, channel = make(3)
    channel.restore_attempts({1: 2, 2: 3})
    channel.max_attempts = 3
    subscribed(channel, 1, 10)
    sent = route(channel, 0.0, WALL)[1]
    assert [(d.record.internal_id, d.attempts) for d in sent] == [(1, 3), (3, 1)]
    assert [(letter.record.internal_id, letter.deliveries) for letter in channel.dead_letters] == [
        (2, 3)
    ]  # delivered 3 times before the restart, which put it back: it leaves


def test_a_dead_letter_stays_unfinished_until_it_is_moved() -> None:
    _, channel = make(2)
    channel.max_attempts = 1
    subscribed(channel, 1, 1)
    route(channel, 0.0, WALL)
    channel.requeue(1, 1, 0.0, 0.0)
    assert [letter.record.internal_id for letter in channel.dead_letters] == [1]
    assert channel.cursor.confirmed_id == 1  # a crash now finds it in the channel
    assert channel.delivery_counts() == [(1, 1)]
    letters, channel.dead_letters = channel.dead_letters, []
    channel.dead_letters_moved(letters)
    assert channel.cursor.confirmed_id == 2
    assert channel.delivery_counts() == []


def test_a_bounded_channel_journals_each_pass_once_before_its_frames(tmp_path: Path) -> None:
    journal, _ = DeliveryJournal.open(tmp_path / "ch.state")
    _, channel = make(6, journal)
    subscribed(channel, 1, 3)
    subscribed(channel, 2, 3)
    route(channel, 0.0, WALL)
    assert journal.writes == 0  # no bound: nothing journaled
    channel.max_attempts = 5
    channel.requeue(1, 1, 0.0, 0.0)
    channel.requeue(2, 4, 0.0, 0.0)
    sent = route(channel, 0.0, WALL)  # both again, one to each consumer
    assert sorted((d.record.internal_id, d.attempts) for ds in sent.values() for d in ds) == [
        (1, 2),
        (4, 2),
    ]
    assert journal.writes == 1  # one write for the pass, whatever the consumers
    journal.close()
    _, replay = DeliveryJournal.open(tmp_path / "ch.state")
    assert replay.counts == {1: 2, 4: 2}
