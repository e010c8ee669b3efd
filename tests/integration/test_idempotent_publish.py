"""Idempotent publishing over real sockets (issue 17): a ``##idempotency_key`` is
stored at most once per partition within ``--idempotency-window``.

PUB_EXT, MPUB_EXT (raw frames and trionsq.client) and /pub_ext; repeats inside a
batch and across connections, traced duplicates, the window, partitions, refused
keys, plain publishing left alone, and what a restart remembers
(docs/extensions.md, "Idempotent publishing").
"""

from __future__ import annotations

import struct
from typing import TYPE_CHECKING, Final

import httpx
import orjson
import pytest
import trio

from trionsq import NsqdConfig, serve_nsqd
from trionsq.client import ConnectionOptions, NsqError, open_consumer, open_producer
from trionsq.client.blocking import connect_producer
from trionsq.protocol import IdentifyRequest, Mpub, MpubExt, Pub, PubExt
from trionsq.protocol.client import ErrorReply, Response, encode_command, encode_mpub_ext_parts
from trionsq.protocol.commands import ExtMessage
from trionsq.queues.topic_log import TopicLog
from trionsq.testing import wait_until

from .raw import next_frame, ok, publish, start

if TYPE_CHECKING:
    from pathlib import Path

    from trionsq.broker.topic import Partition
    from trionsq.nursery_tree import BoundAddresses

    from .raw import Clients

KEY: Final = "##idempotency_key"
BAD_KEY: Final = (
    "fail to parse json header:##idempotency_key must be a non-empty string of at most 256 bytes"
)
EXTEND: Final = ConnectionOptions(identify=IdentifyRequest(extend_support=True))


def keyed(key: str | None, body: bytes, **extra: str) -> ExtMessage:
    """An ext message whose header carries ``key`` (none when None) and ``extra``."""
    fields: dict[str, str] = dict(extra)
    if key is not None:
        fields[KEY] = key
    return ExtMessage(orjson.dumps(fields), body)


def tcp(addresses: BoundAddresses) -> str:
    return f"{addresses.tcp[0]}:{addresses.tcp[1]}"


def partition_of(addresses: BoundAddresses, topic: str, index: int = 0) -> Partition:
    return addresses.broker.topics[topic].partitions[index]


def stored(addresses: BoundAddresses, topic: str, index: int = 0) -> list[bytes]:
    """The bodies the partition's log holds, in order."""
    log = partition_of(addresses, topic, index).log
    return [record.body for record in log.read(log.start_id, 1 << 20)]


def duplicates(addresses: BoundAddresses, topic: str, index: int = 0) -> int:
    table = partition_of(addresses, topic, index).idempotence
    return 0 if table is None else table.duplicates


async def create(addresses: BoundAddresses, topic: str, **flags: str) -> None:
    """A topic through /topic/create (``ext``, ``partition_num``)."""
    assert addresses.http is not None
    host, port = addresses.http
    async with httpx.AsyncClient(base_url=f"http://{host}:{port}") as http:
        response = await http.post("/topic/create", params={"topic": topic, **flags})
    assert response.status_code == 200, response.content


async def topic_stats(addresses: BoundAddresses, topic: str) -> dict[str, object]:
    assert addresses.http is not None
    host, port = addresses.http
    async with httpx.AsyncClient(base_url=f"http://{host}:{port}") as http:
        response = await http.get("/stats", params={"format": "json", "topic": topic})
    (found,) = [t for t in response.json()["topics"] if t["topic_name"] == topic]
    return dict(found)


# ---------------------------------------------------------------- PUB_EXT


async def test_pub_ext_twice_with_one_key_stores_one_record(nursery: trio.Nursery) -> None:
    addresses = await start(nursery)
    await create(addresses, "orders", ext="true")
    async with open_producer(tcp(addresses)) as producer:
        await producer.publish_ext("orders", keyed("order-1", b"first", a="1"))
        await producer.publish_ext("orders", keyed("order-1", b"second"))  # answered OK too
        await producer.publish_ext("orders", keyed("order-2", b"third"))
    stats = await topic_stats(addresses, "orders")
    assert (stats["message_count"], stats["depth"]) == (2, 2)
    assert duplicates(addresses, "orders") == 1
    got: list[tuple[bytes, dict[str, str]]] = []
    async with open_consumer("orders", "c", tcp(addresses), options=EXTEND) as consumer:
        async for message in consumer:
            message.finish()
            got.append((message.body, orjson.loads(message.ext)))
            if len(got) == 2:
                break
    # the key stays in the stored header: consumers see it
    assert got == [(b"first", {"a": "1", KEY: "order-1"}), (b"third", {KEY: "order-2"})]


