"""Reading partitions by offset over HTTP, and reader holds (issue 17), on real brokers.

``/partition/read`` pages, ``/partition/offsets``, ``/partition/hold`` and
``/partition/unhold`` against durable brokers (segments rolling at a few KiB,
restarts) and an in-memory one, with httpx over real sockets.
"""

from __future__ import annotations

import itertools
import time
from contextlib import asynccontextmanager
from typing import TYPE_CHECKING, Final, cast

import httpx
import orjson
import pytest
import trio

from trionsq import NsqdConfig, serve_nsqd
from trionsq.protocol.record_batch import CONTENT_TYPE, RecordBatch, decode_record_batch

from ..auth_server import grant, start_auth_server

if TYPE_CHECKING:
    from collections.abc import AsyncIterator
    from pathlib import Path

    from trionsq.broker.topic import Partition
    from trionsq.nursery_tree import BoundAddresses

SEGMENT_BYTES: Final = 4096
Arg = str | int
Params = dict[str, Arg]
Answer = dict[str, object]


@asynccontextmanager
async def http_to(addresses: BoundAddresses) -> AsyncIterator[httpx.AsyncClient]:
    assert addresses.http is not None
    host, port = addresses.http
    async with httpx.AsyncClient(base_url=f"http://{host}:{port}") as http:
        yield http


async def create_channel(http: httpx.AsyncClient, topic: str, channel: str = "c") -> None:
    for path, params in (
        ("/topic/create", {"topic": topic}),
        ("/channel/create", {"topic": topic, "channel": channel}),
    ):
        response = await http.post(path, params=params)
        assert response.status_code == 200, response.text


async def publish(
    http: httpx.AsyncClient, topic: str, bodies: list[bytes], *, batch: int = 25
) -> None:
    """MPUBs of ``batch`` messages: a segment rolls only between batches."""
    for first in range(0, len(bodies), batch):
        content = b"\n".join(bodies[first : first + batch])
        response = await http.post("/mpub", params={"topic": topic}, content=content)
        assert response.status_code == 200, response.text


async def read(http: httpx.AsyncClient, topic: str, offset: int, **extra: Arg) -> RecordBatch:
    params = {"topic": topic, "partition": 0, "offset": offset, **extra}
    response = await http.get("/partition/read", params=params)
    assert response.status_code == 200, response.text
    assert response.headers["content-type"] == CONTENT_TYPE
    return decode_record_batch(response.content)


async def read_all(
    http: httpx.AsyncClient, topic: str, offset: int, **extra: Arg
) -> list[RecordBatch]:
    pages: list[RecordBatch] = []
    while True:
        page = await read(http, topic, offset, **extra)
        if not page.count:
            assert page.next_offset == offset == page.latest_offset
            return pages
        assert page.offsets[0] == offset
        pages.append(page)
        offset = page.next_offset


async def refused(
    http: httpx.AsyncClient, method: str, path: str, **params: Arg
) -> tuple[int, str]:
    response = await http.request(method, path, params=params)
    assert response.headers["content-type"].startswith("application/json")
    return response.status_code, orjson.loads(response.content)["message"]


async def offsets_of(http: httpx.AsyncClient, topic: str, **extra: Arg) -> list[Answer]:
    """``/partition/offsets``: each partition's answer."""
    response = await http.get("/partition/offsets", params={"topic": topic, **extra})
    assert response.status_code == 200, response.text
    document = orjson.loads(response.content)
    assert document["topic"] == topic
    assert document["ext"] is False  # these tests publish plain messages
    return cast("list[Answer]", document["partitions"])


async def hold(http: httpx.AsyncClient, topic: str, reader: str, offset: int) -> None:
    params: Params = {"topic": topic, "partition": 0, "reader": reader, "offset": offset}
    response = await http.post("/partition/hold", params=params)
    assert response.status_code == 200, response.text


