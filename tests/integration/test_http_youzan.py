"""Youzan's publishing on nsqd's HTTP API over real sockets (spec http-api.md §3).

The ``partition`` parameter of /pub and /mpub, /pubtrace and /pub_ext: every answer
and every refusal, and what a Youzan-mode TCP consumer (SUB naming a partition,
``extend_support`` for ext topics, the detail layout for offsets) then receives.
"""

from __future__ import annotations

import logging
import struct
from typing import TYPE_CHECKING, Final, TypedDict

import httpx
import orjson
import pytest
import trio

from trionsq import NsqdConfig
from trionsq.protocol import IdentifyRequest, Rdy, Sub, SubAdvanced, SubOrdered
from trionsq.protocol.client import encode_identify
from trionsq.protocol.message import EXT_VERSION_JSON, parse_binary_id
from trionsq.queues.record import MAX_EXT_LENGTH

from .raw import bodies, next_frame, next_message, ok, quiet

if TYPE_CHECKING:
    from collections.abc import AsyncIterator, Mapping

    from trionsq.nursery_tree import BoundAddresses
    from trionsq.protocol.message import Message
    from trionsq.testing import ProtocolClient

    from .raw import Clients

MAX_MSG: Final = 70_000
"""Above the 64 KiB that endpoints ignoring their body read: the limit must be the route's."""
CONFIG: Final = NsqdConfig.loopback(max_msg_size=MAX_MSG)
V1_ACCEPT: Final = {"Accept": "application/vnd.nsq; version=1.0"}
LEGACY_ACCEPT: Final = {"Accept": "application/vnd.nsq; version=0.3"}
QUIET: Final = 0.3
"""How long a consumer that should get nothing is watched."""


@pytest.fixture
def nsqd_config() -> NsqdConfig:
    return CONFIG


@pytest.fixture
async def http(nsqd: BoundAddresses) -> AsyncIterator[httpx.AsyncClient]:
    assert nsqd.http is not None
    host, port = nsqd.http
    async with httpx.AsyncClient(base_url=f"http://{host}:{port}") as client:
        yield client


# ---------------------------------------------------------------------- helpers


async def create(http: httpx.AsyncClient, topic: str, **flags: str) -> None:
    """A topic through /topic/create (``partition_num``, ``ext``, ``ordered``)."""
    response = await http.post("/topic/create", params={"topic": topic, **flags})
    assert response.status_code == 200, response.content


async def consumer(
    clients: Clients,
    nsqd: BoundAddresses,
    topic: str,
    partition: int,
    *,
    ext: bool = False,
    detail: bool = False,
    ordered: bool = False,
) -> ProtocolClient:
    """A Youzan-mode consumer of one partition: ``extend_support`` for an ext topic,
    SUB_ADVANCED (``detail``) or SUB_ORDERED to see record offsets and sizes."""
    client = await clients.connect(nsqd.tcp)
    if ext:
        await client.stream.send_all(encode_identify(IdentifyRequest(extend_support=True)))
        assert ok(await next_frame(client))
        client.decoder.extended = True
    command: Sub | SubAdvanced | SubOrdered = Sub(topic, "c", partition)
    if ordered:
        command = SubOrdered(topic, "c", partition)
    elif detail:
        command = SubAdvanced(topic, "c", partition)
    client.decoder.detail = detail or ordered
    await client.send(command)
    assert ok(await next_frame(client))
    await client.send(Rdy(10))
    return client


async def post(
    http: httpx.AsyncClient,
    path: str,
    body: bytes = b"m",
    *,
    headers: Mapping[str, str] | None = None,
    **params: str | None,
) -> httpx.Response:
    """A POST with these query parameters (``None``: left out) and body."""
    query = {name: value for name, value in params.items() if value is not None}
    return await http.post(path, params=query, content=body, headers=headers)