async def test_a_traced_duplicate_gets_the_original_records_reply(
    clients: Clients, nursery: trio.Nursery
) -> None:
    addresses = await start(nursery)
    await create(addresses, "t", ext="true")
    producer = await clients.connect(addresses.tcp)
    await producer.send(PubExt("t", keyed("k", b"original", **{"##trace_id": "5"})))
    reply = await next_frame(producer)
    assert isinstance(reply, Response)
    original = reply.traced()
    await publish(producer, PubExt("t", keyed("other", b"in between")))
    await producer.send(
        PubExt("t", keyed("k", b"again", **{"##trace_id": "6"})),
        PubExt("t", keyed("k", b"untraced")),
    )
    again = await next_frame(producer)
    assert isinstance(again, Response)
    assert again.traced() == original  # id, trace id 5, offset and raw size of the first
    assert (original.internal_id, original.trace_id, original.offset) == (1, 5, 0)
    assert ok(await next_frame(producer))
    assert stored(addresses, "t") == [b"original", b"in between"]
    assert duplicates(addresses, "t") == 2


# ---------------------------------------------------------------- MPUB_EXT


async def test_mpub_ext_keeps_the_first_of_each_key_and_skips_keys_stored_before(
    nursery: trio.Nursery,
) -> None:
    addresses = await start(nursery)
    await create(addresses, "t", ext="true")
    async with open_producer(tcp(addresses)) as producer:
        batch = [keyed("a", b"a1"), keyed("b", b"b1"), keyed("a", b"a2"), keyed(None, b"n1")]
        await producer.publish_many_ext("t", [*batch, keyed(None, b"n1"), keyed("b", b"b2")])
        assert stored(addresses, "t") == [b"a1", b"b1", b"n1", b"n1"]
        await producer.publish_many_ext(
            "t", [keyed("b", b"b3"), keyed("c", b"c1"), keyed("a", b"a3"), keyed("d", b"d1")]
        )
    assert stored(addresses, "t") == [b"a1", b"b1", b"n1", b"n1", b"c1", b"d1"]
    assert duplicates(addresses, "t") == 4
    stats = await topic_stats(addresses, "t")
    assert stats["message_count"] == 6


async def test_a_batch_sent_again_after_its_answer_was_lost_is_stored_once(
    clients: Clients, nursery: trio.Nursery
) -> None:
    addresses = await start(nursery)
    await create(addresses, "t", ext="true")
    batch = tuple(keyed(f"row-{n}", b"%03d" % n) for n in range(200))
    lost = await clients.connect(addresses.tcp)
    await lost.send(MpubExt("t", batch))
    await lost.aclose()  # gone before the answer: the client cannot know it was stored
    await wait_until(lambda: len(stored(addresses, "t")) == 200, "the first batch stored")
    async with open_producer(tcp(addresses)) as producer:
        await producer.publish_many_ext("t", batch)  # the retry, from a new connection
        overlapping = batch[100:] + tuple(keyed(f"row-{n}", b"%03d" % n) for n in range(200, 300))
        await producer.publish_many_ext("t", overlapping)
    assert stored(addresses, "t") == [b"%03d" % n for n in range(300)]
    assert duplicates(addresses, "t") == 300


async def test_a_bad_key_in_a_batch_refuses_the_whole_batch(
    clients: Clients, nursery: trio.Nursery
) -> None:
    addresses = await start(nursery)
    await create(addresses, "t", ext="true")
    producer = await clients.connect(addresses.tcp)
    bad = ExtMessage(orjson.dumps({KEY: 7}), b"bad")
    await producer.send(MpubExt("t", (keyed("a", b"a"), bad, keyed("b", b"b"))))
    error = await next_frame(producer)
    assert isinstance(error, ErrorReply)
    assert (error.code, error.error.description, error.fatal) == (
        "E_INVALID_JSON_HEADER",
        BAD_KEY,
        False,
    )
    await publish(producer, MpubExt("t", (keyed("a", b"a"), keyed("b", b"b"))))  # still open
    assert stored(addresses, "t") == [b"a", b"b"]


# ---------------------------------------------------------------- the window, partitions