async def consume_everything(
    addresses: BoundAddresses, http: httpx.AsyncClient, topic: str
) -> Partition:
    """Every message of ``topic`` finished by channel ``c`` (setoffset to the tail),
    saved, and released: what the persister does within a second, done now."""
    await create_channel(http, topic)
    params = {"topic": topic, "channel": "c"}
    response = await http.post("/channel/setoffset", params=params, content=b"special:-1")
    assert response.status_code == 200, response.text
    broker = addresses.broker
    if broker.storage is not None:
        await broker.storage.persist(broker)
    (partition,) = broker.topics[topic].partitions
    partition.release()
    return partition


def segments(directory: Path, topic: str) -> list[Path]:
    return sorted(directory.glob(f"{topic}-0.*.log"))


# ---------------------------------------------------------------------- reading


async def test_a_partition_is_read_in_pages_as_it_was_published(
    nursery: trio.Nursery, tmp_path: Path
) -> None:
    addresses = await nursery.start(
        serve_nsqd, NsqdConfig.loopback(data_path=str(tmp_path), mem_queue_size=100)
    )
    sent = [b"message %05d " % i + b"x" * (i % 50) for i in range(5000)]
    async with http_to(addresses) as http:
        before = time.time_ns()
        await publish(http, "orders", sent, batch=1000)
        after = time.time_ns()
        pages = await read_all(http, "orders", 0, max_records=700, max_bytes=60_000)
    assert len(pages) > 5000 // 700  # the byte bound cut some pages short
    assert [body for page in pages for body in page.bodies()] == sent
    assert [i for page in pages for i in page.ids] == list(range(1, 5001))
    offsets = [o for page in pages for o in page.offsets]
    assert offsets[0] == 0
    assert all(b > a for a, b in itertools.pairwise(offsets))
    for page, following in itertools.pairwise(pages):
        assert following.offsets[0] == page.next_offset  # contiguous pages
    assert all(before <= ts <= after for page in pages for ts in page.timestamps)
    assert all(v == 0 for page in pages for v in page.ext_versions)
    assert (
        pages[-1].next_offset
        == pages[-1].latest_offset
        == addresses.broker.topics["orders"].partitions[0].log.next_offset
    )
    assert {page.earliest_offset for page in pages} == {0}


async def test_ext_headers_and_tags_come_back_in_the_ext_columns(nursery: trio.Nursery) -> None:
    addresses = await nursery.start(serve_nsqd, NsqdConfig.loopback())
    async with http_to(addresses) as http:
        assert (
            await http.post("/topic/create", params={"topic": "events", "ext": "true"})
        ).status_code == 200
        header = {"##client_dispatch_tag": "eu", "kind": "signup"}
        response = await http.post(
            "/pub_ext",
            params={"topic": "events", "ext": orjson.dumps(header).decode()},
            content=b"tagged",
        )
        assert response.status_code == 200, response.text
        response = await http.post(
            "/pubtrace", params={"topic": "events", "trace_id": "99"}, content=b"traced"
        )
        assert response.status_code == 200, response.text
        (page,) = await read_all(http, "events", 0)
    assert page.bodies() == [b"tagged", b"traced"]
    assert list(page.ext_versions) == [4, 0]
    exts = page.exts()
    assert orjson.loads(exts[0]) == header
    assert exts[1] == b""
    assert list(page.trace_ids) == [0, 99]


async def test_records_channels_released_stay_readable_while_their_segments_remain(
    nursery: trio.Nursery, tmp_path: Path
) -> None:
    config = NsqdConfig.loopback(
        data_path=str(tmp_path), max_bytes_per_file=SEGMENT_BYTES, retention=3600.0
    )
    addresses = await nursery.start(serve_nsqd, config)
    sent = [b"kept %d" % i for i in range(400)]
    async with http_to(addresses) as http:
        await create_channel(http, "replay")
        await publish(http, "replay", sent)
        partition = await consume_everything(addresses, http, "replay")
        assert partition.log.start_id == 401  # every record released...
        assert len(segments(tmp_path, "replay")) > 3  # ...but retention keeps the files
        pages = await read_all(http, "replay", 0, max_records=150)
        (answer,) = await offsets_of(http, "replay")
    assert [body for page in pages for body in page.bodies()] == sent
    assert answer == {
        "partition": 0,
        "earliest_offset": 0,
        "latest_offset": partition.log.next_offset,
        "earliest_id": 1,
        "next_id": 401,
        "holds": {},
    }