async def refused_on_length(nsqd: BoundAddresses, target: str) -> tuple[bytes, bytes]:
    """Status line and body for a POST whose Content-Length is over max-msg-size: the
    answer comes before any body byte is sent, and the connection then closes."""
    assert nsqd.http is not None
    stream = await trio.open_tcp_stream(*nsqd.http)
    async with stream:
        await stream.send_all(
            b"POST %s HTTP/1.1\r\nHost: nsqd\r\nContent-Length: %d\r\n\r\n"
            % (target.encode(), MAX_MSG + 1)
        )
        data = b""
        with trio.fail_after(10):
            while chunk := await stream.receive_some():
                data += chunk
    head, _, body = data.partition(b"\r\n\r\n")
    return head.split(b"\r\n")[0], body


def expect_error(response: httpx.Response, status: int, message: str) -> None:
    """A V1 refusal: the status and ``{"message":...}``."""
    assert (response.status_code, orjson.loads(response.content)) == (
        status,
        {"message": message},
    )
    assert response.headers["x-nsq-content-type"] == "nsq; version=1.0"


def expect_ok(response: httpx.Response) -> None:
    assert (response.status_code, response.content) == (200, b"OK"), response.content


def published(nsqd: BoundAddresses, topic: str) -> int:
    """Messages stored in every partition of ``topic``."""
    return sum(p.message_count for p in nsqd.broker.topics[topic].partitions)


def trace_id(message: Message) -> int:
    return parse_binary_id(message.id)[1]


def internal_id(message: Message) -> int:
    return parse_binary_id(message.id)[0]


class Traced(TypedDict):
    """Youzan's traced answer."""

    status: str
    id: int
    trace_id: str
    queue_offset: int
    rawsize: int


def traced_json(response: httpx.Response) -> Traced:
    """The traced answer, checked to be V1 JSON with Youzan's keys in Youzan's order."""
    assert response.status_code == 200, response.content
    assert response.headers["content-type"] == "application/json; charset=utf-8"
    answer: Traced = orjson.loads(response.content)
    assert list(answer) == ["status", "id", "trace_id", "queue_offset", "rawsize"]
    return answer


# ------------------------------------------------------- partition on /pub and /mpub


async def test_pub_without_partition_auto_creates_a_plain_topic(
    nsqd: BoundAddresses, http: httpx.AsyncClient
) -> None:
    for topic, partition in (("a", None), ("b", ""), ("c", "-1")):
        expect_ok(await post(http, "/pub", topic=topic, partition=partition))
        expect_ok(await post(http, "/mpub", b"x\ny", topic=f"m{topic}", partition=partition))
    topics = nsqd.broker.topics
    assert sorted(topics) == ["a", "b", "c", "ma", "mb", "mc"]
    assert all(len(t.partitions) == 1 and not t.ext for t in topics.values())


async def test_pub_without_partition_goes_to_the_default_partition(
    clients: Clients, nsqd: BoundAddresses, http: httpx.AsyncClient
) -> None:
    await create(http, "t", partition_num="2")
    first = await consumer(clients, nsqd, "t", 0)
    second = await consumer(clients, nsqd, "t", 1)
    for partition in (None, "", "-1"):
        expect_ok(await post(http, "/pub", b"p", topic="t", partition=partition))
        expect_ok(await post(http, "/mpub", b"m", topic="t", partition=partition))
    assert bodies(await quiet(first, QUIET)) == [b"p", b"m"] * 3
    assert await quiet(second, QUIET) == []


async def test_pub_with_partition_goes_to_that_partition(
    clients: Clients, nsqd: BoundAddresses, http: httpx.AsyncClient
) -> None:
    await create(http, "t", partition_num="3")
    listeners = [await consumer(clients, nsqd, "t", index) for index in range(3)]
    expect_ok(await post(http, "/pub", b"to-2", topic="t", partition="2"))
    expect_ok(await post(http, "/pub", b"to-1", topic="t", partition="1"))
    message = await next_message(listeners[2])
    assert (message.body, trace_id(message)) == (b"to-2", 0)
    assert (await next_message(listeners[1])).body == b"to-1"
    assert await quiet(listeners[0], QUIET) == []


