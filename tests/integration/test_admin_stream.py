"""The admin stream (docs/admin.md) over real sockets: events in order for every
action, snapshots that equal /stats, admin ops with the HTTP API's answers, samples,
AUTH, and a subscriber that stops reading is dropped with bounded memory."""

from __future__ import annotations

import base64
from contextlib import asynccontextmanager
from typing import TYPE_CHECKING, Any

import orjson
import pytest
import trio
import trio.lowlevel
from trio_websocket import ConnectionClosed, WebSocketConnection, wrap_client_stream

from trionsq import NsqdConfig
from trionsq.broker.events import QUEUE_LIMIT
from trionsq.protocol import Fin, IdentifyRequest, Rdy, Sub
from trionsq.protocol.client import MessageFrame, encode_identify
from trionsq.server.memory_stats import resident_bytes
from trionsq.testing import ProtocolClient, wait_until

from ..auth_server import grant, start_auth_server
from .raw import http, start

if TYPE_CHECKING:
    from collections.abc import AsyncIterator

    from trionsq.nursery_tree import BoundAddresses

Message = dict[str, Any]


@asynccontextmanager
async def open_stream(
    broker: BoundAddresses, query: str = ""
) -> AsyncIterator[WebSocketConnection]:
    """A websocket on ``/admin/stream``; the test owns the TCP socket and closes it,
    which trio-websocket's own URL opener leaves open when the server closes first."""
    assert broker.http is not None
    host, port = broker.http
    stream = await trio.open_tcp_stream(host, port)
    try:
        async with trio.open_nursery() as nursery:
            resource = f"/admin/stream{'?' + query if query else ''}"
            ws = await wrap_client_stream(nursery, stream, host, resource)
            try:
                yield ws
            finally:
                with trio.move_on_after(2) as closing:
                    closing.shield = True
                    await ws.aclose()
                nursery.cancel_scope.cancel()
    finally:
        await trio.aclose_forcefully(stream)


async def receive(ws: WebSocketConnection) -> Message:
    with trio.fail_after(5):
        message: Message = orjson.loads(await ws.get_message())
    return message


async def events_until(ws: WebSocketConnection, last: str) -> list[Message]:
    """Every message but snapshots, up to and including the first of type ``last``."""
    seen: list[Message] = []
    while True:
        message = await receive(ws)
        if message["type"] != "snapshot":
            seen.append(message)
        if message["type"] == last:
            return seen


async def snapshot_where(ws: WebSocketConnection, ready: Any) -> Message:
    """The first snapshot for which ``ready(snapshot)`` holds."""
    while True:
        message = await receive(ws)
        if message["type"] == "snapshot" and ready(message):
            return message


async def send(ws: WebSocketConnection, **op: object) -> None:
    await ws.send_message(orjson.dumps(op).decode())


async def test_hello_then_a_first_snapshot_that_equals_stats(nursery: trio.Nursery) -> None:
    broker = await start(nursery)
    await http(broker, "POST", "/topic/create?topic=orders&partition_num=2")
    await http(broker, "POST", "/channel/create?topic=orders&channel=billing")
    await http(broker, "POST", "/pub?topic=orders", b"x" * 100)
    async with open_stream(broker, "snapshot_interval_ms=100") as ws:
        hello = await receive(ws)
        assert hello["type"] == "hello"
        assert hello["seq"] == 1
        assert hello["version"] == "1.3.0"
        assert hello["tcp_port"] == broker.tcp[1]
        assert hello["auth_required"] is False
        assert hello["subscription"]["snapshot_interval_ms"] == 100
        snapshot = await receive(ws)
        assert snapshot["type"] == "snapshot"
        assert snapshot["seq"] == 2
        stats = (await http(broker, "GET", "/stats?format=json")).json()
        (topic,) = snapshot["topics"]
        (expected,) = stats["topics"]
        added = {"message_rate"}
        assert {k: v for k, v in topic.items() if k not in added | {"channels"}} == {
            k: v for k, v in expected.items() if k != "channels"
        }
        (channel,) = topic["channels"]
        channel_added = {"finish_count", "message_rate", "finish_rate", "requeue_rate"}
        channel_added |= {"timeout_rate"}
        assert {k: v for k, v in channel.items() if k not in channel_added} == (
            expected["channels"][0]
        )
        assert channel["depth"] == 1
        assert channel["finish_count"] == 0
        assert [p["partition"] for p in topic["partitions"]] == [0, 1]
        assert snapshot["rss_bytes"] > 10_000_000
        assert snapshot["health"] == "OK"


