"""TubeMQ clients in /stats, /metrics and the admin stream, marked as such: a producer
is a publishing client, each consumer seat a client of its group's channel, all with
``version: tubemq``; registering and leaving are client events."""

from __future__ import annotations

from typing import TYPE_CHECKING

import trio

from .raw import http
from .test_admin_stream import events_until, open_stream, receive
from .tubemq import TubeConsumer, start_tubemq

if TYPE_CHECKING:
    from .tubemq import TubeClients


async def test_stats_metrics_and_stream_show_tubemq_clients(
    nursery: trio.Nursery, tube_clients: TubeClients
) -> None:
    addresses = await start_tubemq(nursery, group_rebalance_delay=0)
    addresses.broker.topic("orders", partitions=2)
    async with open_stream(addresses, "events=client") as ws:
        assert (await receive(ws))["type"] == "hello"
        master, broker = await tube_clients.pair(addresses)
        assert (await master.register_producer("producer-1", ["orders"])).success
        for partition in (0, 1, 1):
            assert (await broker.send_message("producer-1", "orders", partition, b"m")).success
        consumer = TubeConsumer(master, broker, "consumer-1", "billing")
        assert (await consumer.register(["orders"])).success
        await consumer.settle(2)
        assert len((await consumer.pull(consumer.held[1])).messages) == 2
        connected = list(await events_until(ws, "client_connected"))
        while len(connected) < 3:  # the producer, then a seat per partition
            connected += await events_until(ws, "client_connected")
        stats = (await http(addresses, "GET", "/stats?format=json")).json()
        (topic,) = stats["topics"]
        (channel,) = topic["channels"]
        assert channel["channel_name"] == "billing"
        seats = channel["clients"]
        assert [(s["version"], s["group_member"], s["state"]) for s in seats] == [
            ("tubemq", "consumer-1", 3),
            ("tubemq", "consumer-1", 3),
        ]
        assert sorted(s["in_flight_count"] for s in seats) == [0, 2]
        assert all(s["user_agent"] == "tubemq consumer consumer-1" for s in seats)
        (producer,) = stats["producers"]
        assert producer["version"] == "tubemq"
        assert producer["user_agent"] == "tubemq producer producer-1"
        assert producer["pub_counts"] == [{"topic": "orders", "count": 3}]
        assert {m["client_id"] for m in connected} == {producer["client_id"]} | {
            s["client_id"] for s in seats
        }
        metrics = (await http(addresses, "GET", "/metrics")).text
        client_lines = [line for line in metrics.splitlines() if line.startswith("nsq_client_")]
        assert client_lines
        assert all('version="tubemq"' in line for line in client_lines)
        closed = await master.close_consumer("consumer-1", "billing")
        assert closed.success
        gone = await events_until(ws, "client_disconnected")
        gone += await events_until(ws, "client_disconnected")
        assert {m["client_id"] for m in gone if m["type"] == "client_disconnected"} == {
            s["client_id"] for s in seats
        }


async def test_tubemq_connections_count_in_the_descriptor_budget(
    nursery: trio.Nursery, tube_clients: TubeClients
) -> None:
    """A TubeMQ connection takes a place in the broker's descriptor budget while it is
    open, as a V2 connection does (docs/storage.md "Descriptors"), and gives it back."""
    addresses = await start_tubemq(nursery)

    async def connections() -> int:
        stats = (await http(addresses, "GET", "/stats?format=json&include_mem=true")).json()
        count: int = stats["descriptors"]["connections"]
        return count

    before = await connections()
    master, broker = await tube_clients.pair(addresses)
    del master, broker
    assert await connections() == before + 2
    await tube_clients.close_all()
    for _ in range(100):
        if await connections() == before:
            break
        await trio.sleep(0.01)
    assert await connections() == before