async def test_keys_past_the_window_are_stored_again(nursery: trio.Nursery) -> None:
    addresses = await start(nursery, NsqdConfig.loopback(idempotency_window=3))
    await create(addresses, "t", ext="true")
    async with open_producer(tcp(addresses)) as producer:
        await producer.publish_many_ext("t", [keyed(k, k.encode()) for k in "abcd"])
        await producer.publish_ext("t", keyed("a", b"a again"))  # "a" was the oldest: forgotten
        await producer.publish_ext("t", keyed("d", b"d again"))  # d is within the window
        await producer.publish_ext("t", keyed("b", b"b again"))  # "a" pushed "b" out
    assert stored(addresses, "t") == [b"a", b"b", b"c", b"d", b"a again", b"b again"]
    table = partition_of(addresses, "t").idempotence
    assert table is not None
    assert (len(table), table.window, table.duplicates) == (3, 3, 1)


async def test_a_window_of_zero_turns_deduplication_off(nursery: trio.Nursery) -> None:
    addresses = await start(nursery, NsqdConfig.loopback(idempotency_window=0))
    await create(addresses, "t", ext="true")
    async with open_producer(tcp(addresses)) as producer:
        await producer.publish_many_ext("t", [keyed("a", b"1"), keyed("a", b"2")])
        await producer.publish_ext("t", keyed("a", b"3"))
    assert stored(addresses, "t") == [b"1", b"2", b"3"]
    assert partition_of(addresses, "t").idempotence is None


async def test_each_partition_has_its_own_keys(nursery: trio.Nursery) -> None:
    addresses = await start(nursery)
    await create(addresses, "t", ext="true", partition_num="2")
    async with open_producer(tcp(addresses)) as producer:
        for _ in range(2):
            await producer.publish_ext("t", keyed("k", b"zero"), partition=0)
            await producer.publish_many_ext("t", [keyed("k", b"one")], partition=1)
    assert (stored(addresses, "t", 0), stored(addresses, "t", 1)) == ([b"zero"], [b"one"])
    assert (duplicates(addresses, "t", 0), duplicates(addresses, "t", 1)) == (1, 1)


async def test_emptying_or_deleting_the_topic_forgets_its_keys(nursery: trio.Nursery) -> None:
    addresses = await start(nursery)
    await create(addresses, "t", ext="true")
    async with open_producer(tcp(addresses)) as producer:
        await producer.publish_ext("t", keyed("k", b"1"))
        assert addresses.broker.empty_topic("t")
        await producer.publish_ext("t", keyed("k", b"2"))
        assert stored(addresses, "t") == [b"2"]
        assert addresses.broker.delete_topic("t")
        await create(addresses, "t", ext="true")
        await producer.publish_ext("t", keyed("k", b"3"))
    assert stored(addresses, "t") == [b"3"]


# ---------------------------------------------------------------- refusals, plain publishing


@pytest.mark.parametrize(
    "value",
    ["", None, 5, True, ["k"], {"k": "v"}, "k" * 257, "é" * 129],
    ids=["empty", "null", "number", "bool", "list", "object", "257-bytes", "258-utf8-bytes"],
)
async def test_anything_but_a_short_non_empty_string_is_refused(
    clients: Clients, nursery: trio.Nursery, value: object
) -> None:
    addresses = await start(nursery)
    await create(addresses, "t", ext="true")
    producer = await clients.connect(addresses.tcp)
    await producer.send(PubExt("t", ExtMessage(orjson.dumps({KEY: value}), b"body")))
    error = await next_frame(producer)
    assert isinstance(error, ErrorReply)
    assert (error.code, error.error.description, error.fatal) == (
        "E_INVALID_JSON_HEADER",
        BAD_KEY,
        False,
    )
    await publish(
        producer, PubExt("t", keyed("k" * 256, b"longest")), PubExt("t", keyed("é" * 128, b"u"))
    )
    assert stored(addresses, "t") == [b"longest", b"u"]


async def test_the_client_raises_the_refusal(nursery: trio.Nursery) -> None:
    addresses = await start(nursery)
    await create(addresses, "t", ext="true")
    async with open_producer(tcp(addresses)) as producer:
        with pytest.raises(NsqError) as raised:
            await producer.publish_many_ext("t", [keyed("", b"x")])
        assert raised.value.code == "E_INVALID_JSON_HEADER"
        with pytest.raises(ValueError, match="at least one message"):
            await producer.publish_many_ext("t", [])
    assert stored(addresses, "t") == []


