"""metadata.json: a snapshot of a live broker, the format, and repair from the disk."""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING

import httpx
import pytest
from hypothesis import given
from hypothesis import strategies as st

from trionsq import NsqdConfig, serve_nsqd
from trionsq.broker.metadata import (
    ChannelMeta,
    Metadata,
    MetadataError,
    TopicMeta,
    decode_metadata,
    encode_metadata,
    load_metadata,
    metadata_path,
    repair,
    save_metadata,
    snapshot,
)

if TYPE_CHECKING:
    from pathlib import Path

    import trio

    from trionsq.nursery_tree import BoundAddresses


def topic(
    name: str,
    *channels: ChannelMeta,
    partitions: int = 1,
    paused: bool = False,
    ext: bool = False,
    ordered: bool = False,
) -> TopicMeta:
    return TopicMeta(name, partitions, paused, ext, ordered, channels)


def meta(*topics: TopicMeta) -> Metadata:
    return Metadata(1, topics)


async def test_snapshot_of_a_live_broker(nursery: trio.Nursery) -> None:
    addresses: BoundAddresses = await nursery.start(serve_nsqd, NsqdConfig.loopback())
    broker = addresses.broker
    assert snapshot(broker) == meta()
    assert addresses.http is not None
    host, port = addresses.http
    async with httpx.AsyncClient(base_url=f"http://{host}:{port}") as http:
        for path, params in [
            ("/topic/create", {"topic": "orders"}),
            ("/channel/create", {"topic": "orders", "channel": "billing"}),
            ("/channel/create", {"topic": "orders", "channel": "audit"}),
            ("/channel/create", {"topic": "orders", "channel": "tail#ephemeral"}),
            ("/channel/pause", {"topic": "orders", "channel": "billing"}),
            ("/topic/create", {"topic": "clicks"}),
            ("/topic/pause", {"topic": "clicks"}),
            ("/topic/create", {"topic": "scratch#ephemeral"}),
            ("/channel/create", {"topic": "scratch#ephemeral", "channel": "c"}),
        ]:
            response = await http.post(path, params=params)
            assert response.status_code == 200, (path, response.text)
    broker.publish("orders", [b"a", b"b"], timestamp=1)
    assert "scratch#ephemeral" in broker.topics
    expected = meta(
        topic("clicks", paused=True),
        topic("orders", ChannelMeta("audit", paused=False), ChannelMeta("billing", paused=True)),
    )
    assert snapshot(broker) == expected
    assert decode_metadata(encode_metadata(snapshot(broker))) == expected

    broker.set_channel_paused("orders", "billing", paused=False)
    broker.set_topic_paused("clicks", paused=False)
    broker.delete_channel("orders", 0, "audit")
    assert snapshot(broker) == meta(
        topic("clicks"), topic("orders", ChannelMeta("billing", paused=False))
    )


def test_the_documented_format() -> None:
    m = meta(topic("orders", ChannelMeta("billing", paused=True), partitions=2, ext=True))
    data = encode_metadata(m)
    assert data == (
        b'{"version":1,"topics":[{"name":"orders","partitions":2,"paused":false,'
        b'"ext":true,"ordered":false,"channels":[{"name":"billing","paused":true}]}]}'
    )
    assert decode_metadata(data) == m


names = st.from_regex(r"[.a-zA-Z0-9_-]{1,20}", fullmatch=True)


@st.composite
def metadatas(draw: st.DrawFn) -> Metadata:
    topics = []
    for name in sorted(draw(st.sets(names, max_size=5))):
        channels = tuple(
            ChannelMeta(c, draw(st.booleans())) for c in sorted(draw(st.sets(names, max_size=4)))
        )
        topics.append(
            TopicMeta(
                name,
                draw(st.integers(1, 64)),
                draw(st.booleans()),
                draw(st.booleans()),
                draw(st.booleans()),
                channels,
                publish_limit_msgs=draw(st.integers(0, 10**8)),
                publish_limit_mode=draw(st.sampled_from(["throttle", "refuse"])),
            )
        )
    return Metadata(1, tuple(topics))


@given(metadatas())
def test_round_trip(m: Metadata) -> None:
    assert decode_metadata(encode_metadata(m)) == m


