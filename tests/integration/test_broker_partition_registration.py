"""A broker registers every partition of a topic with a lookupd that knows partitions
(issue 38): Youzan's ``REGISTER <topic> <partition> [<channel>]`` to trionsq's and
Youzan's lookupds, nsqd 1.3's ``REGISTER <topic> [<channel>]`` to the others.

The recording lookupd of test_broker_lookupd_peers.py pins the commands sent (it
parses the real bytes: ``Register("t", None, 1)`` is ``REGISTER t 1\\n`` on the
wire); trionsq's own lookupd shows what a client looks up. Time is Trio's MockClock
with autojump, as in that module.
"""

from __future__ import annotations

import contextlib
from typing import TYPE_CHECKING, Final

import attrs
import httpx
import trio

from trionsq.lookupd.config import LookupdConfig
from trionsq.lookupd.server import serve_lookupd
from trionsq.protocol import InternalCreateTopic
from trionsq.protocol.lookupd import Register, Unregister
from trionsq.testing import wait_until

from .raw import http, publish, start
from .test_broker_lookupd_peers import (
    LOOKUPD_INFO,
    autojump,
    broker_config,
    pings,
)
from .test_broker_lookupd_peers import start_lookupd as start_recording_lookupd

if TYPE_CHECKING:
    from trionsq.lookupd.server import LookupdAddresses
    from trionsq.nursery_tree import BoundAddresses

    from .raw import Clients

YOUZAN_INFO: Final = attrs.evolve(LOOKUPD_INFO, version="0.3.7-HA.1.13.0")
"""What Youzan's nsqlookupd answers IDENTIFY with (its version names HA)."""
GUARD: Final = 60.0


async def youzan_lookup(lookupd: LookupdAddresses, topic: str) -> dict[str, object]:
    """``/lookup?topic=&access=w&metainfo=true``, the question Youzan's producers ask."""
    host, port = lookupd.http
    async with httpx.AsyncClient(base_url=f"http://{host}:{port}") as client:
        answer = await client.get(
            "/lookup", params={"topic": topic, "access": "w", "metainfo": "true"}
        )
    assert answer.status_code == 200, answer.text
    document: dict[str, object] = answer.json()
    return document


def listed(document: dict[str, object]) -> dict[str, tuple[str, int]]:
    """Each listed partition's broker as (broadcast address, TCP port)."""
    partitions = document["partitions"]
    assert isinstance(partitions, dict)
    return {pid: (peer["broadcast_address"], peer["tcp_port"]) for pid, peer in partitions.items()}


async def until(condition: object, what: str) -> None:
    """Wait for ``condition`` (a callable) but let the caller's asserts show a failure."""
    with contextlib.suppress(trio.TooSlowError):
        await wait_until(condition, what, within=GUARD)  # type: ignore[arg-type]


async def start_trionsq_lookupd(nursery: trio.Nursery) -> tuple[LookupdAddresses, str]:
    lookupd: LookupdAddresses = await nursery.start(serve_lookupd, LookupdConfig.loopback())
    return lookupd, f"{lookupd.tcp[0]}:{lookupd.tcp[1]}"


async def identified(lookupd: LookupdAddresses, count: int = 1) -> None:
    await wait_until(
        lambda: len(lookupd.registry.active_peers(trio.current_time())) == count,
        "brokers identified",
        within=GUARD,
    )


def own(nsqd: BoundAddresses) -> tuple[str, int]:
    return ("127.0.0.1", nsqd.tcp[1])


# ---------------------------------------------------------------------- trionsq's lookupd


async def test_three_partitions_made_by_internal_create_topic_are_looked_up_and_unregistered(
    nursery: trio.Nursery, clients: Clients, autojump_clock: trio.testing.MockClock
) -> None:
    """The acceptance of issue 38: Youzan's go-nsq creates partitions 0, 1, 2 on a
    broker and asks the lookupd for the topic's writable partitions."""
    autojump(autojump_clock)
    lookupd, address = await start_trionsq_lookupd(nursery)
    nsqd = await start(nursery, broker_config(address, broadcast_address="127.0.0.1"))
    await identified(lookupd)
    client = await clients.connect(nsqd.tcp)
    await publish(client, *(InternalCreateTopic("parts", pid) for pid in range(3)))
    await until(lambda: len(lookupd.registry.partitions("parts")) == 3, "three partitions")
    document = await youzan_lookup(lookupd, "parts")
    assert listed(document) == dict.fromkeys(("0", "1", "2"), own(nsqd))
    assert document["meta"] == {
        "partition_num": 3,
        "replica": 1,
        "extend_support": False,
        "ordered": False,
        "multi_part": False,
        "disable_channel_auto_create": False,
    }
    producers = document["producers"]
    assert isinstance(producers, list)
    assert [(p["broadcast_address"], p["tcp_port"]) for p in producers] == [own(nsqd)]

    assert (await http(nsqd, "POST", "/topic/delete?topic=parts")).status_code == 200
    await until(lambda: not lookupd.registry.partitions("parts"), "every partition gone")
    assert await youzan_lookup(lookupd, "parts") == {
        "channels": [],
        "producers": [],
        "partitions": {},
        "meta": document["meta"] | {"partition_num": 1},
    }


