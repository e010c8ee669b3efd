"""Where a TubeMQ group starts on a partition (RegisterRequestC2B): a new group at the
oldest message (readStatus 0) or the latest (1), any group at the latest (2) or at a
given offset (currOffset, clamped into what the log holds); a group that consumed
before goes on where it left off."""

from __future__ import annotations

from typing import TYPE_CHECKING

import trio
import trio.testing

from trionsq.protocol.tubemq_formats import ErrCode, PartitionRef, ReadStatus

from .raw import http
from .tubemq import start_tubemq

if TYPE_CHECKING:
    from trionsq.tubemq.client import TubeClient

    from .tubemq import TubeClients

REF = PartitionRef(0, "", 0, "t", 0)


async def held_by(master: TubeClient, consumer: str, group: str) -> None:
    assert (await master.register_consumer(consumer, group, ["t"])).success
    beat = await master.consumer_heartbeat(consumer, group, [])
    assert beat.HasField("event"), beat


async def first_pull(
    master: TubeClient,
    broker: TubeClient,
    group: str,
    *,
    read_status: int = 0,
    offset: int | None = None,
) -> list[bytes]:
    await held_by(master, "c", group)
    joined = await broker.register_partition(
        "c", group, REF, read_status=read_status, offset=offset
    )
    assert joined.success, joined
    pack = await broker.get_message("c", group, REF)
    messages = [m.payLoadData for m in pack.messages]
    if messages:
        assert (await broker.commit("c", group, REF)).success
    else:
        assert pack.errCode == ErrCode.NOT_FOUND
    unregistered = await broker.register_partition("c", group, REF, unregister=True)
    assert unregistered.success
    assert (await master.close_consumer("c", group)).success
    return messages


async def test_read_status_and_offsets(nursery: trio.Nursery, tube_clients: TubeClients) -> None:
    addresses = await start_tubemq(nursery, group_rebalance_delay=0)
    addresses.broker.topic("t")
    master, broker = await tube_clients.pair(addresses)
    sent = [await broker.send_message("p", "t", 0, b"m%d" % i) for i in range(4)]
    everything = [b"m0", b"m1", b"m2", b"m3"]
    assert await first_pull(master, broker, "from-first") == everything
    assert await first_pull(master, broker, "from-max", read_status=ReadStatus.FROM_MAX) == []
    # the group that read everything goes on after it; asking for the latest again too
    assert await first_pull(master, broker, "from-first") == []
    assert await first_pull(master, broker, "at", offset=sent[2].appendOffset) == [b"m2", b"m3"]
    assert await first_pull(master, broker, "below", offset=-5) == everything  # -: not given
    assert await first_pull(master, broker, "past", offset=10**9) == []  # clamped to the end
    await broker.send_message("p", "t", 0, b"m4")
    assert await first_pull(master, broker, "from-max") == [b"m4"]  # it went on from there
    assert (
        await first_pull(master, broker, "from-first", read_status=ReadStatus.FROM_MAX_ALWAYS) == []
    )


async def test_a_channel_rate_limit_holds_tubemq_pulls_back(
    nursery: trio.Nursery, tube_clients: TubeClients, autojump_clock: trio.testing.MockClock
) -> None:
    autojump_clock.autojump_threshold = 0.1
    addresses = await start_tubemq(nursery, group_rebalance_delay=0)
    addresses.broker.topic("t")
    limited = await http(addresses, "POST", "/channel/rate_limit?topic=t&channel=g&msgs_per_sec=10")
    assert limited.status_code == 200
    master, broker = await tube_clients.pair(addresses)
    for i in range(30):
        assert (await broker.send_message("p", "t", 0, b"m%d" % i)).success
    await held_by(master, "c", "g")
    assert (await broker.register_partition("c", "g", REF)).success
    first = await broker.get_message("c", "g", REF)
    assert 0 < len(first.messages) <= 10
    held_back = await broker.get_message("c", "g", REF, last_consumed=True)
    assert (held_back.success, held_back.errCode, held_back.errMsg) == (
        False,
        ErrCode.SERVER_CONSUME_SPEED_LIMIT,
        "RpcServer consume speed limit!",
    )
    assert 0 < held_back.minLimitTime <= 1000
    await trio.sleep(held_back.minLimitTime / 1000)
    later = await broker.get_message("c", "g", REF, last_consumed=True)
    assert later.success
    assert later.messages[0].payLoadData == b"m%d" % len(first.messages)