async def test_plain_publishing_and_unkeyed_ext_messages_are_left_alone(
    clients: Clients, nursery: trio.Nursery
) -> None:
    addresses = await start(nursery)
    await create(addresses, "e", ext="true")
    producer = await clients.connect(addresses.tcp)
    header = orjson.dumps({"note": "##idempotency_key is only a word here"})
    await publish(
        producer,
        Pub("plain", b"same"),
        Pub("plain", b"same"),
        Mpub("plain", (b"same", b"same")),
        PubExt("e", ExtMessage(header, b"same")),
        MpubExt("e", (ExtMessage(header, b"same"), ExtMessage(b"{}", b"same"))),
    )
    assert stored(addresses, "plain") == [b"same"] * 4
    assert stored(addresses, "e") == [b"same"] * 3
    assert partition_of(addresses, "e").idempotence is None  # no key, no table
    await producer.send(PubExt("plain", keyed("k", b"x")))  # a plain topic takes no header
    error = await next_frame(producer)
    assert isinstance(error, ErrorReply)
    assert error.code == "E_EXT_NOT_SUPPORT"


# ---------------------------------------------------------------- HTTP /pub_ext


async def test_http_pub_ext_takes_the_key_from_ext_or_an_x_nsqext_header(
    nursery: trio.Nursery,
) -> None:
    addresses = await start(nursery)
    await create(addresses, "t", ext="true")
    assert addresses.http is not None
    host, port = addresses.http
    async with httpx.AsyncClient(base_url=f"http://{host}:{port}") as http:

        async def pub_ext(
            body: bytes, ext: dict[str, str], headers: dict[str, str] | None = None
        ) -> httpx.Response:
            params = {"topic": "t", "ext": orjson.dumps(ext).decode()}
            return await http.post("/pub_ext", params=params, content=body, headers=headers)

        first = await pub_ext(b"one", {KEY: "h", "##trace_id": "12"})
        assert first.status_code == 200
        original = first.json()
        assert (original["id"], original["trace_id"], original["queue_offset"]) == (1, "12", 0)
        by_header = await pub_ext(b"two", {}, {f"X-Nsqext-{KEY}": "h"})
        assert (by_header.status_code, by_header.content) == (200, b"OK")
        traced = await pub_ext(b"three", {"##trace_id": "99"}, {f"X-Nsqext-{KEY}": "h"})
        assert traced.json() == original  # where the first one is, with its trace id
        other = await pub_ext(b"four", {}, {f"X-Nsqext-{KEY}": "h2"})
        assert other.content == b"OK"
        refused = await pub_ext(b"five", {KEY: ""})
        assert (refused.status_code, refused.json()) == (400, {"message": "E_INVALID_JSON_HEADER"})
    assert stored(addresses, "t") == [b"one", b"four"]
    assert duplicates(addresses, "t") == 2


# ---------------------------------------------------------------- restart


async def restart_with(
    config: NsqdConfig, nursery: trio.Nursery, before: list[list[ExtMessage]]
) -> BoundAddresses:
    """A durable broker: publish ``before`` (one MPUB_EXT each), stop it, start it again."""
    async with trio.open_nursery() as first:
        addresses: BoundAddresses = await first.start(serve_nsqd, config)
        await create(addresses, "t", ext="true")
        async with open_producer(tcp(addresses)) as producer:
            for batch in before:
                await producer.publish_many_ext("t", batch)
        first.cancel_scope.cancel()
    again: BoundAddresses = await nursery.start(serve_nsqd, config)
    return again


async def test_a_restart_remembers_every_key_of_the_window(
    nursery: trio.Nursery, tmp_path: Path
) -> None:
    """The keys come back from the journal kept with the log, not only those of the
    records the log holds in memory at open (1024 here), nor only the last segment's."""
    config = NsqdConfig.loopback(
        data_path=str(tmp_path), mem_queue_size=100, max_bytes_per_file=64 << 10
    )
    batches = [[keyed(f"k{n}", b"%d" % n) for n in range(s, s + 100)] for s in range(1, 3001, 100)]
    addresses = await restart_with(config, nursery, batches)
    log = partition_of(addresses, "t").log
    assert isinstance(log, TopicLog)
    assert log.segment_count > 2
    table = partition_of(addresses, "t").idempotence
    assert table is not None
    assert len(table) == 3000
    async with open_producer(tcp(addresses)) as producer:
        await producer.publish_many_ext(
            "t", [keyed("k1", b"no"), keyed("k1500", b"no"), keyed("k3001", b"new")]
        )
    assert log.next_id == 3002
    (last,) = log.read(3001, 1)
    assert last.body == b"new"


