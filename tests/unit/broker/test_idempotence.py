"""The idempotence table, Broker.publish_once and the rebuild at open, without sockets."""

from __future__ import annotations

import errno
from typing import TYPE_CHECKING

import orjson
import pytest

from trionsq import goflags
from trionsq.broker.broker import Broker
from trionsq.broker.health import StorageFault
from trionsq.broker.idempotence import (
    IdempotenceTable,
    Stored,
    key_digest,
    restore,
)
from trionsq.broker.storage import Storage
from trionsq.broker.topic import Partition
from trionsq.config import ConfigError, NsqdConfig
from trionsq.dispatch.router import ChannelRunner
from trionsq.nsqd_command import build_nsqd_config
from trionsq.options import NSQD_FLAGS
from trionsq.protocol.ext_header import check_ext_header
from trionsq.protocol.message import EXT_VERSION_JSON
from trionsq.queues.record import Record
from trionsq.queues.topic_log import TopicLog

if TYPE_CHECKING:
    from collections.abc import Sequence
    from pathlib import Path

    import trio

WALL = 1_700_000_000_000_000_000


def record(internal_id: int, *, trace_id: int = 0) -> Record:
    """A record at offset ``100 * id``, 100 bytes long."""
    return Record(100 * internal_id, 100, internal_id, WALL, b"b", trace_id=trace_id)


def header(key: object = None, **extra: object) -> bytes:
    fields = dict(extra)
    if key is not None:
        fields["##idempotency_key"] = key
    return orjson.dumps(fields)


# ---------------------------------------------------------------- the table


def test_a_remembered_key_answers_where_its_record_is() -> None:
    table = IdempotenceTable(10)
    table.remember([key_digest("a")], [record(7, trace_id=99)])
    assert table.get(key_digest("a")) == Stored(7, 99, 700, 100)
    assert table.get(key_digest("b")) is None
    assert len(table) == 1


def test_the_oldest_key_goes_past_the_window() -> None:
    table = IdempotenceTable(3)
    for number, key in enumerate("abcd", start=1):
        table.remember([key_digest(key)], [record(number)])
    assert key_digest("a") not in table
    assert [table.get(key_digest(k)) is not None for k in "bcd"] == [True] * 3
    assert len(table) == 3


def test_a_key_remembered_again_keeps_its_first_record_and_place() -> None:
    table = IdempotenceTable(2)
    table.remember([key_digest("a")], [record(1)])
    table.remember([key_digest("a")], [record(5)])
    assert table.get(key_digest("a")) == Stored(1, 0, 100, 100)
    table.remember([key_digest("b")], [record(2)])
    table.remember([key_digest("c")], [record(3)])  # "a" is the oldest: it goes
    assert key_digest("a") not in table
    assert len(table) == 2


def test_split_keeps_messages_without_keys_and_the_first_of_new_keys() -> None:
    table = IdempotenceTable(10)
    table.remember([key_digest("old")], [record(1)])
    kept, digests = table.split(["a", None, "old", "a", "b", None, "b"])
    assert kept == [0, 1, 4, 5]
    assert digests == [key_digest("a"), None, key_digest("b"), None]
    assert len(table) == 1  # splitting remembers nothing


def test_remembering_a_batch_evicts_past_the_window_once_it_is_in() -> None:
    table = IdempotenceTable(2)
    digests = [key_digest(k) for k in "abc"]
    table.remember([digests[0], None, digests[1], digests[2]], [record(n) for n in range(1, 5)])
    assert [d in table for d in digests] == [False, True, True]
    assert table.get(digests[2]) == Stored(4, 0, 400, 100)  # records pair with digests


def test_eviction_stays_linear_over_many_windows() -> None:
    table = IdempotenceTable(1000)
    for number in range(1, 200_001):
        table.remember([key_digest(str(number))], [record(number)])
    assert len(table) == 1000
    assert table.get(key_digest("199001")) is not None
    assert table.get(key_digest("199000")) is None