async def test_pub_with_partition_and_defer_is_deferred_in_that_partition(
    clients: Clients, nsqd: BoundAddresses, http: httpx.AsyncClient
) -> None:
    await create(http, "t", partition_num="2")
    listener = await consumer(clients, nsqd, "t", 1)
    expect_ok(await post(http, "/pub", b"later", topic="t", partition="1", defer="300"))
    assert await quiet(listener, 0.1) == []
    assert (await next_message(listener)).body == b"later"


async def test_mpub_with_partition_goes_to_that_partition(
    clients: Clients, nsqd: BoundAddresses, http: httpx.AsyncClient
) -> None:
    await create(http, "t", partition_num="2")
    first = await consumer(clients, nsqd, "t", 0)
    second = await consumer(clients, nsqd, "t", 1)
    expect_ok(await post(http, "/mpub", b"a\nb", topic="t", partition="1"))
    binary = struct.pack(">ii1si1s", 2, 1, b"c", 1, b"d")
    expect_ok(await post(http, "/mpub", binary, topic="t", partition="1", binary="true"))
    assert bodies(await quiet(second, QUIET)) == [b"a", b"b", b"c", b"d"]
    assert await quiet(first, QUIET) == []


async def test_pub_partition_not_an_int_is_400_with_go_atoi_text(
    nsqd: BoundAddresses, http: httpx.AsyncClient
) -> None:
    for path in ("/pub", "/mpub", "/pubtrace", "/pub_ext"):
        response = await post(http, path, topic="t", partition="abc", trace_id="1", ext="{}")
        expect_error(response, 400, 'strconv.Atoi: parsing "abc": invalid syntax')
    response = await post(http, "/pub", topic="t", partition="99999999999999999999")
    expect_error(response, 400, 'strconv.Atoi: parsing "99999999999999999999": value out of range')
    assert nsqd.broker.topics == {}  # refused before nsqd's GetTopic would create it


async def test_pub_named_partition_of_a_missing_topic_is_404_and_creates_nothing(
    nsqd: BoundAddresses, http: httpx.AsyncClient
) -> None:
    for path in ("/pub", "/mpub"):
        for partition in ("0", "1"):
            response = await post(http, path, topic="t", partition=partition)
            expect_error(response, 404, "E_TOPIC_NOT_EXIST")
    assert nsqd.broker.topics == {}


async def test_pub_named_partition_the_topic_lacks_is_404(
    nsqd: BoundAddresses, http: httpx.AsyncClient
) -> None:
    await create(http, "t", partition_num="2")
    for path in ("/pub", "/mpub", "/pubtrace"):
        for partition in ("2", "-2"):
            response = await post(http, path, topic="t", partition=partition, trace_id="1")
            expect_error(response, 404, "E_TOPIC_NOT_EXIST")
    assert len(nsqd.broker.topics["t"].partitions) == 2
    assert published(nsqd, "t") == 0


async def test_pub_to_ordered_topic_without_partition_is_e_bad_partition(
    clients: Clients, nsqd: BoundAddresses, http: httpx.AsyncClient
) -> None:
    await create(http, "o", ordered="true", partition_num="2")
    for path in ("/pub", "/mpub", "/pubtrace"):
        for partition in (None, "-1"):
            response = await post(http, path, topic="o", trace_id="1", partition=partition)
            expect_error(response, 400, "E_BAD_PARTITION")
    listener = await consumer(clients, nsqd, "o", 1, ordered=True)
    expect_ok(await post(http, "/pub", b"ordered", topic="o", partition="1"))
    assert (await next_message(listener)).body == b"ordered"


async def test_pub_partition_errors_in_the_legacy_envelope(http: httpx.AsyncClient) -> None:
    response = await post(http, "/pub", headers=LEGACY_ACCEPT, topic="t", partition="3")
    assert response.status_code == 500
    assert orjson.loads(response.content) == {
        "status_code": 500,
        "status_txt": "E_TOPIC_NOT_EXIST",
        "data": None,
    }


