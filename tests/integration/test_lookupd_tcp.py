"""The lookupd's TCP protocol V1 over real sockets (spec lookupd-tcp.md): replies and
errors byte-exact, and what each command does to the registrations."""

from __future__ import annotations

import json
import socket
import struct

import pytest
import trio
import trio.testing

from trionsq.lookupd.registry import CLIENT_REGISTRATION, Registration
from trionsq.version import NSQD_RELEASE

from .lookupd_peers import RawPeers, nsqd_info, peers, settle, start_lookupd

__all__ = ["peers"]  # the fixture


def sized(text: bytes) -> bytes:
    return struct.pack(">i", len(text)) + text


async def test_bad_magic_gets_a_size_prefixed_e_bad_protocol_then_close(
    nursery: trio.Nursery,
    peers: RawPeers,
) -> None:
    addresses = await start_lookupd(nursery)
    peer = await peers.connect(addresses, magic=b"  V2")
    assert await peer.raw_reply() == sized(b"E_BAD_PROTOCOL")
    await peer.wait_closed()


async def test_identify_replies_with_the_lookupds_own_addresses_in_spec_key_order(
    nursery: trio.Nursery,
    peers: RawPeers,
) -> None:
    addresses = await start_lookupd(nursery, broadcast_address="lookupd.example")
    peer = await peers.connect(addresses)
    reply = await peer.identify()
    assert list(json.loads(reply)) == [
        "tcp_port",
        "http_port",
        "version",
        "broadcast_address",
        "hostname",
    ]
    assert json.loads(reply) == {
        "tcp_port": addresses.tcp[1],
        "http_port": addresses.http[1],
        "version": NSQD_RELEASE,
        "broadcast_address": "lookupd.example",
        "hostname": socket.gethostname(),
    }
    clients = addresses.registry.find_producers("client", "", "")
    assert [producer.peer.id for producer in clients] == [peer.local_address]
    assert clients[0].peer.info == nsqd_info()


@pytest.mark.parametrize(
    ("wire", "error"),
    [
        (b"IDENTIFY\n" + sized(b"{}"), b"E_BAD_BODY IDENTIFY missing fields"),
        (
            b"IDENTIFY\n" + sized(b'{"broadcast_address":"h","tcp_port":1,"http_port":2}'),
            b"E_BAD_BODY IDENTIFY missing fields",
        ),
        (b"IDENTIFY\n" + sized(b"{nope"), b"E_BAD_BODY IDENTIFY failed to decode JSON body"),
        (b"REGISTER t\n", b"E_INVALID client must IDENTIFY"),
        (b"UNREGISTER t c\n", b"E_INVALID client must IDENTIFY"),
        (b"FOO bar\n", b"E_INVALID invalid command FOO"),
    ],
)
async def test_fatal_errors_are_sent_size_prefixed_then_the_connection_closes(
    nursery: trio.Nursery, peers: RawPeers, wire: bytes, error: bytes
) -> None:
    addresses = await start_lookupd(nursery)
    peer = await peers.connect(addresses)
    await peer.send(wire)
    assert await peer.raw_reply() == sized(error)
    await peer.wait_closed()


@pytest.mark.parametrize(
    ("line", "error"),
    [
        (b"REGISTER\n", b"E_INVALID REGISTER insufficient number of params"),
        (b"UNREGISTER\n", b"E_INVALID UNREGISTER insufficient number of params"),
        (b"REGISTER bad!topic\n", b"E_BAD_TOPIC REGISTER topic name 'bad!topic' is not valid"),
        (b"REGISTER t bad!ch\n", b"E_BAD_CHANNEL REGISTER channel name 'bad!ch' is not valid"),
        (
            b"UNREGISTER t bad!ch\n",
            b"E_BAD_CHANNEL UNREGISTER channel name 'bad!ch' is not valid",
        ),
    ],
)
async def test_bad_registrations_after_identify_are_fatal_with_nsqlookupds_text(
    nursery: trio.Nursery, peers: RawPeers, line: bytes, error: bytes
) -> None:
    addresses = await start_lookupd(nursery)
    peer = await peers.connect(addresses)
    await peer.identify()
    await peer.send(line)
    assert await peer.raw_reply() == sized(error)
    await peer.wait_closed()
    await settle()
    assert addresses.registry.lookup_registrations(peer.local_address) == []


async def test_second_identify_is_fatal(nursery: trio.Nursery, peers: RawPeers) -> None:
    addresses = await start_lookupd(nursery)
    peer = await peers.connect(addresses)
    await peer.identify()
    await peer.send(b"IDENTIFY\n")
    assert await peer.raw_reply() == sized(b"E_INVALID cannot IDENTIFY again")
    await peer.wait_closed()


async def test_ping_is_ok_before_and_after_identify(nursery: trio.Nursery, peers: RawPeers) -> None:
    addresses = await start_lookupd(nursery)
    peer = await peers.connect(addresses)
    await peer.send(b"PING\n")
    assert await peer.raw_reply() == sized(b"OK")
    await peer.identify()
    await peer.send(b"  PING \r\n")  # surrounding white space is trimmed
    assert await peer.raw_reply() == sized(b"OK")