async def test_offset_for_a_timestamp_and_after_a_count(nursery: trio.Nursery) -> None:
    addresses = await nursery.start(serve_nsqd, NsqdConfig.loopback())
    async with http_to(addresses) as http:
        await publish(http, "timed", [b"old 1", b"old 2"])
        await trio.sleep(0.02)
        between_ms = time.time_ns() // 1_000_000
        await trio.sleep(0.02)
        await publish(http, "timed", [b"new 1"])
        (old,) = await read_all(http, "timed", 0)
        third = old.offsets[2]
        found = await offsets_of(http, "timed", timestamp_ms=between_ms)
        assert found[0]["timestamp_offset"] == third
        found = await offsets_of(http, "timed", timestamp_ms=0, partition=0)
        assert found[0]["timestamp_offset"] == 0
        found = await offsets_of(http, "timed", timestamp_ms=between_ms + 3_600_000)
        assert found[0]["timestamp_offset"] == old.latest_offset
        (answer,) = await offsets_of(http, "timed", partition=0, after_offset=0, max_messages=2)
        assert answer["limit_offset"] == third  # where 2 messages from offset 0 end
        (answer,) = await offsets_of(
            http, "timed", partition=0, after_offset=old.offsets[1], max_messages=9
        )
        assert answer["limit_offset"] == old.latest_offset
        assert answer["after_id"] == 2  # the id at that offset: next_id - 2 messages follow
        assert "timestamp_offset" not in answer
        (answer,) = await offsets_of(http, "timed", partition=0, after_offset=third)
        assert (answer["after_id"], answer["next_id"]) == (3, 4)
        assert "limit_offset" not in answer


