"""Rate limits over real sockets (issue 20): a channel's limit (``/channel/rate_limit``,
one for all its partitions), a consumer's own (IDENTIFY ``max_msgs_per_sec`` /
``max_bytes_per_sec``) and a topic's per-producer publish limit
(``/topic/publish_limit``: a refused publish gets a non-fatal error, nothing is
stored, the connection goes on). Time is trio's MockClock. docs/extensions.md.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import orjson
import pytest
import trio
import trio.testing

from trionsq import NsqdConfig
from trionsq.broker.rate_limits import BURST_SECONDS, MESSAGE_OVERHEAD, PublishMode, Rates
from trionsq.client import NsqError, ProducerSettings, open_producer
from trionsq.protocol import (
    Dpub,
    ExtMessage,
    Fin,
    IdentifyRequest,
    Mpub,
    Nop,
    Pub,
    PubExt,
    Rdy,
    Sub,
)
from trionsq.protocol.client import MessageFrame, Response, encode_identify

from .raw import http, next_error, next_frame, next_message, ok, publish, quiet, start

if TYPE_CHECKING:
    from pathlib import Path

    from trionsq.nursery_tree import BoundAddresses
    from trionsq.testing import ProtocolClient

    from .raw import Clients

BACKLOG = 15_000
WINDOW = 10.0
AUTOJUMP = 0.002


async def started(
    clients: Clients, nursery: trio.Nursery, clock: trio.testing.MockClock
) -> tuple[BoundAddresses, ProtocolClient]:
    """A broker on the mock clock, and a producer.

    The clock jumps after ``AUTOJUMP`` of real idleness: every task of the test runs in
    this process, and bytes written to a loopback socket are readable as the write
    returns, so nothing is in flight when all tasks wait; the margin covers a loaded
    machine. A throttled channel's router wakes about 100 times a virtual second, so a
    10 s window is about 1,000 jumps (0.1 s each was 100 s a test)."""
    clock.autojump_threshold = AUTOJUMP
    addresses = await start(nursery)
    producer = await clients.connect(addresses.tcp)
    return addresses, producer


async def backlog(producer: ProtocolClient, topic: str, body: bytes = b"m", **kw: int) -> None:
    """``BACKLOG`` messages in one MPUB."""
    await publish(producer, Mpub(topic, (body,) * BACKLOG, **kw))


async def subscriber(
    clients: Clients,
    addresses: BoundAddresses,
    topic: str,
    *,
    identify: IdentifyRequest | None = None,
    partition: int | None = None,
    rdy: int = 2500,
) -> ProtocolClient:
    client = await clients.connect(addresses.tcp)
    if identify is not None:
        await client.stream.send_all(encode_identify(identify))
        assert ok(await next_frame(client))
    await client.send(Sub(topic, "c", partition), Rdy(rdy))
    assert ok(await next_frame(client))
    return client


async def receive_until(client: ProtocolClient, deadline: float, counts: list[int]) -> None:
    """FIN everything that arrives until ``deadline``, counting it in ``counts[0]``."""
    with trio.move_on_at(deadline):
        while True:
            frames, client.frames = client.frames, []
            if not frames:
                data = await client.stream.receive_some(65536)
                assert data, "the server closed the connection"
                frames = client.decoder.receive_data(data)
            fins = [Fin(f.message.id) for f in frames if isinstance(f, MessageFrame)]
            counts[0] += len(fins)
            heartbeat = any(isinstance(f, Response) and f.is_heartbeat for f in frames)
            if fins or heartbeat:
                await client.send(*fins, *([Nop()] if heartbeat else []))


async def count_window(lead: ProtocolClient) -> int:
    """Messages ``lead`` receives from its first on, for exactly ``WINDOW`` seconds of
    virtual time (the first included)."""
    message = await next_message(lead)
    await lead.send(Fin(message.id))
    return 1 + await count_until(trio.current_time() + WINDOW, lead)


async def count_until(deadline: float, *consumers: ProtocolClient) -> int:
    """Messages the consumers receive (FINning each) until ``deadline``."""
    counts = [[0] for _ in consumers]
    async with trio.open_nursery() as watchers:
        for client, count in zip(consumers, counts, strict=True):
            watchers.start_soon(receive_until, client, deadline, count)
    return sum(count[0] for count in counts)


async def test_a_channel_limit_of_1000_per_second_holds_within_5_percent_over_10_seconds(
    clients: Clients, nursery: trio.Nursery, autojump_clock: trio.testing.MockClock
) -> None:
    addresses, producer = await started(clients, nursery, autojump_clock)
    await backlog(producer, "t")
    answer = await http(
        addresses, "POST", "/channel/rate_limit?topic=t&channel=c&msgs_per_sec=1000"
    )
    assert (answer.status_code, answer.text) == (200, "")
    consumer = await subscriber(clients, addresses, "t")
    received = await count_window(consumer)
    assert 9_500 <= received <= 10_500, received
    document = (await http(addresses, "GET", "/stats?format=json&topic=t")).json()
    channel = document["topics"][0]["channels"][0]
    assert (channel["rate_limit_msgs"], channel["rate_limit_bytes"]) == (1000, 0)
    assert channel["throttled_count"] > 0


async def test_a_consumer_limit_asked_in_identify_holds(
    clients: Clients, nursery: trio.Nursery, autojump_clock: trio.testing.MockClock
) -> None:
    addresses, producer = await started(clients, nursery, autojump_clock)
    await backlog(producer, "t")
    asked = IdentifyRequest(feature_negotiation=True, max_msgs_per_sec=1000)
    consumer = await clients.connect(addresses.tcp)
    await consumer.stream.send_all(encode_identify(asked))
    frame = await next_frame(consumer)
    assert isinstance(frame, Response)
    assert orjson.loads(frame.data)["max_msgs_per_sec"] == 1000  # echoed: it holds
    assert "max_bytes_per_sec" not in orjson.loads(frame.data)
    await consumer.send(Sub("t", "c"), Rdy(2500))
    assert ok(await next_frame(consumer))
    received = await count_window(consumer)
    assert 9_500 <= received <= 10_500, received
    document = (await http(addresses, "GET", "/stats?format=json&topic=t")).json()
    (client,) = document["topics"][0]["channels"][0]["clients"]
    assert (client["max_msgs_per_sec"], client["max_bytes_per_sec"]) == (1000, 0)
    assert "rate_limit_msgs" not in document["topics"][0]["channels"][0]


async def test_a_bytes_limit_holds(
    clients: Clients, nursery: trio.Nursery, autojump_clock: trio.testing.MockClock
) -> None:
    """100,000 bytes/s of 100-byte messages (66 of body, 34 of frame): 1,000 a second."""
    addresses, producer = await started(clients, nursery, autojump_clock)
    await backlog(producer, "t", b"x" * (100 - MESSAGE_OVERHEAD))
    answer = await http(
        addresses, "POST", "/channel/rate_limit?topic=t&channel=c&bytes_per_sec=100000"
    )
    assert answer.status_code == 200
    consumer = await subscriber(clients, addresses, "t")
    received = await count_window(consumer)
    assert 9_500 <= received <= 10_500, received


async def test_a_channel_limit_holds_for_all_partitions_together(
    clients: Clients, nursery: trio.Nursery, autojump_clock: trio.testing.MockClock
) -> None:
    addresses, producer = await started(clients, nursery, autojump_clock)
    answer = await http(addresses, "POST", "/topic/create?topic=t&partition_num=2")
    assert answer.status_code == 200
    await backlog(producer, "t", partition=0)
    await backlog(producer, "t", partition=1)
    answer = await http(
        addresses, "POST", "/channel/rate_limit?topic=t&channel=c&msgs_per_sec=1000"
    )
    assert answer.status_code == 200
    first = await subscriber(clients, addresses, "t", partition=0, rdy=0)
    second = await subscriber(clients, addresses, "t", partition=1, rdy=0)
    start = trio.current_time()  # the window starts before either is ready
    await first.send(Rdy(2500))
    await second.send(Rdy(2500))
    received = await count_until(start + WINDOW, first, second)
    assert 9_500 <= received <= 10_500, received  # not twice the rate
    channels = addresses.broker.find_channel("t", "c")
    assert len(channels) == 2
    assert channels[0].rate_limit is channels[1].rate_limit is not None
    assert all(c.message_count > 1000 for c in channels)  # both partitions delivered


async def test_a_producer_over_its_limit_is_refused_and_goes_on(
    clients: Clients, nursery: trio.Nursery, autojump_clock: trio.testing.MockClock
) -> None:
    addresses, producer = await started(clients, nursery, autojump_clock)
    addresses.broker.topic("t")
    path = "/topic/publish_limit?topic=t&msgs_per_sec=10&mode=refuse"
    answer = await http(addresses, "POST", path)
    assert (answer.status_code, answer.text) == (200, "")
    await publish(producer, Mpub("t", (b"a", b"b", b"c")))  # a full bucket: on debt
    refusals: list[tuple[Pub | Mpub | Dpub, str]] = [
        (Pub("t", b"no"), "E_PUB_FAILED PUB failed rate limit exceeded"),
        (Mpub("t", (b"no", b"no")), "E_MPUB_FAILED MPUB failed rate limit exceeded"),
        (Dpub("t", 1000, b"no"), "E_DPUB_FAILED DPUB failed rate limit exceeded"),
    ]
    for command, text in refusals:
        await producer.send(command)
        error = await next_error(producer)
        assert (error.error.text, error.error.fatal) == (text, False)
    other = await clients.connect(addresses.tcp)
    await publish(other, Pub("t", b"d"))  # each connection has its own bucket
    assert addresses.broker.topics["t"].statistics().message_count == 4  # nothing refused kept
    await trio.sleep(0.4)  # 0.3 s repays the debt of 3, then a token
    await publish(producer, Pub("t", b"e"))  # the same connection publishes again
    assert addresses.broker.topics["t"].statistics().message_count == 5
    assert (await http(addresses, "POST", "/pub?topic=t", b"f")).status_code == 200
    refused = await http(addresses, "POST", "/pub?topic=t", b"g")
    assert (refused.status_code, refused.json()) == (429, {"message": "RATE_LIMITED"})
    assert refused.headers["Retry-After"] == "1"  # a token in 0.1 s: whole seconds, at least 1
    refused = await http(addresses, "POST", "/mpub?topic=t", b"g\nh")
    assert (refused.status_code, refused.headers["Retry-After"]) == (429, "1")
    document = (await http(addresses, "GET", "/stats?format=json&topic=t")).json()
    topic = document["topics"][0]
    assert (topic["publish_limit_msgs"], topic["publish_limit_bytes"]) == (10, 0)
    assert (topic["publish_limit_mode"], topic["publish_throttled_count"]) == ("refuse", 0)
    assert topic["publish_refused_count"] == 5
    assert topic["message_count"] == 6
    answer = await http(addresses, "POST", "/topic/publish_limit?topic=t&msgs_per_sec=0")
    assert answer.status_code == 200
    await publish(producer, *[Pub("t", b"free") for _ in range(20)])  # no limit any more
    document = (await http(addresses, "GET", "/stats?format=json&topic=t")).json()
    assert "publish_limit_msgs" not in document["topics"][0]


async def test_without_limits_nothing_changes(
    clients: Clients, nursery: trio.Nursery, autojump_clock: trio.testing.MockClock
) -> None:
    addresses, producer = await started(clients, nursery, autojump_clock)
    await publish(producer, Pub("t", b"a"))
    consumer = await subscriber(clients, addresses, "t")
    assert (await next_message(consumer)).body == b"a"
    document = (await http(addresses, "GET", "/stats?format=json&topic=t")).json()
    topic = document["topics"][0]
    channel = topic["channels"][0]
    for key in ("rate_limit_msgs", "rate_limit_bytes", "throttled_count"):
        assert key not in channel
    assert "max_msgs_per_sec" not in channel["clients"][0]
    assert "publish_limit_msgs" not in topic
    (only,) = addresses.broker.find_channel("t", "c")
    assert (only.rate_limit, only.limited_consumers, only.refill_at) == (None, 0, None)


async def test_bad_settings_are_refused_with_a_reason(
    clients: Clients, nursery: trio.Nursery, autojump_clock: trio.testing.MockClock
) -> None:
    addresses, _ = await started(clients, nursery, autojump_clock)
    addresses.broker.topic("t")
    cases = [
        ("/channel/rate_limit?topic=t&channel=c", "MISSING_ARG_RATE"),
        ("/channel/rate_limit?topic=t&channel=c&msgs_per_sec=-1", "INVALID_ARG_MSGS_PER_SEC"),
        ("/channel/rate_limit?topic=t&channel=c&msgs_per_sec=1.5", "INVALID_ARG_MSGS_PER_SEC"),
        (
            "/channel/rate_limit?topic=t&channel=c&msgs_per_sec=100000001",
            "INVALID_ARG_MSGS_PER_SEC",
        ),
        ("/channel/rate_limit?topic=t&channel=c&bytes_per_sec=x", "INVALID_ARG_BYTES_PER_SEC"),
        (
            "/channel/rate_limit?topic=t&channel=c&bytes_per_sec=" + "9" * 30,
            "INVALID_ARG_BYTES_PER_SEC",
        ),
        ("/channel/rate_limit?topic=t&msgs_per_sec=1", "MISSING_ARG_CHANNEL"),
        ("/channel/rate_limit?topic=missing&channel=c&msgs_per_sec=1", "TOPIC_NOT_FOUND"),
        ("/topic/publish_limit?topic=t", "MISSING_ARG_RATE"),
        ("/topic/publish_limit?topic=t&msgs_per_sec=ten", "INVALID_ARG_MSGS_PER_SEC"),
        ("/topic/publish_limit?topic=missing&msgs_per_sec=1", "TOPIC_NOT_FOUND"),
        ("/topic/publish_limit?topic=t&msgs_per_sec=1&mode=drop", "INVALID_ARG_MODE"),
        ("/topic/publish_limit?topic=t&mode=refuse", "MISSING_ARG_RATE"),  # no limit to mode
    ]
    for path, reason in cases:
        answer = await http(addresses, "POST", path)
        assert answer.status_code in (400, 404), path
        assert answer.json() == {"message": reason}, path
    assert not addresses.broker.find_channel("t", "c")  # nothing was created by a refusal
    for request, text in [
        (IdentifyRequest(max_msgs_per_sec=-1), "max msgs per sec (-1) is invalid"),
        (
            IdentifyRequest(max_msgs_per_sec=100_000_001),
            "max msgs per sec (100000001) is invalid",
        ),
        (
            IdentifyRequest(max_bytes_per_sec=2**40 + 1),
            f"max bytes per sec ({2**40 + 1}) is invalid",
        ),
    ]:
        client = await clients.connect(addresses.tcp)
        await client.stream.send_all(encode_identify(request))
        error = await next_error(client)
        assert error.error.text == f"E_BAD_BODY IDENTIFY {text}"


async def test_limits_survive_a_restart(
    clients: Clients, nursery: trio.Nursery, tmp_path: Path
) -> None:
    config = NsqdConfig.loopback(data_path=str(tmp_path))
    async with trio.open_nursery() as first:
        addresses: BoundAddresses = await first.start(_serve, config)
        addresses.broker.topic("t", partitions=2)
        for path in (
            "/channel/rate_limit?topic=t&channel=c&msgs_per_sec=500&bytes_per_sec=65536",
            "/channel/rate_limit?topic=t&channel=c&msgs_per_sec=700",  # bytes kept
            "/channel/create?topic=t&channel=plain",
            "/topic/publish_limit?topic=t&bytes_per_sec=1000000",
            "/topic/publish_limit?topic=t&mode=refuse",  # the mode alone: the rates kept
        ):
            assert (await http(addresses, "POST", path)).status_code == 200
        first.cancel_scope.cancel()
    metadata = orjson.loads((tmp_path / "metadata.json").read_bytes())
    (topic,) = metadata["topics"]
    assert (topic["publish_limit_bytes"], "publish_limit_msgs" in topic) == (1_000_000, False)
    assert topic["publish_limit_mode"] == "refuse"  # the default (throttle) is not written
    channels = {c["name"]: c for c in topic["channels"]}
    assert "rate_limit_msgs" not in channels["plain"]  # defaults are not written
    again: BoundAddresses = await nursery.start(_serve, config)
    restored = again.broker.find_channel("t", "c")
    assert len(restored) == 2
    assert restored[0].rate_limit is restored[1].rate_limit
    assert restored[0].rate_limit is not None
    assert restored[0].rate_limit.rates == Rates(700, 65536)
    (plain, _) = again.broker.find_channel("t", "plain")
    assert plain.rate_limit is None
    limit = again.broker.topics["t"].publish_limit
    assert limit is not None
    assert (limit.rates, limit.mode) == (Rates(0, 1_000_000), PublishMode.REFUSE)


async def _serve(config: NsqdConfig, *, task_status: trio.TaskStatus[BoundAddresses]) -> None:
    from trionsq import serve_nsqd

    await serve_nsqd(config, task_status=task_status)


async def test_youzan_publishes_get_youzan_refusals(
    clients: Clients, nursery: trio.Nursery, autojump_clock: trio.testing.MockClock
) -> None:
    addresses, producer = await started(clients, nursery, autojump_clock)
    addresses.broker.topic("events", ext=True)
    addresses.broker.topic("parts", partitions=2)
    for topic in ("events", "parts"):
        answer = await http(
            addresses, "POST", f"/topic/publish_limit?topic={topic}&msgs_per_sec=10&mode=refuse"
        )
        assert answer.status_code == 200
    await producer.stream.send_all(encode_identify(IdentifyRequest(extend_support=True)))
    assert ok(await next_frame(producer))
    message = ExtMessage(b'{"k":"v"}', b"body")
    await publish(producer, PubExt("events", message))
    await producer.send(PubExt("events", message))
    error = await next_error(producer)
    assert (error.error.text, error.error.fatal) == ("E_PUB_FAILED rate limit exceeded", False)
    await publish(producer, Pub("parts", b"a", partition=1))
    await producer.send(Mpub("parts", (b"b",), partition=0))  # one bucket per topic
    error = await next_error(producer)
    assert error.error.text == "E_MPUB_FAILED rate limit exceeded"
    refused = await http(addresses, "POST", "/pub_ext?topic=events&ext=%7B%7D", b"x")
    assert refused.status_code == 200  # HTTP has its own bucket: full
    refused = await http(addresses, "POST", "/pub_ext?topic=events&ext=%7B%7D", b"x")
    assert (refused.status_code, refused.json()) == (429, {"message": "RATE_LIMITED"})
    assert addresses.broker.topics["events"].statistics().message_count == 2


async def publish_limit(addresses: BoundAddresses, query: str) -> None:
    answer = await http(addresses, "POST", f"/topic/publish_limit?{query}")
    assert (answer.status_code, answer.text) == (200, ""), answer.text


async def test_a_throttling_limit_holds_pipelined_publishes_and_refuses_none(
    clients: Clients, nursery: trio.Nursery, autojump_clock: trio.testing.MockClock
) -> None:
    """The default mode (issue 30): 300 PUBs sent at once over a limit of 100/s all get
    their OK, in order, at the limit's rate (the bucket's 5 at once, then 100 a second);
    nothing is refused, so a client that pipelines (pynsq) sees no error."""
    addresses, producer = await started(clients, nursery, autojump_clock)
    addresses.broker.topic("t")
    await publish_limit(addresses, "topic=t&msgs_per_sec=100")
    start = trio.current_time()
    await producer.send(*(Pub("t", b"%d" % i) for i in range(300)))
    answers = [await next_frame(producer) for _ in range(300)]
    elapsed = trio.current_time() - start
    assert all(ok(answer) for answer in answers)
    expected = (300 - 100 * BURST_SECONDS) / 100
    assert abs(elapsed - expected) <= 0.05 * expected, elapsed
    document = (await http(addresses, "GET", "/stats?format=json&topic=t")).json()
    topic = document["topics"][0]
    assert (topic["message_count"], topic["publish_limit_mode"]) == (300, "throttle")
    assert topic["publish_refused_count"] == 0
    assert topic["publish_throttled_count"] >= 250  # a wait per token: 100/s is a step of 1


async def test_a_long_throttle_keeps_the_connection(
    clients: Clients, nursery: trio.Nursery, autojump_clock: trio.testing.MockClock
) -> None:
    """An MPUB far over the bucket goes on debt; the next publish waits the debt off
    (20 s here), longer than the read deadline (two heartbeats of 1 s): the broker held
    the reads, so the connection is not closed for the client's silence, and the
    consumer side of the broker goes on meanwhile."""
    addresses, _ = await started(clients, nursery, autojump_clock)
    addresses.broker.topic("t")
    await publish_limit(addresses, "topic=t&msgs_per_sec=10")
    producer = await clients.connect(addresses.tcp)
    await producer.stream.send_all(encode_identify(IdentifyRequest(heartbeat_interval=1000)))
    assert ok(await next_frame(producer))
    await publish(producer, Mpub("t", (b"m",) * 201))  # a token held: it goes, owing 200
    start = trio.current_time()
    await publish(producer, Pub("t", b"after"))
    assert 19.9 <= trio.current_time() - start <= 20.5
    await publish(producer, Pub("u", b"other topic"))  # no limit there: at once
    assert addresses.broker.topics["t"].statistics().message_count == 202


async def test_http_publishes_wait_for_a_throttling_limit_within_a_bound(
    clients: Clients, nursery: trio.Nursery, autojump_clock: trio.testing.MockClock
) -> None:
    """HTTP publishes share one bucket: over a throttling limit one waits for a token
    (up to 10 s), then is stored; one that would wait longer is a 429 with
    Retry-After, and nothing is stored."""
    addresses, _ = await started(clients, nursery, autojump_clock)
    addresses.broker.topic("t")
    await publish_limit(addresses, "topic=t&msgs_per_sec=10")  # one token, 0.1 s each
    assert (await http(addresses, "POST", "/pub?topic=t", b"a")).status_code == 200
    start = trio.current_time()
    assert (await http(addresses, "POST", "/pub?topic=t", b"b")).status_code == 200
    assert 0.09 <= trio.current_time() - start <= 0.15  # it waited for the token
    start = trio.current_time()
    lines = b"\n".join([b"m"] * 150)  # on debt: 15 s until a token again
    assert (await http(addresses, "POST", "/mpub?topic=t", lines)).status_code == 200
    refused = await http(addresses, "POST", "/pub?topic=t", b"c")
    assert trio.current_time() - start < 0.5  # refused at once, not after 10 s
    assert (refused.status_code, refused.json()) == (429, {"message": "RATE_LIMITED"})
    assert 14 <= int(refused.headers["Retry-After"]) <= 16
    await trio.sleep(int(refused.headers["Retry-After"]))
    assert (await http(addresses, "POST", "/pub?topic=t", b"d")).status_code == 200
    topic = (await http(addresses, "GET", "/stats?format=json&topic=t")).json()["topics"][0]
    assert (topic["message_count"], topic["publish_refused_count"]) == (153, 1)
    assert topic["publish_throttled_count"] >= 1


async def test_the_trionsq_producer_backs_off_over_a_refusing_limit(
    clients: Clients, nursery: trio.Nursery, autojump_clock: trio.testing.MockClock
) -> None:
    """trionsq.client retries a publish a refusing limit turned down (nothing was
    stored, so nothing is stored twice) until it goes; past ``rate_limit_timeout`` the
    error is raised."""
    addresses, _ = await started(clients, nursery, autojump_clock)
    addresses.broker.topic("t")
    await publish_limit(addresses, "topic=t&msgs_per_sec=20&mode=refuse")
    host, port = addresses.tcp
    sent = [b"%d" % i for i in range(60)]
    async with open_producer(f"{host}:{port}") as producer:
        async with trio.open_nursery() as publishers:  # concurrent: batched into MPUBs
            for body in sent[:30]:
                publishers.start_soon(producer.publish, "t", body)
        for body in sent[30:]:  # one at a time
            await producer.publish("t", body)
        assert producer.rate_limited > 0
    consumer = await subscriber(clients, addresses, "t")
    received = [(await next_message(consumer)).body for _ in sent]
    assert sorted(received) == sorted(sent)  # every message once
    assert not await quiet(consumer, 1.0)
    settings = ProducerSettings(rate_limit_timeout=0.5)
    async with open_producer(f"{host}:{port}", settings=settings) as producer:
        await producer.publish_many("t", [b"x"] * 100)  # on debt: 5 s until a token
        start = trio.current_time()
        with pytest.raises(NsqError, match="rate limit exceeded") as refused:
            await producer.publish("t", b"late")
        assert not refused.value.fatal
        assert trio.current_time() - start <= 0.5