def test_a_window_must_be_positive() -> None:
    with pytest.raises(ValueError, match="positive"):
        IdempotenceTable(0)


def test_digests_are_16_bytes_and_tell_keys_apart() -> None:
    assert len(key_digest("k" * 256)) == 16
    assert key_digest("a") != key_digest("b")
    assert key_digest("é") == key_digest("é")


# ---------------------------------------------------------------- the header rule


@pytest.mark.parametrize(
    "key",
    ["k", "k" * 256, "é" * 128, "\U0001f600" * 64, "with space", "0"],
)
def test_valid_keys_pass_the_header_check(key: str) -> None:
    checked = check_ext_header(header(key))
    assert not isinstance(checked, Exception)
    assert checked.idempotency_key == key


@pytest.mark.parametrize(
    "raw",
    [
        b'{"##idempotency_key":""}',
        b'{"##idempotency_key":null}',
        b'{"##idempotency_key":5}',
        b'{"##idempotency_key":true}',
        b'{"##idempotency_key":["a"]}',
        b'{"##idempotency_key":{"a":"b"}}',
        header("k" * 257),
        header("é" * 129),  # 258 UTF-8 bytes in 129 characters
    ],
)
def test_anything_else_in_the_key_is_an_invalid_json_header(raw: bytes) -> None:
    checked = check_ext_header(raw)
    assert isinstance(checked, Exception)
    assert (checked.code, checked.fatal) == ("E_INVALID_JSON_HEADER", False)
    assert checked.description == (
        "fail to parse json header:##idempotency_key must be a non-empty string"
        " of at most 256 bytes"
    )


def test_a_header_without_the_key_has_none() -> None:
    checked = check_ext_header(b'{"a":"##idempotency_key"}')
    assert not isinstance(checked, Exception)
    assert checked.idempotency_key is None


def test_an_http_override_sets_the_key() -> None:
    checked = check_ext_header("{}", {"##idempotency_key": "from-header"})
    assert not isinstance(checked, Exception)
    assert checked.idempotency_key == "from-header"


# --------------------------------------------------------- Broker.publish_once


def ext_topic(broker: Broker, name: str = "t", partitions: int = 1) -> None:
    broker.topic(name, partitions=partitions, ext=True)


def publish(
    broker: Broker, keys: Sequence[str | None], *, topic: str = "t", partition: int = 0
) -> Stored | None:
    bodies = [b"body-%d" % n for n in range(len(keys))]
    return broker.publish_once(
        topic,
        bodies,
        keys,
        WALL,
        partition_index=partition,
        trace_ids=[0] * len(keys),
        exts=[header(key) for key in keys],
    )


def stored_keys(broker: Broker, topic: str = "t", partition: int = 0) -> list[str | None]:
    log = broker.topics[topic].partitions[partition].log
    records = log.read(log.start_id, 1 << 20)
    return [orjson.loads(r.ext).get("##idempotency_key") for r in records]


async def test_a_batch_keeps_new_keys_and_the_first_of_repeats(nursery: trio.Nursery) -> None:
    broker = Broker(NsqdConfig.loopback(), nursery, drive=ChannelRunner)
    ext_topic(broker)
    publish(broker, ["a", "b"])
    first = publish(broker, ["b", "c", None, "c", "a", None, "d"])
    assert stored_keys(broker) == ["a", "b", "c", None, None, "d"]
    assert first == Stored(2, 0, *_place(broker, 2))  # "b" was stored by the first batch
    table = broker.topics["t"].partitions[0].idempotence
    assert table is not None
    assert (table.duplicates, len(table)) == (3, 4)


def _place(broker: Broker, internal_id: int) -> tuple[int, int]:
    stored = broker.topics["t"].partitions[0].log.get(internal_id)
    assert stored is not None
    return stored.offset, stored.raw_size