# ---------------------------------------------------------------------- /pubtrace


async def test_pubtrace_stores_trace_id_and_answers_record_position(
    clients: Clients, nsqd: BoundAddresses, http: httpx.AsyncClient
) -> None:
    await create(http, "t", partition_num="2")
    listener = await consumer(clients, nsqd, "t", 1, detail=True)
    first = traced_json(
        await post(http, "/pubtrace", b"one", topic="t", partition="1", trace_id="99")
    )
    second = traced_json(
        await post(http, "/pubtrace", b"two", topic="t", partition="1", trace_id="007")
    )
    assert (first["status"], first["trace_id"], second["trace_id"]) == ("OK", "99", "007")
    assert second["queue_offset"] == first["queue_offset"] + first["rawsize"]
    for answer, body, trace in ((first, b"one", 99), (second, b"two", 7)):
        message = await next_message(listener)
        assert (message.body, trace_id(message), internal_id(message)) == (
            body,
            trace,
            answer["id"],
        )
        assert (message.offset, message.raw_size) == (answer["queue_offset"], answer["rawsize"])


async def test_pubtrace_without_partition_goes_to_the_default_partition(
    clients: Clients, nsqd: BoundAddresses, http: httpx.AsyncClient
) -> None:
    await create(http, "t", partition_num="2")
    first = await consumer(clients, nsqd, "t", 0)
    second = await consumer(clients, nsqd, "t", 1)
    traced_json(await post(http, "/pubtrace", b"m", topic="t", trace_id="5"))
    message = await next_message(first)
    assert (message.body, trace_id(message)) == (b"m", 5)
    assert await quiet(second, QUIET) == []


async def test_pubtrace_to_a_missing_topic_is_404_and_creates_nothing(
    nsqd: BoundAddresses, http: httpx.AsyncClient
) -> None:
    for partition in (None, "0"):
        response = await post(http, "/pubtrace", topic="t", trace_id="1", partition=partition)
        expect_error(response, 404, "E_TOPIC_NOT_EXIST")
    assert nsqd.broker.topics == {}


async def test_pubtrace_missing_or_invalid_trace_id_is_invalid_trace_id(
    nsqd: BoundAddresses, http: httpx.AsyncClient
) -> None:
    await create(http, "t")
    expect_error(await post(http, "/pubtrace", topic="t"), 400, "INVALID_TRACE_ID")
    for bad in ("", "abc", "-1", "+1", "1.5", str(2**64)):
        response = await post(http, "/pubtrace", topic="t", trace_id=bad)
        expect_error(response, 400, "INVALID_TRACE_ID")
    assert published(nsqd, "t") == 0
    largest = str(2**64 - 1)
    answer = traced_json(await post(http, "/pubtrace", topic="t", trace_id=largest))
    assert answer["trace_id"] == largest


async def test_pubtrace_empty_body_is_406_msg_empty(http: httpx.AsyncClient) -> None:
    await create(http, "t")
    expect_error(await post(http, "/pubtrace", b"", topic="t", trace_id="1"), 406, "MSG_EMPTY")


async def test_pubtrace_body_too_big_is_413_msg_too_big(
    nsqd: BoundAddresses, http: httpx.AsyncClient
) -> None:
    await create(http, "t")
    status, body = await refused_on_length(nsqd, "/pubtrace?topic=t&trace_id=1")
    assert (status, body) == (
        b"HTTP/1.1 413 Request Entity Too Large",
        b'{"message":"MSG_TOO_BIG"}',
    )


async def test_pubtrace_accepts_a_body_of_max_msg_size(
    clients: Clients, nsqd: BoundAddresses, http: httpx.AsyncClient
) -> None:
    await create(http, "t")
    listener = await consumer(clients, nsqd, "t", 0)
    traced_json(await post(http, "/pubtrace", b"x" * MAX_MSG, topic="t", trace_id="1"))
    assert (await next_message(listener)).body == b"x" * MAX_MSG