GOOD_TOPIC = '{"name":"t","partitions":1,"paused":false,"ext":false,"ordered":false,"channels":[]}'


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("", "metadata.json: not JSON"),
        ('{"version":1,"topics":[', "metadata.json: not JSON"),
        ("[]", "expected a JSON object"),
        ('{"topics":[]}', "no integer format version"),
        (
            '{"version":2,"topics":[]}',
            r"format version 2 is not supported \(this trionsq reads 1\)",
        ),
        ('{"version":1}', r"required field missing @ \$\.topics"),
        ('{"version":1,"topics":{}}', r"@ \$\.topics"),
        (
            '{"version":1,"topics":[{"name":"t"}]}',
            r"required field missing @ \$\.topics\[0\]\.partitions",
        ),
        (
            '{"version":1,"topics":[{"name":"t","partitions":"1","paused":false,"ext":false,'
            '"ordered":false,"channels":[]}]}',
            r"expected int @ \$\.topics\[0\]\.partitions",
        ),
        (
            '{"version":1,"topics":[{"name":"t","partitions":1,"paused":false,"ext":false,'
            '"ordered":false,"channels":[{"name":"c"}]}]}',
            r"required field missing @ \$\.topics\[0\]\.channels\[0\]\.paused",
        ),
        (f'{{"version":1,"topics":[{GOOD_TOPIC},{GOOD_TOPIC}]}}', "topic 't': listed twice"),
        (
            '{"version":1,"topics":[{"name":"t","partitions":0,"paused":false,"ext":false,'
            '"ordered":false,"channels":[]}]}',
            "partitions must be at least 1, got 0",
        ),
        (
            '{"version":1,"topics":[{"name":"t#ephemeral","partitions":1,"paused":false,'
            '"ext":false,"ordered":false,"channels":[]}]}',
            "not a valid durable topic name",
        ),
        (
            '{"version":1,"topics":[{"name":"a b","partitions":1,"paused":false,"ext":false,'
            '"ordered":false,"channels":[]}]}',
            "not a valid durable topic name",
        ),
        (
            '{"version":1,"topics":[{"name":"t","partitions":1,"paused":false,"ext":false,'
            '"ordered":false,"channels":[{"name":"c","paused":false},{"name":"c","paused":true}]}]}',
            "channel 'c' listed twice",
        ),
        (
            '{"version":1,"topics":[{"name":"t","partitions":1,"paused":false,"ext":false,'
            '"ordered":false,"channels":[{"name":"c#ephemeral","paused":false}]}]}',
            "channel 'c#ephemeral' is not a valid durable name",
        ),
        (
            '{"version":1,"topics":[{"name":"t","partitions":1,"paused":false,"ext":false,'
            '"ordered":false,"channels":[],"publish_limit_msgs":5,"publish_limit_mode":"drop"}]}',
            "topic 't': publish_limit_mode must be throttle or refuse, got 'drop'",
        ),
    ],
)
def test_bad_metadata_is_refused_clearly(text: str, message: str) -> None:
    with pytest.raises(MetadataError, match=message):
        decode_metadata(text.encode())


def test_unknown_members_are_ignored() -> None:
    data = b'{"version":1,"written_by":"x","topics":[' + GOOD_TOPIC.encode()[:-1] + b',"x":1}]}'
    assert decode_metadata(data) == meta(topic("t"))


def test_repair_adds_what_the_disk_shows(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.WARNING, "trionsq.storage")
    stored = meta(
        topic("known", ChannelMeta("c", paused=True), paused=True),
        topic("wide", partitions=1, ext=True),
    )
    repaired = repair(
        stored,
        {"known": 1, "new": 3, "wide": 4, "gone#ephemeral": 1, "bad name": 1, "empty": 0},
        {("known", 0): ["c", "d"], ("only-states", 1): ["x"], ("new", 0): ["n", "n#ephemeral"]},
    )
    assert repaired == meta(
        topic(
            "known",
            ChannelMeta("c", paused=True),
            ChannelMeta("d", paused=False),
            paused=True,
        ),
        topic("new", ChannelMeta("n", paused=False), partitions=3),
        topic("only-states", ChannelMeta("x", paused=False), partitions=2),
        topic("wide", partitions=4, ext=True),
    )
    assert (
        "metadata repaired from disk: 2 topic(s) added, 1 partition count(s) raised, "
        "3 channel(s) added"
    ) in caplog.text
    assert "topic new (3 partition(s)) found on disk, added" in caplog.text
    assert "topic wide has 4 partition(s) on disk, not 1" in caplog.text
    assert "channel known/d has a state file, added" in caplog.text


def test_repair_changes_nothing_when_metadata_is_current(caplog: pytest.LogCaptureFixture) -> None:
    stored = meta(topic("t", ChannelMeta("c", paused=False), partitions=2))
    assert repair(stored, {"t": 1}, {("t", 1): ["c"]}) is stored
    assert repair(meta(), {}) == meta()
    assert caplog.text == ""


def test_files(tmp_path: Path) -> None:
    data_path = tmp_path / "data"
    assert metadata_path(data_path) == data_path / "metadata.json"
    assert load_metadata(data_path) is None
    m = meta(topic("t", ChannelMeta("c", paused=False)))
    save_metadata(data_path, m)
    assert load_metadata(data_path) == m
    (data_path / "metadata.json").write_bytes(b'{"version":9,"topics":[]}')
    with pytest.raises(MetadataError, match=r"data/metadata\.json: format version 9"):
        load_metadata(data_path)