async def test_every_admin_action_is_an_event_in_the_order_done(nursery: trio.Nursery) -> None:
    broker = await start(nursery)
    async with open_stream(broker, "snapshot_interval_ms=0") as ws:
        assert (await receive(ws))["type"] == "hello"
        actions = [
            ("/topic/create?topic=t&partition_num=2", "topic_created"),
            ("/channel/create?topic=t&channel=c", "channel_created"),
            ("/topic/pause?topic=t", "topic_paused"),
            ("/topic/unpause?topic=t", "topic_unpaused"),
            ("/channel/pause?topic=t&channel=c", "channel_paused"),
            ("/channel/unpause?topic=t&channel=c", "channel_unpaused"),
            ("/channel/empty?topic=t&channel=c", "channel_emptied"),
            ("/topic/empty?topic=t", "topic_emptied"),
            ("/channel/delete?topic=t&channel=c", "channel_deleted"),
            ("/topic/delete?topic=t", "topic_deleted"),
        ]
        for path, _ in actions:
            assert (await http(broker, "POST", path)).status_code == 200
        seen = await events_until(ws, "topic_deleted")
        assert [m["type"] for m in seen] == [
            "topic_created",
            "partition_created",
            "partition_created",
            *[kind for _, kind in actions[1:]],
        ]
        assert [m["seq"] for m in seen] == list(range(2, 2 + len(seen)))
        assert all(m["topic"] == "t" for m in seen)
        assert [m["partition"] for m in seen if m["type"] == "partition_created"] == [0, 1]
        assert all(m["channel"] == "c" for m in seen if m["type"].startswith("channel"))
        assert all(isinstance(m["ts"], int) for m in seen)


async def test_client_lifecycle_events(nursery: trio.Nursery) -> None:
    broker = await start(nursery)
    async with open_stream(broker, "events=client") as ws:
        assert (await receive(ws))["type"] == "hello"
        client = await ProtocolClient.connect(broker.tcp)
        request = IdentifyRequest(hostname="box-7", user_agent="probe/1.0")
        await client.stream.send_all(encode_identify(request))
        await client.send(Sub("t", "c"), Rdy(1))
        await client.read(2)
        seen = await events_until(ws, "client_subscribed")
        assert [m["type"] for m in seen] == [
            "client_connected",
            "client_identified",
            "client_subscribed",
        ]
        ids = {m["client_id"] for m in seen}
        assert len(ids) == 1
        (client_id,) = ids
        assert seen[1]["hostname"] == "box-7"
        assert seen[1]["user_agent"] == "probe/1.0"
        stats = (await http(broker, "GET", "/stats?format=json")).json()
        (listed,) = stats["topics"][0]["channels"][0]["clients"]
        assert {m["remote_address"] for m in seen} == {listed["remote_address"]}
        assert seen[2] | {"ts": 0, "seq": 0} == {
            "type": "client_subscribed",
            "seq": 0,
            "ts": 0,
            "topic": "t",
            "client_id": client_id,
            "remote_address": listed["remote_address"],
            "channel": "c",
            "partition": 0,
        }
        await client.aclose()
        (gone,) = await events_until(ws, "client_disconnected")
        assert gone["client_id"] == client_id


async def test_snapshots_follow_depth_rates_and_finishes(nursery: trio.Nursery) -> None:
    broker = await start(nursery)
    await http(broker, "POST", "/topic/create?topic=t")
    await http(broker, "POST", "/channel/create?topic=t&channel=c")
    async with open_stream(broker, "snapshot_interval_ms=100&topics=t") as ws:
        await snapshot_where(ws, lambda s: s["topics"][0]["depth"] == 0)
        await http(broker, "POST", "/mpub?topic=t", b"\n".join([b"m"] * 25))
        snapshot = await snapshot_where(ws, lambda s: s["topics"][0]["channels"][0]["depth"] == 25)
        channel = snapshot["topics"][0]["channels"][0]
        assert channel["message_count"] == 25
        consumer = await ProtocolClient.connect(broker.tcp)
        await consumer.send(Sub("t", "c"), Rdy(25))
        frames = await consumer.read(26)
        messages = [f for f in frames if isinstance(f, MessageFrame)]
        assert len(messages) == 25
        await consumer.send(*(Fin(m.message.id) for m in messages))
        snapshot = await snapshot_where(
            ws, lambda s: s["topics"][0]["channels"][0]["finish_count"] == 25
        )
        channel = snapshot["topics"][0]["channels"][0]
        assert channel["depth"] == 0
        assert channel["in_flight_count"] == 0
        assert channel["clients"][0]["finish_count"] == 25
        stats = (await http(broker, "GET", "/stats?format=json&topic=t")).json()
        assert stats["topics"][0]["channels"][0]["message_count"] == 25
        await consumer.aclose()