async def test_channels_are_registered_per_partition_with_trionsq_lookupd(
    nursery: trio.Nursery, autojump_clock: trio.testing.MockClock
) -> None:
    """A channel deleted from one partition stays listed while another partition has it."""
    autojump(autojump_clock)
    lookupd, address = await start_trionsq_lookupd(nursery)
    nsqd = await start(nursery, broker_config(address, broadcast_address="127.0.0.1"))
    await identified(lookupd)
    broker = nsqd.broker
    broker.topic("t", partitions=2)
    await broker.create_channel("t", "c")
    await until(lambda: len(lookupd.registry.partitions("t")) == 2, "both partitions")
    broker.delete_channel("t", 0, "c")
    broker.topic("after")  # registered after the UNREGISTER, on the same connection
    await wait_until(lambda: "after" in lookupd.registry.topics(), "the next command")
    assert lookupd.registry.channels("t") == ["c"]
    assert len(lookupd.registry.find_producers("channel", "t", "c")) == 1
    broker.delete_channel("t", 1, "c")
    await until(lambda: not lookupd.registry.find_producers("channel", "t", "c"), "channel left")
    assert not lookupd.registry.find_producers("channel", "t", "c")
    assert len(lookupd.registry.find_producers("topic", "t", "")) == 1


# ---------------------------------------------------------------------- the bytes


async def test_youzans_lookupd_gets_youzans_registrations_however_partitions_came(
    nursery: trio.Nursery, clients: Clients, autojump_clock: trio.testing.MockClock
) -> None:
    """Every partition and every channel of each, as Youzan's nsqd sends them: on
    connect, then for INTERNAL_CREATE_TOPIC, /topic/create?partition_num=, an
    expansion, channels, and deletions (channels first, then each partition)."""
    autojump(autojump_clock)
    lookupd = await start_recording_lookupd(nursery, info=YOUZAN_INFO)
    nsqd = await start(nursery)
    broker = nsqd.broker
    broker.topic("solo")
    broker.topic("pair", partitions=2)
    await broker.create_channel("pair", "c")
    await http_config(nsqd, lookupd.address)
    session = await lookupd.ready(0)
    assert session.sent()[1:] == [
        Register("solo", None, 0),
        Register("pair", None, 0),
        Register("pair", "c", 0),
        Register("pair", None, 1),
        Register("pair", "c", 1),
    ]
    client = await clients.connect(nsqd.tcp)
    await publish(client, InternalCreateTopic("made", 1))  # partitions 0 and 1
    assert (await http(nsqd, "POST", "/topic/create?topic=http&partition_num=2")).is_success
    assert (await http(nsqd, "POST", "/topic/create?topic=http&partition_num=3")).is_success
    await broker.create_channel("made", "d")
    broker.delete_channel("made", 1, "d")
    assert broker.delete_topic("made")
    await lookupd.until(pings(session, 2))
    assert session.sent()[6:] == [
        Register("made", None, 0),
        Register("made", None, 1),
        Register("http", None, 0),
        Register("http", None, 1),
        Register("http", None, 2),  # the expansion: the new partition only
        Register("made", "d", 0),
        Register("made", "d", 1),
        Unregister("made", "d", 1),
        Unregister("made", "d", 0),
        Unregister("made", None, 0),
        Unregister("made", None, 1),
    ]


async def test_an_upstream_lookupd_still_gets_nsqds_registrations(
    nursery: trio.Nursery, autojump_clock: trio.testing.MockClock
) -> None:
    """nsqlookupd 1.3 would read ``REGISTER t 1`` as channel "1": a partitioned topic
    is one topic there, and new partitions tell it nothing."""
    autojump(autojump_clock)
    lookupd = await start_recording_lookupd(nursery)
    nsqd = await start(nursery, broker_config(lookupd))
    session = await lookupd.ready(0)
    nsqd.broker.topic("t", partitions=2)
    nsqd.broker.topic("t", partitions=4)
    await nsqd.broker.create_channel("t", "c")
    assert nsqd.broker.delete_topic("t")
    await lookupd.until(pings(session, 2))
    assert session.sent()[1:] == [
        Register("t"),
        Register("t", "c"),
        Unregister("t", "c"),
        Unregister("t"),
    ]


async def test_trionsqs_lookupd_is_told_apart_by_its_info_answer(
    nursery: trio.Nursery, autojump_clock: trio.testing.MockClock
) -> None:
    """trionsq's lookupd answers IDENTIFY as nsqlookupd 1.3 does, byte for byte; its
    ``/info`` (``trionsq_version``) says it knows partitions."""
    autojump(autojump_clock)
    trionsq_lookupd, _ = await start_trionsq_lookupd(nursery)
    host, port = trionsq_lookupd.http
    info = attrs.evolve(LOOKUPD_INFO, broadcast_address=host, http_port=port)
    lookupd = await start_recording_lookupd(nursery, info=info)
    nsqd = await start(nursery, broker_config(lookupd))
    session = await lookupd.ready(0)
    nsqd.broker.topic("t", partitions=2)
    await lookupd.until(pings(session, 2))
    assert session.sent()[1:] == [Register("t", None, 0), Register("t", None, 1)]


async def http_config(nsqd: BoundAddresses, *addresses: str) -> None:
    body = "[" + ",".join(f'"{a}"' for a in addresses) + "]"
    answer = await http(nsqd, "PUT", "/config/nsqlookupd_tcp_addresses", body.encode())
    assert answer.status_code == 200, answer.text
