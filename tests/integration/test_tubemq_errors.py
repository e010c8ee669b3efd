"""Hostile and broken TubeMQ clients over real sockets: bad framing closes their
connection, a call the server cannot serve gets TubeMQ's exception reply, and neither
disturbs the broker or its other clients (nothing is logged as an error)."""

from __future__ import annotations

import contextlib
import logging
import struct
from typing import TYPE_CHECKING

import pytest
import trio

from trionsq.protocol import tubemq as t
from trionsq.protocol.tubemq_proto import broker_pb2, master_pb2, rpc_pb2

from .tubemq import start_tubemq

if TYPE_CHECKING:
    from trionsq.nursery_tree import BoundAddresses
    from trionsq.tubemq.client import TubeClient

    from .tubemq import TubeClients

HEAD = struct.Struct(">III")


async def closed_by_server(client: TubeClient) -> bool:
    """The server ends the connection without a reply (within a second)."""
    with trio.move_on_after(1):
        try:
            return await client.next_frame() is None
        except trio.BrokenResourceError:  # reset: it closed with our bytes unread
            return True
    return False


async def still_serving(addresses: BoundAddresses, tube_clients: TubeClients) -> None:
    other = await tube_clients.open(addresses.tubemq_master)
    reply = await other.register_producer("still-here", ["t"])
    assert reply.success


def envelope(service: int, method: int, body: bytes, *, version: int = 3) -> bytes:
    payload = (
        t._delimited(rpc_pb2.RpcConnHeader(flag=0))
        + t._delimited(rpc_pb2.RequestHeader(serviceType=service, protocolVer=version))
        + t._delimited(rpc_pb2.RequestBody(method=method, timeout=1000, request=body))
    )
    return t.encode_frame(42, payload)


@pytest.fixture
def no_errors_logged(caplog: pytest.LogCaptureFixture) -> pytest.LogCaptureFixture:
    caplog.set_level(logging.INFO, logger="trionsq")
    return caplog


def assert_no_errors(caplog: pytest.LogCaptureFixture) -> None:
    assert [r.getMessage() for r in caplog.records if r.levelno >= logging.ERROR] == []


@pytest.mark.parametrize(
    ("name", "data", "logged"),
    [
        ("wrong begin token", b"  V2" + bytes(40), "unknown protocol: begin token 0x20205632"),
        ("list size 0", HEAD.pack(t.BEGIN_TOKEN, 1, 0), "list size 0 is outside 1..3584"),
        (
            "oversized block",
            HEAD.pack(t.BEGIN_TOKEN, 1, 1) + struct.pack(">i", 8197) + bytes(8197),
            "block length 8197 is outside 0..8196",
        ),
        (
            "frame over the message bound",
            HEAD.pack(t.BEGIN_TOKEN, 1, 200) + (struct.pack(">i", 8192) + bytes(8192)) * 200,
            "frame longer than",
        ),
    ],
)
async def test_bad_framing_closes_the_connection(
    nursery: trio.Nursery,
    tube_clients: TubeClients,
    no_errors_logged: pytest.LogCaptureFixture,
    name: str,
    data: bytes,
    logged: str,
) -> None:
    addresses = await start_tubemq(nursery)
    for address in (addresses.tubemq_master, addresses.tubemq_broker):
        client = await tube_clients.open(address)
        with contextlib.suppress(trio.BrokenResourceError):
            await client.send_raw(data)  # the server may close before all is sent
        assert await closed_by_server(client), name
    assert any(logged in r.getMessage() for r in no_errors_logged.records), name
    await still_serving(addresses, tube_clients)
    assert_no_errors(no_errors_logged)


async def test_a_truncated_frame_then_eof_closes_quietly(
    nursery: trio.Nursery, tube_clients: TubeClients, no_errors_logged: pytest.LogCaptureFixture
) -> None:
    addresses = await start_tubemq(nursery)
    client = await tube_clients.open(addresses.tubemq_broker)
    whole = t.encode_request(
        1,
        2,
        17,
        broker_pb2.GetMessageRequestC2B(clientId="c", partitionId=0, groupName="g", topicName="t"),
    )
    await client.send_raw(whole[: len(whole) - 3])
    await client.stream.send_eof()
    assert await closed_by_server(client)
    assert any("ended inside a frame" in r.getMessage() for r in no_errors_logged.records)
    await still_serving(addresses, tube_clients)
    assert_no_errors(no_errors_logged)