async def test_a_rate_is_per_second_between_two_snapshots(nursery: trio.Nursery) -> None:
    broker = await start(nursery)
    await http(broker, "POST", "/topic/create?topic=t")
    async with open_stream(broker, "snapshot_interval_ms=500&topics=t") as ws:
        snapshot = await snapshot_where(ws, lambda s: True)
        await http(broker, "POST", "/mpub?topic=t", b"\n".join([b"m"] * 100))
        while snapshot["topics"][0]["message_count"] < 100:
            before, snapshot = snapshot, await snapshot_where(ws, lambda s: True)
        # 100 messages between two snapshots: up to 0.5 s apart (the first comes at
        # once, the next on the interval's boundary, which every subscriber shares)
        expected = 100 / ((snapshot["ts"] - before["ts"]) / 1000)
        assert expected * 0.8 <= snapshot["topics"][0]["message_rate"] <= expected * 1.25


async def test_topic_and_event_filters(nursery: trio.Nursery) -> None:
    broker = await start(nursery)
    query = "topics=wanted&events=topic,channel&snapshot_interval_ms=0"
    async with open_stream(broker, query) as ws:
        hello = await receive(ws)
        assert hello["subscription"] == {
            "topics": ["wanted"],
            "events": ["topic", "channel"],
            "snapshot_interval_ms": 0,
        }
        await http(broker, "POST", "/topic/create?topic=other")
        await http(broker, "POST", "/topic/create?topic=wanted")
        await http(broker, "POST", "/channel/create?topic=wanted&channel=c")
        seen = await events_until(ws, "channel_created")
        assert [(m["type"], m["topic"]) for m in seen] == [
            ("topic_created", "wanted"),
            ("channel_created", "wanted"),
        ]  # no partition_created (not asked), nothing of "other"
        await send(ws, op="subscribe", topics=None, events=["topic"], snapshot_interval_ms=0)
        await http(broker, "POST", "/topic/pause?topic=other")
        (paused,) = await events_until(ws, "topic_paused")
        assert paused["topic"] == "other"


async def test_bad_frames_and_subscriptions_get_an_error_and_the_stream_goes_on(
    nursery: trio.Nursery,
) -> None:
    broker = await start(nursery)
    async with open_stream(broker, "snapshot_interval_ms=0") as ws:
        await receive(ws)
        await ws.send_message("not json")
        assert (await receive(ws))["error"] == "a frame must be a JSON object"
        await send(ws, op="dance", ref=3)
        error = await receive(ws)
        assert error == error | {"type": "error", "ref": 3, "error": "unknown op 'dance'"}
        await send(ws, op="subscribe", events=["gossip"], ref=4)
        assert "events must be a list of" in (await receive(ws))["error"]
        await send(ws, op="subscribe", snapshot_interval_ms=5, ref=5)
        assert (await receive(ws))["error"] == "snapshot_interval_ms must be 0 or at least 100"
        await send(ws, op="topic.create", topic="still-here", ref=6)
        assert [m["type"] for m in await events_until(ws, "reply")][-1] == "reply"
    async with open_stream(broker, "snapshot_interval_ms=7") as ws:
        with pytest.raises(ConnectionClosed) as closed:
            await receive(ws)
        assert closed.value.reason is not None
        assert closed.value.reason.code == 1008