async def test_a_batch_of_repeats_only_appends_nothing(nursery: trio.Nursery) -> None:
    broker = Broker(NsqdConfig.loopback(), nursery, drive=ChannelRunner)
    ext_topic(broker)
    publish(broker, ["a", "b"])
    before = broker.topics["t"].partitions[0].log.next_offset
    assert publish(broker, ["b", "a", "b"]) == Stored(2, 0, *_place(broker, 2))
    assert broker.topics["t"].partitions[0].log.next_offset == before


async def test_partitions_have_their_own_keys(nursery: trio.Nursery) -> None:
    broker = Broker(NsqdConfig.loopback(), nursery, drive=ChannelRunner)
    ext_topic(broker, partitions=2)
    publish(broker, ["a"], partition=0)
    publish(broker, ["a"], partition=1)
    assert stored_keys(broker, partition=0) == stored_keys(broker, partition=1) == ["a"]


async def test_a_window_of_zero_stores_every_repeat(nursery: trio.Nursery) -> None:
    broker = Broker(NsqdConfig.loopback(idempotency_window=0), nursery, drive=ChannelRunner)
    ext_topic(broker)
    assert publish(broker, ["a", "a"]) is not None
    publish(broker, ["a"])
    assert stored_keys(broker) == ["a", "a", "a"]
    assert broker.topics["t"].partitions[0].idempotence is None


async def test_emptying_the_topic_forgets_its_keys(nursery: trio.Nursery) -> None:
    broker = Broker(NsqdConfig.loopback(), nursery, drive=ChannelRunner)
    ext_topic(broker)
    publish(broker, ["a"])
    broker.empty_topic("t")
    publish(broker, ["a"])
    assert stored_keys(broker) == ["a"]
    assert broker.topics["t"].partitions[0].message_count == 2