async def test_every_refusal_has_its_status_and_reason(nursery: trio.Nursery) -> None:
    addresses = await nursery.start(serve_nsqd, NsqdConfig.loopback())
    async with http_to(addresses) as http:
        await publish(http, "t", [b"one", b"two"])
        assert (
            await http.post("/topic/create", params={"topic": "p", "partition_num": "2"})
        ).status_code == 200
        (page,) = await read_all(http, "t", 0)
        end = page.latest_offset
        read_cases: list[tuple[Params, int, str]] = [
            ({}, 400, "MISSING_ARG_TOPIC"),
            ({"topic": "a/b", "partition": 0, "offset": 0}, 400, "INVALID_ARG_TOPIC"),
            ({"topic": "t", "offset": 0}, 400, "MISSING_ARG_PARTITION"),
            ({"topic": "t", "partition": "x", "offset": 0}, 400, "INVALID_ARG_PARTITION"),
            ({"topic": "t", "partition": -1, "offset": 0}, 400, "INVALID_ARG_PARTITION"),
            ({"topic": "t", "partition": 0}, 400, "MISSING_ARG_OFFSET"),
            ({"topic": "t", "partition": 0, "offset": -1}, 400, "INVALID_ARG_OFFSET"),
            ({"topic": "t", "partition": 0, "offset": ""}, 400, "INVALID_ARG_OFFSET"),
            (
                {"topic": "t", "partition": 0, "offset": 0, "max_records": 0},
                400,
                "INVALID_ARG_MAX_RECORDS",
            ),
            (
                {"topic": "t", "partition": 0, "offset": 0, "max_records": 100_001},
                400,
                "INVALID_ARG_MAX_RECORDS",
            ),
            (
                {"topic": "t", "partition": 0, "offset": 0, "max_bytes": 0},
                400,
                "INVALID_ARG_MAX_BYTES",
            ),
            (
                {"topic": "t", "partition": 0, "offset": 0, "max_bytes": (64 << 20) + 1},
                400,
                "INVALID_ARG_MAX_BYTES",
            ),
            (
                {"topic": "t", "partition": 0, "offset": 0, "reader": "a b"},
                400,
                "INVALID_ARG_READER",
            ),
            ({"topic": "nope", "partition": 0, "offset": 0}, 404, "TOPIC_NOT_FOUND"),
            ({"topic": "p", "partition": 2, "offset": 0}, 404, "PARTITION_NOT_FOUND"),
            (
                {"topic": "t", "partition": 0, "offset": end + 1},
                400,
                f"offset {end + 1} is past the end of the partition ({end})",
            ),
            (
                {"topic": "t", "partition": 0, "offset": 1},
                400,
                "offset 1 is not the start of a message",
            ),
        ]
        for params, status, reason in read_cases:
            assert await refused(http, "GET", "/partition/read", **params) == (status, reason), (
                params
            )
        assert await refused(http, "POST", "/partition/read", topic="t") == (
            405,
            "METHOD_NOT_ALLOWED",
        )
        response = await http.get("/partition/read?topic=t;partition=0")
        assert (response.status_code, orjson.loads(response.content)) == (
            400,
            {"message": "INVALID_REQUEST"},
        )
        assert await refused(http, "GET", "/partition/offsets", topic="t", timestamp_ms="soon") == (
            400,
            "INVALID_ARG_TIMESTAMP_MS",
        )
        offsets_cases: list[tuple[Params, int, str]] = [
            ({"topic": "t", "after_offset": 0, "max_messages": 1}, 400, "MISSING_ARG_PARTITION"),
            ({"topic": "t", "partition": 0, "max_messages": 0}, 400, "MISSING_ARG_AFTER_OFFSET"),
            (
                {"topic": "t", "partition": 0, "after_offset": 0, "max_messages": 0},
                400,
                "INVALID_ARG_MAX_MESSAGES",
            ),
            (
                {"topic": "t", "partition": 0, "after_offset": 1, "max_messages": 1},
                400,
                "offset 1 is not the start of a message",
            ),
        ]
        for params, status, reason in offsets_cases:
            assert await refused(http, "GET", "/partition/offsets", **params) == (status, reason)
        assert await refused(http, "GET", "/partition/offsets", topic="nope") == (
            404,
            "TOPIC_NOT_FOUND",
        )
        assert await refused(http, "GET", "/partition/offsets", topic="t", partition=1) == (
            404,
            "PARTITION_NOT_FOUND",
        )
        hold_cases: list[tuple[str, Params, int, str]] = [
            (
                "/partition/hold",
                {"topic": "t", "partition": 0, "offset": 0},
                400,
                "MISSING_ARG_READER",
            ),
            (
                "/partition/hold",
                {"topic": "t", "partition": 0, "reader": "", "offset": 0},
                400,
                "INVALID_ARG_READER",
            ),
            (
                "/partition/hold",
                {"topic": "t", "partition": 0, "reader": "r"},
                400,
                "MISSING_ARG_OFFSET",
            ),
            (
                "/partition/hold",
                {"topic": "t", "partition": 0, "reader": "r", "offset": 2},
                400,
                "offset 2 is not the start of a message",
            ),
            (
                "/partition/hold",
                {"topic": "nope", "partition": 0, "reader": "r", "offset": 0},
                404,
                "TOPIC_NOT_FOUND",
            ),
            (
                "/partition/unhold",
                {"topic": "t", "partition": 0, "reader": "r"},
                404,
                "HOLD_NOT_FOUND",
            ),
            ("/partition/unhold", {"topic": "t", "partition": 0}, 400, "MISSING_ARG_READER"),
        ]
        for path, params, status, reason in hold_cases:
            assert await refused(http, "POST", path, **params) == (status, reason), (path, params)
        # an ephemeral topic has no log to replay
        await publish(http, "e#ephemeral", [b"gone"])
        reason = "topic e#ephemeral is ephemeral: it keeps no log to read by offset"
        assert await refused(
            http, "GET", "/partition/read", topic="e#ephemeral", partition=0, offset=0
        ) == (400, reason)
        assert await refused(
            http, "POST", "/partition/hold", topic="e#ephemeral", partition=0, reader="r", offset=0
        ) == (400, reason)
        # in memory, what a channel finished is gone: "no longer held"
        partition = await consume_everything(addresses, http, "t")
        assert await refused(http, "GET", "/partition/read", topic="t", partition=0, offset=0) == (
            400,
            f"offset 0 is no longer held: the oldest is {end}",
        )
        assert partition.log.next_offset == end  # nothing refused changed the log
        assert "nope" not in addresses.broker.topics