async def test_admin_ops_answer_as_the_http_api(nursery: trio.Nursery) -> None:
    broker = await start(nursery)
    async with open_stream(broker, "snapshot_interval_ms=0") as ws:
        await receive(ws)
        await send(ws, op="topic.create", ref=1, topic="t", partition_num=2)
        seen = await events_until(ws, "reply")
        assert [m["type"] for m in seen] == [
            "topic_created",
            "partition_created",
            "partition_created",
            "reply",
        ]
        assert seen[-1] | {"seq": 0, "ts": 0} == {
            "type": "reply",
            "seq": 0,
            "ts": 0,
            "ref": 1,
            "ok": True,
            "status": 200,
        }
        await send(ws, op="channel.create", ref=2, topic="t", channel="c")
        await send(ws, op="channel.pause", ref=3, topic="t", channel="c")
        await send(ws, op="topic.pause", ref=4, topic="t")
        seen = await events_until(ws, "topic_paused")
        assert [m["type"] for m in seen] == [
            "channel_created",
            "reply",
            "channel_paused",
            "reply",
            "topic_paused",
        ]
        await events_until(ws, "reply")
        stats = (await http(broker, "GET", "/stats?format=json")).json()
        assert stats["topics"][0]["paused"] is True
        assert stats["topics"][0]["channels"][0]["paused"] is True
        # the same refusals, statuses and texts as over HTTP
        refusals: list[tuple[str, dict[str, object], str]] = [
            (
                "channel.pause",
                {"topic": "t", "channel": "nope"},
                "/channel/pause?topic=t&channel=nope",
            ),
            ("topic.delete", {"topic": "missing"}, "/topic/delete?topic=missing"),
            ("topic.create", {"topic": "bad name!"}, "/topic/create?topic=bad%20name!"),
            (
                "topic.create",
                {"topic": "t", "partition_num": 999},
                "/topic/create?topic=t&partition_num=999",
            ),
            ("channel.empty", {"topic": "t"}, "/channel/empty?topic=t"),
        ]
        for op, args, path in refusals:
            await send(ws, op=op, ref=op, **args)
            (reply,) = [m for m in await events_until(ws, "reply") if m["type"] == "reply"]
            answer = await http(broker, "POST", path)
            assert reply["ok"] is False, (op, args)
            assert reply["status"] == answer.status_code, (op, args)
            assert reply["error"] == answer.json()["message"]
        await send(ws, op="channel.setoffset", ref=9, topic="t", channel="c", offset='{"count": 0}')
        (reply,) = [m for m in await events_until(ws, "reply") if m["type"] == "reply"]
        answer = await http(broker, "POST", "/channel/setoffset?topic=t&channel=c", b'{"count": 0}')
        assert (reply["status"], reply.get("error")) == (
            answer.status_code,
            answer.json()["message"] if answer.status_code != 200 else None,
        )
        await send(ws, op="topic.delete", ref=10, topic="t")
        seen = await events_until(ws, "reply")
        assert [m["type"] for m in seen][-2:] == ["topic_deleted", "reply"]
        assert "t" not in broker.broker.topics


async def test_samples_carry_metadata_and_bodies_only_when_asked(nursery: trio.Nursery) -> None:
    broker = await start(nursery)
    await http(broker, "POST", "/topic/create?topic=t")
    async with open_stream(broker, "snapshot_interval_ms=0") as ws:
        await receive(ws)
        await send(ws, op="sample", ref=1, topic="t", every=10)
        await events_until(ws, "reply")
        await http(broker, "POST", "/mpub?topic=t", b"\n".join(b"m%02d" % i for i in range(35)))
        samples = [m for m in await events_until(ws, "sample") if m["type"] == "sample"]
        while len(samples) < 4:
            samples.append(await receive(ws))
        assert [s["type"] for s in samples] == ["sample"] * 4
        assert [int(s["id"], 16) for s in samples] == [1, 11, 21, 31]  # 1 in 10 from the first
        assert all("body" not in s and s["size"] == 3 and s["topic"] == "t" for s in samples)
        await send(ws, op="sample", ref=2, topic="t", every=1, bodies=True)
        await events_until(ws, "reply")
        await http(broker, "POST", "/pub?topic=t", b"hello")
        sample = (await events_until(ws, "sample"))[-1]
        assert base64.b64decode(sample["body"]) == b"hello"
        await send(ws, op="sample", ref=3, topic="t", every=0)
        await events_until(ws, "reply")
        assert broker.broker.events.samplers == {}
        await send(ws, op="sample", ref=4, topic="t", every=-1)
        reply = (await events_until(ws, "reply"))[-1]
        assert (reply["status"], reply["error"]) == (400, "INVALID_ARG_EVERY")