async def test_pubtrace_is_v1_only(http: httpx.AsyncClient) -> None:
    await create(http, "t")
    answer = traced_json(
        await post(http, "/pubtrace", headers=LEGACY_ACCEPT, topic="t", trace_id="3")
    )
    assert answer["trace_id"] == "3"
    response = await post(http, "/pubtrace", headers=LEGACY_ACCEPT, topic="t", trace_id="x")
    expect_error(response, 400, "INVALID_TRACE_ID")


async def test_pubtrace_answer_is_byte_exact(http: httpx.AsyncClient) -> None:
    await create(http, "t")
    response = await post(http, "/pubtrace", b"m", topic="t", trace_id="99")
    answer = traced_json(response)
    expected = b'{"status":"OK","id":%d,"trace_id":"99","queue_offset":%d,"rawsize":%d}' % (
        answer["id"],
        answer["queue_offset"],
        answer["rawsize"],
    )
    assert response.content == expected
    assert response.headers["x-nsq-content-type"] == "nsq; version=1.0"


# ---------------------------------------------------------------------- /pub_ext


async def test_pub_ext_stores_the_ext_json_header(
    clients: Clients, nsqd: BoundAddresses, http: httpx.AsyncClient
) -> None:
    await create(http, "e", ext="true", partition_num="2")
    first = await consumer(clients, nsqd, "e", 0, ext=True)
    second = await consumer(clients, nsqd, "e", 1, ext=True)
    ext = {"k": "v", "n": 1, "##client_dispatch_tag": "eu"}
    expect_ok(
        await post(
            http, "/pub_ext", b"body", topic="e", partition="1", ext=orjson.dumps(ext).decode()
        )
    )
    message = await next_message(second)
    assert (message.body, message.ext_version, trace_id(message)) == (b"body", EXT_VERSION_JSON, 0)
    assert message.ext == orjson.dumps(ext)  # re-serialized: compact
    assert await quiet(first, QUIET) == []


async def test_pub_ext_without_partition_goes_to_the_default_partition(
    clients: Clients, nsqd: BoundAddresses, http: httpx.AsyncClient
) -> None:
    await create(http, "e", ext="true", partition_num="2")
    first = await consumer(clients, nsqd, "e", 0, ext=True)
    second = await consumer(clients, nsqd, "e", 1, ext=True)
    for partition in (None, "-1"):
        response = await post(
            http, "/pub_ext", b"d", topic="e", ext='{ "a" : "b" }', partition=partition
        )
        expect_ok(response)
    assert [m.ext for m in [await next_message(first), await next_message(first)]] == [
        b'{"a":"b"}'
    ] * 2
    assert await quiet(second, QUIET) == []


async def test_pub_ext_header_from_x_nsqext_request_headers(
    clients: Clients, nsqd: BoundAddresses, http: httpx.AsyncClient
) -> None:
    await create(http, "e", ext="true")
    listener = await consumer(clients, nsqd, "e", 0, ext=True)
    headers = {"X-Nsqext-Region": "EU-west", "x-nsqext-a": "from-header", "X-NSQEXT-Num": "7"}
    expect_ok(await post(http, "/pub_ext", headers=headers, topic="e", ext='{"a":"q","b":2}'))
    message = await next_message(listener)
    assert orjson.loads(message.ext) == {
        "a": "from-header",
        "b": 2,
        "region": "EU-west",
        "num": "7",
    }
    assert trace_id(message) == 0