async def test_a_refused_write_remembers_nothing(
    nursery: trio.Nursery, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    config = NsqdConfig.loopback(data_path=str(tmp_path))
    broker = Broker(config, nursery, storage=Storage(config), drive=ChannelRunner)
    ext_topic(broker)
    log = broker.topics["t"].partitions[0].log
    assert isinstance(log, TopicLog)
    real_append = log.append

    def full(*args: object, **kwargs: object) -> list[Record]:
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(log, "append", full)
    with pytest.raises(StorageFault):
        publish(broker, ["a", "b"])
    table = broker.topics["t"].partitions[0].idempotence
    assert table is not None
    assert (len(table), table.duplicates) == (0, 0)
    monkeypatch.setattr(log, "append", real_append)
    publish(broker, ["a", "b"])  # the retry stores both, once
    publish(broker, ["a", "b"])
    assert stored_keys(broker) == ["a", "b"]
    assert table.duplicates == 2
    log.close(sync=False)


# ---------------------------------------------------------------- restore at open


def test_restore_takes_the_keys_of_a_memory_log() -> None:
    partition = Partition("t", 0, max_msg_timeout=900.0, mem_queue_size=100, ephemeral=False)
    keys = ["a", None, "b", "a"]
    exts = [header(k) if k is not None else b'{"##idempotency_key_not":"x"}' for k in keys]
    exts.append(b"not json, but it says ##idempotency_key")
    partition.publish([b"x"] * 5, WALL, ext_version=EXT_VERSION_JSON, exts=exts)
    partition.publish([b"plain"], WALL)
    table = restore(partition.log, 10)
    assert table is not None
    assert len(table) == 2
    assert table.get(key_digest("a")) == Stored(1, 0, 0, partition.log.read(1, 1)[0].raw_size)
    assert key_digest("b") in table


def test_restore_makes_no_table_without_keys_or_window() -> None:
    partition = Partition("t", 0, max_msg_timeout=900.0, mem_queue_size=100, ephemeral=False)
    assert restore(partition.log, 10) is None
    partition.publish([b"x"], WALL, ext_version=EXT_VERSION_JSON, exts=[b"{}"])
    assert restore(partition.log, 10) is None
    partition.publish([b"x"], WALL, ext_version=EXT_VERSION_JSON, exts=[header("a")])
    assert restore(partition.log, 0) is None


def test_restore_without_a_journal_reads_the_tail_cache_of_a_durable_log(tmp_path: Path) -> None:
    log, _ = TopicLog.open(tmp_path, "t-0", max_bytes_per_file=1 << 30, cache_records=4)
    keys = [f"k{n}" for n in range(1, 11)]
    log.append([b"x"] * 10, WALL, ext_version=EXT_VERSION_JSON, exts=[header(k) for k in keys])
    log.close(sync=False)
    opened, _ = TopicLog.open(tmp_path, "t-0", max_bytes_per_file=1 << 30, cache_records=4)
    partition = Partition(
        "t", 0, max_msg_timeout=900.0, mem_queue_size=4, ephemeral=False, log=opened
    )
    table = restore(partition.log, 100)
    assert table is not None
    assert len(table) == 4
    assert [key_digest(k) in table for k in keys] == [False] * 6 + [True] * 4
    opened.close(sync=False)


def test_restore_keeps_the_newest_keys_of_a_smaller_window(tmp_path: Path) -> None:
    partition = Partition("t", 0, max_msg_timeout=900.0, mem_queue_size=100, ephemeral=False)
    keys = [f"k{n}" for n in range(1, 11)]
    partition.publish(
        [b"x"] * 10, WALL, ext_version=EXT_VERSION_JSON, exts=[header(k) for k in keys]
    )
    table = restore(partition.log, 3)
    assert table is not None
    assert len(table) == 3
    assert [key_digest(k) in table for k in keys] == [False] * 7 + [True] * 3


# ---------------------------------------------------------------- the flag


def test_the_window_flag_and_config_key(tmp_path: Path) -> None:
    assert NsqdConfig().idempotency_window == 1_000_000
    parsed = build_nsqd_config(goflags.parse(NSQD_FLAGS, ["-idempotency-window", "5"]))
    assert parsed.idempotency_window == 5
    path = tmp_path / "nsqd.cfg"
    path.write_text("idempotency_window = 0\n")
    from_file = build_nsqd_config(goflags.parse(NSQD_FLAGS, [f"-config={path}"]))
    assert from_file.idempotency_window == 0


def test_a_negative_window_is_refused_at_startup() -> None:
    with pytest.raises(ConfigError, match="--idempotency-window must be 0 or more, got -1"):
        build_nsqd_config(goflags.parse(NSQD_FLAGS, ["-idempotency-window=-1"]))


@pytest.mark.parametrize(
    "key",
    ["abc", "0f" * 16 + ".3", "x" * 256, "x" * 257, "", 'a"b', "a\\b", "a\\u0041", "é", " ~!#[]"],
)
def test_a_key_only_header_reads_as_the_json_parser_reads_it(key: str) -> None:
    """The MPUB_EXT fast path for ``{"##idempotency_key":"..."}`` headers (no JSON
    parser) gives what the parser gives, refusals included."""
    from trionsq.protocol.errors import ProtocolError
    from trionsq.protocol.publish_readers import _ext_message

    for header in (b'{"##idempotency_key":"%s"}' % key.encode(), header_of(key)):
        fast = _ext_message(header, b"body")
        slow = check_ext_header(header)
        if isinstance(slow, ProtocolError):
            assert isinstance(fast, ProtocolError)
            assert fast.code == slow.code
        else:
            assert not isinstance(fast, ProtocolError)
            assert (fast.trace_id, fast.tag, fast.idempotency_key) == (
                slow.trace_id,
                slow.tag,
                slow.idempotency_key,
            )
            assert fast.header == header


def header_of(key: str) -> bytes:
    return orjson.dumps({"##idempotency_key": key})