async def test_register_channel_registers_channel_and_topic_and_replies_ok(
    nursery: trio.Nursery,
    peers: RawPeers,
) -> None:
    addresses = await start_lookupd(nursery)
    peer = await peers.connect(addresses)
    await peer.identify()
    assert await peer.register("t", "c") == b"OK"
    assert await peer.register("t", "c") == b"OK"  # idempotent
    assert await peer.register("bare") == b"OK"
    registry = addresses.registry
    assert registry.lookup_registrations(peer.local_address) == [
        CLIENT_REGISTRATION,
        Registration("channel", "t", "c"),
        Registration("topic", "t"),
        Registration("topic", "bare"),
    ]


async def test_unregister_topic_drops_its_channels_too_and_channel_only_itself(
    nursery: trio.Nursery,
    peers: RawPeers,
) -> None:
    addresses = await start_lookupd(nursery)
    peer = await peers.connect(addresses)
    await peer.identify()
    for channel in ("c1", "c2", "e#ephemeral"):
        await peer.register("t", channel)
    assert await peer.unregister("t", "e#ephemeral") == b"OK"
    assert addresses.registry.channels("t") == ["c1", "c2"]  # ephemeral key deleted
    assert await peer.unregister("t", "c1") == b"OK"
    assert set(addresses.registry.lookup_registrations(peer.local_address)) == {
        CLIENT_REGISTRATION,
        Registration("channel", "t", "c2"),
        Registration("topic", "t"),
    }
    assert await peer.unregister("t") == b"OK"
    assert addresses.registry.lookup_registrations(peer.local_address) == [CLIENT_REGISTRATION]
    assert addresses.registry.topics() == ["t"]  # non-ephemeral keys stay, empty
    assert addresses.registry.channels("t") == ["c1", "c2"]


async def test_youzan_partition_form_registers_the_topic_and_channel_for_now(
    nursery: trio.Nursery,
    peers: RawPeers,
) -> None:
    addresses = await start_lookupd(nursery)
    peer = await peers.connect(addresses)
    await peer.identify()
    await peer.send(b"REGISTER t 0 c\n")
    assert await peer.reply() == b"OK"
    assert addresses.registry.channels("t") == ["c"]
    await peer.send(b"REGISTER t 300 c\n")
    assert await peer.reply() == b"E_BAD_PARTITIONID REGISTER partition id '300' is not valid"


async def test_commands_split_across_writes_and_pipelined_get_replies_in_order(
    nursery: trio.Nursery,
    peers: RawPeers,
) -> None:
    addresses = await start_lookupd(nursery)
    peer = await peers.connect(addresses)
    body = json.dumps(
        {"version": "1.3.0", "tcp_port": 1, "http_port": 2, "broadcast_address": "h"}
    ).encode()
    wire = b"IDENTIFY\n" + sized(body) + b"REGISTER t c\nPING\nUNREGISTER t c\n"
    for byte in wire:
        await peer.send(bytes([byte]))
    replies = [await peer.reply() for _ in range(4)]
    assert json.loads(replies[0])["tcp_port"] == addresses.tcp[1]
    assert replies[1:] == [b"OK", b"OK", b"OK"]


async def test_disconnect_removes_the_peer_from_every_registration_keys_stay(
    nursery: trio.Nursery,
    peers: RawPeers,
) -> None:
    addresses = await start_lookupd(nursery)
    gone = await peers.connect(addresses)
    stays = await peers.connect(addresses)
    await gone.identify(nsqd_info(host="gone"))
    await stays.identify(nsqd_info(host="stays"))
    await gone.register("t", "c#ephemeral")
    await stays.register("u")
    await gone.aclose()
    await settle()
    registry = addresses.registry
    assert registry.lookup_registrations(gone.local_address) == []
    assert [p.peer.info.hostname for p in registry.find_producers("client", "", "")] == ["stays"]
    assert registry.topics() == ["t", "u"]
    assert registry.channels("t") == ["c#ephemeral"]  # keys stay on disconnect


async def test_peers_are_told_apart_by_remote_address_not_by_identify_body(
    nursery: trio.Nursery,
    peers: RawPeers,
) -> None:
    addresses = await start_lookupd(nursery)
    first = await peers.connect(addresses)
    second = await peers.connect(addresses)
    for peer in (first, second):
        await peer.identify(nsqd_info())  # the very same body
        await peer.register("t")
    producers = addresses.registry.find_producers("topic", "t", "")
    assert sorted(p.peer.id for p in producers) == sorted(
        [first.local_address, second.local_address]
    )


async def test_ping_keeps_a_producer_active_past_the_inactivity_timeout(
    nursery: trio.Nursery, peers: RawPeers, autojump_clock: trio.testing.MockClock
) -> None:
    autojump_clock.autojump_threshold = 0.1  # real sockets: never jump while bytes are in flight
    addresses = await start_lookupd(nursery, inactive_producer_timeout=300.0)
    quiet = await peers.connect(addresses)
    pinging = await peers.connect(addresses)
    await quiet.identify(nsqd_info(host="quiet"))
    await pinging.identify(nsqd_info(host="pinging"))
    await quiet.register("t")
    await pinging.register("t")
    start = trio.current_time()
    for beat in range(1, 22):  # nsqd pings every 15 s
        await trio.sleep_until(start + 15.0 * beat)
        await pinging.send(b"PING\n")
        assert await pinging.reply() == b"OK"
    found = addresses.registry.lookup("t", trio.current_time())
    assert found is not None
    assert trio.current_time() - start >= 315.0
    assert [p.peer.info.hostname for p in found[1]] == ["pinging"]