async def test_pub_ext_with_trace_id_answers_traced_json(
    clients: Clients, nsqd: BoundAddresses, http: httpx.AsyncClient
) -> None:
    await create(http, "e", ext="true", partition_num="2")
    listener = await consumer(clients, nsqd, "e", 1, ext=True, detail=True)
    from_ext = await post(
        http, "/pub_ext", b"one", topic="e", partition="1", ext='{"##trace_id":"12"}'
    )
    from_header = await post(
        http,
        "/pub_ext",
        b"two",
        headers={"X-Nsqext-##trace_id": "0034"},
        topic="e",
        partition="1",
        ext="{}",
    )
    for response, body, given, trace in (
        (from_ext, b"one", "12", 12),
        (from_header, b"two", "0034", 34),
    ):
        answer = traced_json(response)
        assert (answer["status"], answer["trace_id"]) == ("OK", given)
        message = await next_message(listener)
        assert (message.body, trace_id(message), internal_id(message)) == (
            body,
            trace,
            answer["id"],
        )
        assert (message.offset, message.raw_size) == (answer["queue_offset"], answer["rawsize"])
        assert orjson.loads(message.ext) == {"##trace_id": given}


async def test_pub_ext_invalid_ext_is_e_invalid_json_header(
    nsqd: BoundAddresses, http: httpx.AsyncClient
) -> None:
    await create(http, "e", ext="true")
    expect_error(await post(http, "/pub_ext", topic="e"), 400, "E_INVALID_JSON_HEADER")
    for bad in ("", "{", "not json", "[]", "1", '"s"', "null"):
        response = await post(http, "/pub_ext", headers={"X-Nsqext-a": "b"}, topic="e", ext=bad)
        expect_error(response, 400, "E_INVALID_JSON_HEADER")
    assert published(nsqd, "e") == 0


async def test_pub_ext_trace_id_not_a_uint64_string_is_invalid_trace_id(
    nsqd: BoundAddresses, http: httpx.AsyncClient
) -> None:
    await create(http, "e", ext="true")
    for ext in ('{"##trace_id":5}', '{"##trace_id":"abc"}', '{"##trace_id":"-1"}'):
        response = await post(http, "/pub_ext", topic="e", ext=ext)
        expect_error(response, 400, "INVALID_TRACE_ID")
    response = await post(
        http, "/pub_ext", headers={"X-Nsqext-##Trace_ID": "x"}, topic="e", ext="{}"
    )
    expect_error(response, 400, "INVALID_TRACE_ID")
    assert published(nsqd, "e") == 0


async def test_pub_ext_to_a_missing_topic_is_404_and_creates_nothing(
    nsqd: BoundAddresses, http: httpx.AsyncClient
) -> None:
    await create(http, "e", ext="true")
    for topic, partition in (("t", None), ("t", "0"), ("e", "1")):
        response = await post(http, "/pub_ext", topic=topic, ext="{}", partition=partition)
        expect_error(response, 404, "E_TOPIC_NOT_EXIST")
    assert list(nsqd.broker.topics) == ["e"]


async def test_pub_ext_to_a_plain_topic_is_e_ext_not_support(
    nsqd: BoundAddresses, http: httpx.AsyncClient
) -> None:
    await create(http, "plain")
    for ext in ("{}", '{"##trace_id":"1"}', '{"a":"b"}'):
        response = await post(http, "/pub_ext", topic="plain", ext=ext)
        expect_error(response, 400, "E_EXT_NOT_SUPPORT")
    assert published(nsqd, "plain") == 0