# ---------------------------------------------------------------------- holds


async def test_a_hold_keeps_segments_a_consumed_channel_would_release(
    nursery: trio.Nursery, tmp_path: Path
) -> None:
    config = NsqdConfig.loopback(data_path=str(tmp_path), max_bytes_per_file=SEGMENT_BYTES)
    addresses = await nursery.start(serve_nsqd, config)
    sent = [b"record %04d " % i + b"y" * 60 for i in range(600)]
    async with http_to(addresses) as http:
        await create_channel(http, "held")
        await publish(http, "held", sent)
        all_segments = len(segments(tmp_path, "held"))
        assert all_segments > 8
        (first_page,) = await read_all(http, "held", 0, max_records=1000)
        at = first_page.offsets[250]
        await hold(http, "held", "spark", at)
        await hold(http, "held", "other", first_page.offsets[400])
        await consume_everything(addresses, http, "held")
        kept = segments(tmp_path, "held")
        assert 1 < len(kept) < all_segments  # those before the lowest hold went
        pages = await read_all(http, "held", at)
        assert [b for page in pages for b in page.bodies()] == sent[250:]
        (answer,) = await offsets_of(http, "held", partition=0)
        assert answer["holds"] == {"other": first_page.offsets[400], "spark": at}
        assert cast("int", answer["earliest_offset"]) <= at
        response = await http.post(
            "/partition/unhold", params={"topic": "held", "partition": 0, "reader": "spark"}
        )
        assert response.status_code == 200, response.text
        fewer = segments(tmp_path, "held")
        assert len(fewer) < len(kept)  # released as soon as the hold went
        status, reason = await refused(
            http, "GET", "/partition/read", topic="held", partition=0, offset=at
        )
        assert status == 400
        assert reason.startswith(f"offset {at} is no longer held: the oldest is ")
        assert (await read(http, "held", first_page.offsets[400])).bodies()[0] == sent[400]
        response = await http.post(
            "/partition/unhold", params={"topic": "held", "partition": 0, "reader": "other"}
        )
        assert response.status_code == 200
        assert len(segments(tmp_path, "held")) == 1  # only the one being written


async def test_holds_survive_a_restart(nursery: trio.Nursery, tmp_path: Path) -> None:
    config = NsqdConfig.loopback(data_path=str(tmp_path), max_bytes_per_file=SEGMENT_BYTES)
    sent = [b"durable %04d " % i + b"z" * 60 for i in range(300)]
    async with trio.open_nursery() as first:
        addresses = await first.start(serve_nsqd, config)
        async with http_to(addresses) as http:
            await create_channel(http, "keep")
            await publish(http, "keep", sent)
            (page,) = await read_all(http, "keep", 0, max_records=1000)
            at = page.offsets[100]
            await hold(http, "keep", "spark", at)
            await hold(http, "keep", "moved", 0)
            await hold(http, "keep", "moved", page.offsets[200])  # moved forward
            await consume_everything(addresses, http, "keep")
        first.cancel_scope.cancel()
    assert (tmp_path / "channels" / "keep-0" / "holds.json").exists()
    again = await nursery.start(serve_nsqd, config)
    (partition,) = again.broker.topics["keep"].partitions
    partition.release()  # what the persister does each second
    async with http_to(again) as http:
        (answer,) = await offsets_of(http, "keep")
        assert answer["holds"] == {"moved": page.offsets[200], "spark": at}
        pages = await read_all(http, "keep", at)
        assert [b for p in pages for b in p.bodies()] == sent[100:]
        assert partition.channels["c"].depth == 0  # the channel itself got nothing back


