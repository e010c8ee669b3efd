"""The task tree of a running broker is the one nursery_tree.TREE declares (and a
running client's the one CLIENT_TREE declares): every
long-lived task runs under the parent TREE names (design card: each long-lived task
has a parent nursery you can name in nursery_tree.py)."""

from __future__ import annotations

from typing import TYPE_CHECKING

import trio

from trionsq import NsqdConfig, serve_nsqd
from trionsq.client import open_consumer, open_producer
from trionsq.client.blocking import connect_consumer, connect_producer
from trionsq.lookupd.config import LookupdConfig
from trionsq.lookupd.server import serve_lookupd
from trionsq.nursery_tree import CLIENT_TASKS, CLIENT_TREE, TASKS, TREE
from trionsq.protocol import IdentifyRequest, Rdy, Sub
from trionsq.protocol.client import encode_identify
from trionsq.testing import ProtocolClient, wait_until
from trionsq.tubemq.client import open_client

if TYPE_CHECKING:
    from pathlib import Path

    from trionsq.client import ClientMessage
    from trionsq.lookupd.server import LookupdAddresses
    from trionsq.nursery_tree import BoundAddresses

ACCEPT_LOOPS = frozenset({"_accept_forever"})
"""The accept loops of listen.serve_connections, one per listener."""
NOT_RUNNING_HERE = frozenset(
    {
        # a replicated broker's (--etcd-endpoints): tests/cluster/test_replicated_brokers.py
        "replication listener",
        "replication connection",
        "replication ack reader",
        "replica manager",
        "cluster registration",
        "cluster view",
        "isr upkeep",
        "follower stream",
        "consumer state shipper",
        "https listener",
        "https connection",
        "channel pre-creation",
        "channel read ahead",
        "ttl timers",
    }
)
"""Nodes this broker has no task for: HTTPS needs a certificate; pre-creation ends
once the lookupds answered; a read ahead runs only while a backlog is read from disk;
TTL timers only start a topic's idle channels when it gets its first ##ttl header."""


def task_parent(node: str) -> str | None:
    """The nearest ancestor of ``node`` in TREE that is a task (nurseries skipped)."""
    parents = dict(TREE)
    parent = parents[node]
    while parent is not None and parent not in TASKS:
        parent = parents[parent]
    return parent


def qualname(task: trio.lowlevel.Task) -> str:
    return str(getattr(task.coro, "__qualname__", task.name))


def tasks_under(task: trio.lowlevel.Task) -> list[tuple[str, str]]:
    """(task, parent task) coroutine names of everything below ``task``."""
    found: list[tuple[str, str]] = []
    for nursery in task.child_nurseries:
        for child in nursery.child_tasks:
            found.append((qualname(child), qualname(task)))
            found.extend(tasks_under(child))
    return found


def find(task: trio.lowlevel.Task, name: str) -> trio.lowlevel.Task:
    if qualname(task) == name:
        return task
    for nursery in task.child_nurseries:
        for child in nursery.child_tasks:
            try:
                return find(child, name)
            except LookupError:
                pass
    raise LookupError(name)


async def test_every_task_of_a_running_broker_is_where_tree_says(
    nursery: trio.Nursery, tmp_path: Path
) -> None:
    lookupd: LookupdAddresses = await nursery.start(serve_lookupd, LookupdConfig.loopback())
    config = NsqdConfig.loopback(
        data_path=str(tmp_path),
        lookupd_tcp_addresses=[f"127.0.0.1:{lookupd.tcp[1]}"],
        statsd_address="127.0.0.1:8125",  # its task runs; the first push is a minute away
        group_rebalance_delay=60.0,  # a group member's join waits in its task meanwhile
        tubemq_master_address="127.0.0.1:0",
        tubemq_broker_address="127.0.0.1:0",
    )
    broker: BoundAddresses = await nursery.start(serve_nsqd, config)
    consumer = await ProtocolClient.connect(broker.tcp)
    await consumer.send(Sub("t", "c"), Rdy(1))
    await consumer.read(1)
    member = await ProtocolClient.connect(broker.tcp)
    await member.stream.send_all(encode_identify(IdentifyRequest(group_member="m")))
    await member.send(Sub("t", "c"))
    await member.read(2)  # IDENTIFY's OK, SUB's OK
    http = await trio.open_tcp_stream(*broker.http)  # type: ignore[misc]
    await http.send_all(b"GET /ping HTTP/1.1\r\nHost: x\r\n\r\n")
    await http.receive_some(1000)  # answered; the connection's task waits for more
    admin = await trio.open_tcp_stream(*broker.http)  # type: ignore[misc]
    await admin.send_all(
        b"GET /admin/stream HTTP/1.1\r\nHost: x\r\nUpgrade: websocket\r\n"
        b"Connection: Upgrade\r\nSec-WebSocket-Version: 13\r\n"
        b"Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\n\r\n"
    )
    assert b"101 Switching Protocols" in await admin.receive_some(1000)
    tube_master = await open_client(broker.tubemq_master)  # type: ignore[arg-type]
    tube_broker = await open_client(broker.tubemq_broker)  # type: ignore[arg-type]
    await tube_master.register_producer("p", ["t"])
    await tube_broker.send_message("p", "t", 0, b"m")
    top = trio.lowlevel.current_root_task()
    assert top is not None
    root = find(top, "serve_nsqd")
    await wait_until(
        lambda: ("LookupdPeer._read_replies", "LookupdPeer.run") in tasks_under(root),
        "the lookupd peer connected",
    )
    await wait_until(
        lambda: ("_Subscriber._read_ops", "_run_connection") in tasks_under(root),
        "the admin stream started",
    )

    allowed = {(TASKS[node], TASKS[parent]) for node in TASKS if (parent := task_parent(node))}
    seen = [pair for pair in tasks_under(root) if pair[0] not in ACCEPT_LOOPS]
    assert [pair for pair in seen if pair not in allowed] == []
    seen_names = {qualname(root)} | {child for child, _ in seen}
    missing = {node for node, name in TASKS.items() if name not in seen_names}
    assert missing <= NOT_RUNNING_HERE
    for stream in (
        consumer.stream,
        member.stream,
        http,
        admin,
        tube_master.stream,
        tube_broker.stream,
    ):
        await stream.aclose()