async def test_pub_ext_header_longer_than_the_record_limit_is_400(
    clients: Clients, nsqd: BoundAddresses, http: httpx.AsyncClient
) -> None:
    await create(http, "e", ext="true")
    listener = await consumer(clients, nsqd, "e", 0, ext=True)
    # each '"' is escaped in the stored JSON: a 64 KiB request head gives a longer header
    quotes = '"' * (MAX_EXT_LENGTH // 2 + 1)
    response = await post(http, "/pub_ext", headers={"X-Nsqext-q": quotes}, topic="e", ext="{}")
    expect_error(response, 400, f"E_PUB_FAILED ext header longer than {MAX_EXT_LENGTH} bytes")
    fits = '"' * (MAX_EXT_LENGTH // 2 - 8)  # {"q":"..."} with each quote escaped
    expect_ok(await post(http, "/pub_ext", headers={"X-Nsqext-q": fits}, topic="e", ext="{}"))
    message = await next_message(listener)
    assert orjson.loads(message.ext) == {"q": fits}
    assert len(message.ext) <= MAX_EXT_LENGTH


async def test_pub_ext_empty_body_is_406_msg_empty(http: httpx.AsyncClient) -> None:
    await create(http, "e", ext="true")
    expect_error(await post(http, "/pub_ext", b"", topic="e", ext="{}"), 406, "MSG_EMPTY")


async def test_pub_ext_body_too_big_is_413_msg_too_big(
    nsqd: BoundAddresses, http: httpx.AsyncClient
) -> None:
    await create(http, "e", ext="true")
    status, body = await refused_on_length(nsqd, "/pub_ext?topic=e&ext=%7B%7D")
    assert (status, body) == (
        b"HTTP/1.1 413 Request Entity Too Large",
        b'{"message":"MSG_TOO_BIG"}',
    )


async def test_pub_ext_accepts_a_body_of_max_msg_size(
    clients: Clients, nsqd: BoundAddresses, http: httpx.AsyncClient
) -> None:
    await create(http, "e", ext="true")
    listener = await consumer(clients, nsqd, "e", 0, ext=True)
    expect_ok(await post(http, "/pub_ext", b"x" * MAX_MSG, topic="e", ext="{}"))
    assert (await next_message(listener)).body == b"x" * MAX_MSG


async def test_pub_ext_answers_in_the_legacy_envelope_when_asked(http: httpx.AsyncClient) -> None:
    await create(http, "e", ext="true")
    plain = await post(http, "/pub_ext", headers=LEGACY_ACCEPT, topic="e", ext="{}")
    assert (plain.status_code, plain.content) == (200, b"OK")
    traced = await post(
        http, "/pub_ext", headers=LEGACY_ACCEPT, topic="e", ext='{"##trace_id":"9"}'
    )
    envelope = orjson.loads(traced.content)
    assert (traced.status_code, envelope["status_code"], envelope["status_txt"]) == (200, 200, "OK")
    assert envelope["data"]["trace_id"] == "9"
    refused = await post(http, "/pub_ext", headers=LEGACY_ACCEPT, topic="e", ext="[]")
    assert (refused.status_code, orjson.loads(refused.content)) == (
        500,
        {"status_code": 500, "status_txt": "E_INVALID_JSON_HEADER", "data": None},
    )
    v1 = await post(http, "/pub_ext", headers=V1_ACCEPT, topic="e", ext='{"##trace_id":"9"}')
    assert traced_json(v1)["trace_id"] == "9"


async def test_pubtrace_and_pub_ext_topic_argument_errors_use_youzan_text(
    nsqd: BoundAddresses, http: httpx.AsyncClient
) -> None:
    for path in ("/pubtrace", "/pub_ext"):
        expect_error(await post(http, path, trace_id="1", ext="{}"), 400, "MISSING_ARG_TOPIC")
        response = await post(http, path, topic="bad!", trace_id="1", ext="{}")
        expect_error(response, 400, "INVALID_ARG_TOPIC")
    assert nsqd.broker.topics == {}


async def test_traced_http_publishes_name_the_client_in_the_trace_log(
    nsqd: BoundAddresses, http: httpx.AsyncClient, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="trionsq.trace")
    nsqd.broker.trace_log = True
    await create(http, "t", ext="true")
    traced = await http.post("/pubtrace", params={"topic": "t", "trace_id": "7"}, content=b"a")
    ext = '{"##trace_id":"8"}'
    headed = await http.post("/pub_ext", params={"topic": "t", "ext": ext}, content=b"b")
    assert (traced.status_code, headed.status_code) == (200, 200)
    lines = [r.getMessage() for r in caplog.records if r.name == "trionsq.trace"]
    assert [line.split(" trace_id=")[1].split(" ")[0] for line in lines] == ["7", "8"]
    assert all(line.startswith("PUB topic=t partition=0 ") for line in lines)
    assert all(" client=127.0.0.1:" in line for line in lines)