async def test_an_unusable_holds_file_is_set_aside_at_start(
    nursery: trio.Nursery, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    config = NsqdConfig.loopback(data_path=str(tmp_path))
    async with trio.open_nursery() as first:
        addresses = await first.start(serve_nsqd, config)
        async with http_to(addresses) as http:
            await publish(http, "broken", [b"a", b"b"])
            await hold(http, "broken", "r", 0)
        first.cancel_scope.cancel()
    path = tmp_path / "channels" / "broken-0" / "holds.json"
    path.write_bytes(b'{"version":1,"holds":[{"reader":"r"}]}')
    again = await nursery.start(serve_nsqd, config)
    assert path.with_name("holds.json.bad").exists()
    assert "holds.json.bad" in caplog.text
    async with http_to(again) as http:
        (answer,) = await offsets_of(http, "broken")
        assert answer["holds"] == {}


async def test_an_in_memory_broker_reads_and_holds_too(nursery: trio.Nursery) -> None:
    addresses = await nursery.start(serve_nsqd, NsqdConfig.loopback())
    sent = [b"mem %d" % i for i in range(100)]
    async with http_to(addresses) as http:
        await create_channel(http, "mem")
        await publish(http, "mem", sent)
        (page,) = await read_all(http, "mem", 0)
        assert page.bodies() == sent
        at = page.offsets[60]
        await hold(http, "mem", "r", at)
        await consume_everything(addresses, http, "mem")
        (rest,) = await read_all(http, "mem", at)
        assert rest.bodies() == sent[60:]
        assert rest.earliest_offset == at
        response = await http.post(
            "/partition/unhold", params={"topic": "mem", "partition": 0, "reader": "r"}
        )
        assert response.status_code == 200
        assert (await refused(http, "GET", "/partition/read", topic="mem", partition=0, offset=at))[
            0
        ] == 400


READ_SPARK = grant(
    [{"topic": "^orders$", "channels": ["^spark$"], "permissions": ["subscribe"]}], ttl=60
)


async def test_with_auth_a_reader_needs_a_subscribe_grant(nursery: trio.Nursery) -> None:
    server = await start_auth_server(nursery, {"s": READ_SPARK})
    addresses = await nursery.start(
        serve_nsqd, NsqdConfig.loopback(auth_http_addresses=(server.address,))
    )
    addresses.broker.publish("orders", [b"secret"], time.time_ns())
    params: Params = {"topic": "orders", "partition": 0, "offset": 0}
    async with http_to(addresses) as http:
        assert await refused(http, "GET", "/partition/read", **params) == (
            401,
            "E_AUTH_FIRST AUTH required before READ",
        )
        bearer = {"Authorization": "Bearer s"}
        response = await http.get("/partition/read", params=params, headers=bearer)
        assert response.status_code == 403
        assert (
            orjson.loads(response.content)["message"]
            == 'E_UNAUTHORIZED AUTH failed for READ on "orders" "partition_read"'
        )
        response = await http.get(
            "/partition/read", params={**params, "reader": "spark"}, headers=bearer
        )
        assert response.status_code == 200
        assert decode_record_batch(response.content).bodies() == [b"secret"]
        response = await http.post(
            "/partition/hold", params={**params, "reader": "spark"}, headers=bearer
        )
        assert response.status_code == 200, response.text


@pytest.mark.parametrize("max_bytes", [1, 10])
async def test_one_record_comes_back_even_past_max_bytes(
    nursery: trio.Nursery, max_bytes: int
) -> None:
    addresses = await nursery.start(serve_nsqd, NsqdConfig.loopback())
    async with http_to(addresses) as http:
        await publish(http, "big", [b"b" * 5000, b"c"])
        page = await read(http, "big", 0, max_bytes=max_bytes)
        assert page.bodies() == [b"b" * 5000]
        assert (await read(http, "big", page.next_offset, max_bytes=max_bytes)).bodies() == [b"c"]