def client_task_parent(node: str) -> str | None:
    parents = dict(CLIENT_TREE)
    parent = parents[node]
    while parent is not None and parent not in CLIENT_TASKS and parent != "caller task":
        parent = parents[parent]
    return parent


async def test_every_task_of_a_running_client_is_where_client_tree_says(
    nursery: trio.Nursery,
) -> None:
    lookupd: LookupdAddresses = await nursery.start(serve_lookupd, LookupdConfig.loopback())
    config = NsqdConfig.loopback(
        lookupd_tcp_addresses=[f"127.0.0.1:{lookupd.tcp[1]}"], broadcast_address="127.0.0.1"
    )
    await nursery.start(serve_nsqd, config)
    lookup = f"127.0.0.1:{lookupd.http[1]}"

    async def use_the_client() -> None:  # in a task of its own: the client's alone below it
        caller = trio.lowlevel.current_task()
        names = {**CLIENT_TASKS, "caller task": qualname(caller)}
        handled = trio.Event()

        async def handler(message: ClientMessage) -> None:
            handled.set()

        async with open_producer(lookupd=lookup) as producer:
            await producer.publish("t", b"x")
            async with (
                open_consumer("t", "c", lookupd=lookup) as consumer,
                trio.open_nursery() as handlers,
            ):
                handlers.start_soon(consumer.handle, handler)
                with trio.fail_after(10):
                    await handled.wait()
                allowed = {
                    (names[node], names[parent])
                    for node in CLIENT_TASKS
                    if (parent := client_task_parent(node))
                }
                seen = tasks_under(caller)
                assert [pair for pair in seen if pair not in allowed] == []
                seen_names = {child for child, _ in seen}
                missing = {node for node, name in CLIENT_TASKS.items() if name not in seen_names}
                # only while backing off, sending a batch or closing; and the
                # blocking client's, checked below
                assert missing == {
                    "consumer backoff wait",
                    "consumer goodbye",
                    "producer batch send",
                    "blocking message pump",
                    "blocking answer flusher",
                    "blocking publish gatherer",
                }
                handlers.cancel_scope.cancel()

    async with trio.open_nursery() as own:
        own.start_soon(use_the_client)


def test_the_blocking_consumers_tasks_are_where_client_tree_says(
    nsqd_thread: BoundAddresses,
) -> None:
    address = f"127.0.0.1:{nsqd_thread.tcp[1]}"
    seen: list[tuple[str, str]] = []
    with connect_consumer("t", "c", address) as consumer:

        def walk() -> None:
            root = trio.lowlevel.current_root_task()
            assert root is not None
            seen.extend(tasks_under(find(root, "_Hosted._main")))

        trio.from_thread.run_sync(walk, trio_token=consumer._token)
    names = {**CLIENT_TASKS, "caller task": "_Hosted._main"}
    allowed = {
        (names[node], names[parent])
        for node in CLIENT_TASKS
        if (parent := client_task_parent(node))
    }
    assert [pair for pair in seen if pair not in allowed] == []
    seen_names = {child for child, _ in seen}
    for node in ("blocking message pump", "blocking answer flusher", "consumer subscription"):
        assert CLIENT_TASKS[node] in seen_names


def test_the_blocking_producers_tasks_are_where_client_tree_says(
    nsqd_thread: BoundAddresses,
) -> None:
    address = f"127.0.0.1:{nsqd_thread.tcp[1]}"
    seen: list[tuple[str, str]] = []
    with connect_producer(address) as producer:
        producer.publish("t", b"x")  # gathered: the batcher and a connection exist

        def walk() -> None:
            root = trio.lowlevel.current_root_task()
            assert root is not None
            seen.extend(tasks_under(find(root, "_Hosted._main")))

        trio.from_thread.run_sync(walk, trio_token=producer._token)
    names = {**CLIENT_TASKS, "caller task": "_Hosted._main"}
    allowed = {
        (names[node], names[parent])
        for node in CLIENT_TASKS
        if (parent := client_task_parent(node))
    }
    assert [pair for pair in seen if pair not in allowed] == []
    seen_names = {child for child, _ in seen}
    for node in ("blocking publish gatherer", "producer batcher", "producer connection"):
        assert CLIENT_TASKS[node] in seen_names