async def test_a_restart_keeps_the_window_of_the_keys(
    nursery: trio.Nursery, tmp_path: Path
) -> None:
    """Past the window the oldest keys go, across restarts as before them."""
    config = NsqdConfig.loopback(data_path=str(tmp_path), idempotency_window=250)
    batches = [[keyed(f"k{n}", b"%d" % n) for n in range(s, s + 100)] for s in range(1, 1001, 100)]
    addresses = await restart_with(config, nursery, batches)
    table = partition_of(addresses, "t").idempotence
    assert table is not None
    assert len(table) == 250
    async with open_producer(tcp(addresses)) as producer:
        await producer.publish_many_ext("t", [keyed("k750", b"again"), keyed("k751", b"no")])
    log = partition_of(addresses, "t").log
    assert log.next_id == 1002
    assert log.read(1001, 1)[0].body == b"again"


async def test_a_key_journal_the_file_system_refuses_fails_the_publish_not_the_connection(
    clients: Clients, nursery: trio.Nursery, tmp_path: Path
) -> None:
    """The first keyed publish opens the partition's ``.keys``: when it cannot (here a
    directory is in its place; under the descriptor budget, no descriptor), the
    publish gets E_PUB_FAILED naming the file and stores nothing, as a refused append
    does, and the connection goes on (it was closed without a word before)."""
    addresses = await start(nursery, NsqdConfig.loopback(data_path=str(tmp_path)))
    await create(addresses, "t", ext="true")
    (tmp_path / "t-0.keys").mkdir()
    producer = await clients.connect(addresses.tcp)
    await producer.send(PubExt("t", keyed("k", b"refused")))
    error = await next_frame(producer)
    assert isinstance(error, ErrorReply), error
    assert (error.error.text, error.fatal) == ("E_PUB_FAILED t-0.keys: is a directory", False)
    assert stored(addresses, "t") == []
    (tmp_path / "t-0.keys").rmdir()
    await publish(producer, PubExt("t", keyed("k", b"stored")), PubExt("t", keyed("k", b"dup")))
    assert stored(addresses, "t") == [b"stored"]


# ---------------------------------------------------------------- the blocking client


def test_the_blocking_producer_publishes_a_keyed_batch_once(nsqd_thread: BoundAddresses) -> None:
    assert nsqd_thread.http is not None
    host, port = nsqd_thread.http
    with httpx.Client(base_url=f"http://{host}:{port}", timeout=10) as http:
        assert http.post("/topic/create", params={"topic": "t", "ext": "true"}).status_code == 200
        batch = [keyed(f"r{n}", b"%d" % n) for n in range(5)]
        with connect_producer(tcp(nsqd_thread)) as producer:
            producer.publish_many_ext("t", batch)
            producer.publish_many_ext("t", batch)  # a replayed batch
        answer = http.get("/stats", params={"format": "json", "topic": "t"})
    (topic,) = answer.json()["topics"]
    assert topic["message_count"] == 5


def test_an_encoded_batch_of_keyed_parts_is_stored_once(nsqd_thread: BoundAddresses) -> None:
    """What the Spark sink sends: MPUB_EXT parts built in bulk, as encoded commands
    (``publish_encoded``); the broker reads them in bulk and keeps each key once."""
    assert nsqd_thread.http is not None
    host, port = nsqd_thread.http
    batch = [keyed(f"e{n}", b"body %d" % n) for n in range(300)]
    parts = b"".join(
        struct.pack(">iH", 2 + len(m.header) + len(m.body), len(m.header)) + m.header + m.body
        for m in batch
    )
    command = encode_mpub_ext_parts("e", 0, len(batch), parts)
    assert command == encode_command(MpubExt("e", tuple(batch), 0))
    with httpx.Client(base_url=f"http://{host}:{port}", timeout=10) as http:
        assert http.post("/topic/create", params={"topic": "e", "ext": "true"}).status_code == 200
        with connect_producer(tcp(nsqd_thread)) as producer:
            producer.publish_encoded("e", 0, command)
            producer.publish_encoded("e", 0, command)  # a replayed chunk
            assert http.post("/topic/create", params={"topic": "p"}).status_code == 200
            with pytest.raises(NsqError, match="E_EXT_NOT_SUPPORT"):  # a refusal is raised
                producer.publish_encoded("p", 0, encode_mpub_ext_parts("p", 0, 300, parts))
        answer = http.get("/stats", params={"format": "json", "topic": "e"})
    (topic,) = answer.json()["topics"]
    assert topic["message_count"] == 300
    assert stored(nsqd_thread, "e")[:2] == [b"body 0", b"body 1"]
    assert duplicates(nsqd_thread, "e") == 300