async def test_a_subscriber_that_never_reads_is_dropped_and_memory_stays_bounded(
    nursery: trio.Nursery,
) -> None:
    """A raw websocket client that sends its upgrade and never reads again, while
    the broker makes events as fast as it can (a topic paused and unpaused): once
    the socket's buffers are full, the subscriber's queue fills, and it is dropped."""
    broker = await start(nursery)
    events = broker.broker.events
    broker.broker.topic("t")
    stalled = await trio.open_tcp_stream(*broker.http)  # type: ignore[misc]
    await stalled.send_all(
        b"GET /admin/stream?snapshot_interval_ms=0&events=topic HTTP/1.1\r\nHost: x\r\n"
        b"Upgrade: websocket\r\nConnection: Upgrade\r\nSec-WebSocket-Version: 13\r\n"
        b"Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\n\r\n"
    )
    await wait_until(lambda: len(events.watchers) == 1, "the subscriber is registered")
    (watcher,) = events.watchers
    rss_before = resident_bytes()
    longest = made = 0
    with trio.fail_after(60):
        while events.watchers:
            for _ in range(500):
                broker.broker.set_topic_paused("t", True)
                broker.broker.set_topic_paused("t", False)
            made += 1000
            longest = max(longest, len(watcher.queue))
            await trio.lowlevel.checkpoint()
    assert watcher.overflowed
    assert QUEUE_LIMIT - 1000 <= longest <= QUEUE_LIMIT
    assert not watcher.queue  # dropped with its subscriber
    growth = resident_bytes() - rss_before
    assert growth < 32 * 1024 * 1024, (growth, made)
    with trio.fail_after(10):  # the broker closed the socket: after what it had sent, EOF
        while await stalled.receive_some(1 << 20):
            pass
    await stalled.aclose()


async def test_without_a_secret_the_stream_closes_with_4001_and_ops_need_rights(
    nursery: trio.Nursery,
) -> None:
    server = await start_auth_server(
        nursery,
        {
            "viewer": grant(
                [{"topic": "^orders$", "channels": ["^nothing$"], "permissions": ["subscribe"]}]
            ),
            "operator": grant(
                [{"topic": ".*", "channels": [".*"], "permissions": ["publish", "subscribe"]}]
            ),
        },
    )
    broker = await start(nursery, NsqdConfig.loopback(auth_http_addresses=(server.address,)))
    await http(broker, "POST", "/topic/create?topic=orders")
    await http(broker, "POST", "/channel/create?topic=orders&channel=billing")
    async with open_stream(broker) as ws:
        hello = await receive(ws)
        assert hello["auth_required"] is True
        await send(ws, op="topic.pause", topic="orders", ref=1)  # before auth: refused
        assert (await receive(ws))["error"] == "send auth first"
        await send(ws, op="auth", secret="wrong")  # noqa: S106 - a test secret
        error = await receive(ws)
        assert error["type"] == "error"
        assert "E_AUTH_FAILED" in error["error"]
        with pytest.raises(ConnectionClosed) as closed:
            await receive(ws)
        assert closed.value.reason is not None
        assert closed.value.reason.code == 4001
    async with open_stream(broker, "auth_secret=viewer") as ws:
        await receive(ws)
        await send(ws, op="topic.pause", topic="orders", ref=1)
        await send(ws, op="channel.pause", topic="orders", channel="billing", ref=2)
        await send(ws, op="sample", topic="orders", every=1, bodies=True, ref=3)
        replies = [m for m in await events_until(ws, "reply") if m["type"] == "reply"]
        while len(replies) < 3:
            message = await receive(ws)
            if message["type"] == "reply":
                replies.append(message)
        assert [(r["ref"], r["status"]) for r in replies] == [(1, 403), (2, 403), (3, 403)]
        assert replies[0]["error"].startswith("E_UNAUTHORIZED")
        stats = (await http(broker, "GET", "/stats?format=json")).json()
        assert stats["topics"][0]["paused"] is False
    async with open_stream(broker, "snapshot_interval_ms=0") as ws:
        await receive(ws)
        await send(ws, op="auth", secret="operator", ref="a")  # noqa: S106 - a test secret
        accepted = await receive(ws)
        assert (accepted["type"], accepted["ref"], accepted["ok"]) == ("reply", "a", True)
        await send(ws, op="topic.pause", topic="orders", ref=1)
        seen = await events_until(ws, "reply")
        assert [m["type"] for m in seen] == ["topic_paused", "reply"]
        assert seen[-1]["ok"] is True