async def exception_reply(client: TubeClient, data: bytes) -> t.Reply:
    await client.send_raw(data)
    frame = await client.next_frame()
    assert frame is not None
    reply = t.decode_reply(frame)
    assert reply.serial_no == 42
    return reply


async def test_calls_the_server_cannot_serve_get_tubemqs_exception_replies(
    nursery: trio.Nursery, tube_clients: TubeClients, no_errors_logged: pytest.LogCaptureFixture
) -> None:
    addresses = await start_tubemq(nursery)
    master = await tube_clients.open(addresses.tubemq_master)
    broker = await tube_clients.open(addresses.tubemq_broker)
    unknown = await exception_reply(master, envelope(1, 99, b""))
    assert unknown == t.Reply(
        42,
        exception="java.lang.Exception",
        text="IPC server handle request error :Unsupported method ID :99",
        status=rpc_pb2.ResponseHeader.FATAL,
    )
    partial = master_pb2.RegisterRequestP2M(clientId="p").SerializePartialToString()
    missing = await exception_reply(master, envelope(1, 1, partial))
    assert missing == t.Reply(
        42,
        exception="com.google.protobuf.InvalidProtocolBufferException",
        text="IPC server handle request error :Message missing required fields: brokerCheckSum, hostName",
        status=rpc_pb2.ResponseHeader.FATAL,
    )
    wrong_service = await exception_reply(master, envelope(1, 13, b""))
    assert wrong_service.status == rpc_pb2.ResponseHeader.FATAL  # its body misses fields first
    elsewhere = await exception_reply(
        broker,
        envelope(
            1,
            1,
            master_pb2.RegisterRequestP2M(
                clientId="p", brokerCheckSum=-1, hostName="h"
            ).SerializeToString(),
        ),
    )
    assert (elsewhere.exception, elsewhere.text, elsewhere.status) == (
        "java.lang.Exception",
        "No service 1 found on the server",
        rpc_pb2.ResponseHeader.ERROR,
    )
    garbage = await exception_reply(master, t.encode_frame(42, b"\x05\x08"))
    assert garbage.status == rpc_pb2.ResponseHeader.FATAL
    assert garbage.text.startswith("IPC server unable to read call parameters:")
    # the same connections go on serving
    assert (await master.register_producer("p", ["t"])).success
    assert (await broker.send_message("p", "nope", 0, b"x")).errMsg == (
        "topicName nope not existed, please check your configure"
    )
    assert_no_errors(no_errors_logged)


async def test_send_message_refusals(nursery: trio.Nursery, tube_clients: TubeClients) -> None:
    addresses = await start_tubemq(nursery, max_msg_size=100)
    addresses.broker.topic("t", partitions=2)
    broker = await tube_clients.open(addresses.tubemq_broker)
    wrong_partition = await broker.send_message("p", "t", 2, b"x")
    assert (wrong_partition.errCode, wrong_partition.errMsg) == (
        403,
        "partitionId t-2 not existed, please check your configure",
    )
    empty = await broker.send_message("p", "t", 0, b"")
    assert (empty.errCode, empty.errMsg) == (400, "data length is zero!")
    big = await broker.send_message("p", "t", 0, bytes(101))
    assert (
        big.errMsg == "data length over max length, allowed max length is 100, data length is 101"
    )
    request = broker.message_request("p", "t", 0, b"abc")
    request.checkSum = 1
    wrong_sum = await broker.call(2, 13, request, broker_pb2.SendMessageResponseB2P)
    assert (wrong_sum.errCode, wrong_sum.errMsg) == (
        403,
        "Checksum msg data failure: 1 of t not equal to the data's checksum of 891568578",
    )
    cut = await broker.send_message("p", "t", 0, struct.pack(">i", 50) + b"a=b", flag=1)
    assert (cut.errCode, cut.errMsg) == (
        400,
        "Illegal message attributes: attribute length 50 beyond the message data",
    )
    assert not any(
        (wrong_partition.success, empty.success, big.success, wrong_sum.success, cut.success)
    )
