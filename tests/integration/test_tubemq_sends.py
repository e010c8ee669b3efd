"""Many SendMessage calls in one write, over a real socket, as a producer pipelines
them: each gets its own reply, in order, exactly as if sent alone (refusals, messages
with attributes, calls read one by one in the middle of a run), and what is stored
is what succeeded, in the order sent, each at the id and offset its reply names."""

from __future__ import annotations

import logging
import struct
from typing import TYPE_CHECKING

import orjson
import pytest

from trionsq.protocol import tubemq as t
from trionsq.protocol.tubemq_formats import checksum, join_payload
from trionsq.protocol.tubemq_proto import broker_pb2, rpc_pb2
from trionsq.protocol.tubemq_sends import take_sends
from trionsq.tubemq.node import ProducerSession

from .tubemq import start_tubemq

if TYPE_CHECKING:
    import trio

    from .tubemq import TubeClients


def send(serial: int, topic: str, partition: int, data: bytes, **fields: object) -> bytes:
    request = broker_pb2.SendMessageRequestP2B(
        clientId="producer",
        topicName=topic,
        partitionId=partition,
        data=data,
        flag=0,
        checkSum=checksum(data),
        sentAddr=0,
    )
    for name, value in fields.items():
        setattr(request, name, value)
    return t.encode_request(serial, t.Service.BROKER_WRITE, t.Method.SEND_MESSAGE, request)


def lacking_a_field(serial: int) -> bytes:
    """A SendMessage call without its required flag (TubeMQ refuses the call)."""
    request = broker_pb2.SendMessageRequestP2B(
        clientId="producer", topicName="t", partitionId=0, data=b"z", checkSum=-1, sentAddr=0
    )
    payload = (
        t._delimited(rpc_pb2.RpcConnHeader(flag=0))
        + t._delimited(rpc_pb2.RequestHeader(serviceType=t.Service.BROKER_WRITE, protocolVer=2))
        + t._delimited(
            rpc_pb2.RequestBody(method=13, timeout=10, request=request.SerializePartialToString())
        )
    )
    return t.encode_frame(serial, payload)


async def test_a_pipelined_run_is_answered_call_by_call(
    nursery: trio.Nursery, tube_clients: TubeClients
) -> None:
    addresses = await start_tubemq(nursery, max_msg_size=100)
    addresses.broker.topic("t", partitions=2)
    addresses.broker.topic("e", ext=True)
    master, broker = await tube_clients.pair(addresses)
    assert (await master.register_producer("producer", ["t", "e"])).success
    attributed, flag = join_payload("k=v", b"e1")
    calls = [
        send(1, "t", 0, b"a"),
        send(2, "t", 0, b"b"),
        send(3, "t", 0, b"bad sum", checkSum=7),
        send(4, "t", 1, b"c"),
        send(5, "t", 0, b"d"),
        send(6, "e", 0, attributed, flag=flag),
        lacking_a_field(7),
        send(8, "t", 0, struct.pack(">i", 50) + b"a=b", flag=1),
        send(9, "t", 0, b"f"),
        send(10, "t", 5, b"g"),
        send(11, "t", 0, bytes(101)),
        send(12, "nope", 0, b"h"),
        send(13, "t", 0, b"i", msgType="kind"),  # a plain topic keeps the payload only
    ]
    await broker.send_raw(b"".join(calls))
    replies = [await broker.next_frame() for _ in calls]
    assert [frame.serial_no for frame in replies if frame is not None] == list(range(1, 14))
    decoded = [t.decode_reply(frame) for frame in replies if frame is not None]
    bodies = {reply.serial_no: reply.body for reply in decoded}
    refusal = decoded[6]
    assert (refusal.exception, refusal.text) == (
        t.PROTOBUF_EXCEPTION,
        "IPC server handle request error :Message missing required fields: flag",
    )
    answers = {
        serial: (body.success, body.errCode, body.errMsg)
        for serial, body in bodies.items()
        if isinstance(body, broker_pb2.SendMessageResponseB2P) and not body.success
    }
    assert answers == {
        3: (
            False,
            403,
            f"Checksum msg data failure: 7 of t not equal to the data's checksum of {checksum(b'bad sum')}",
        ),
        8: (False, 400, "Illegal message attributes: attribute length 50 beyond the message data"),
        10: (False, 403, "partitionId t-5 not existed, please check your configure"),
        11: (
            False,
            400,
            "data length over max length, allowed max length is 100, data length is 101",
        ),
        12: (False, 403, "topicName nope not existed, please check your configure"),
    }
    topic = addresses.broker.topics["t"]
    stored = {
        (partition, record.internal_id): (record.body, record.offset, record.timestamp)
        for partition in (0, 1)
        for record in topic.partitions[partition].log.read(1, 100)
    }
    assert sorted(body for body, _, _ in stored.values()) == [b"a", b"b", b"c", b"d", b"f", b"i"]
    sent_to = {1: 0, 2: 0, 4: 1, 5: 0, 9: 0, 13: 0}
    for serial, partition in sent_to.items():
        body = bodies[serial]
        assert isinstance(body, broker_pb2.SendMessageResponseB2P)
        assert (body.success, body.errCode, body.requireAuth) == (True, 200, False)
        assert body.errMsg == str(body.messageId)
        _, offset, timestamp = stored[(partition, body.messageId)]
        assert (body.appendOffset, body.appendTime) == (offset, timestamp // 1_000_000)
    in_order = [stored[(0, bodies[s].messageId)][0] for s in (1, 2, 5, 9, 13)]  # type: ignore[union-attr]
    assert in_order == [b"a", b"b", b"d", b"f", b"i"]
    [ext] = addresses.broker.topics["e"].partitions[0].log.read(1, 10)
    assert (ext.body, orjson.loads(ext.ext)) == (b"e1", {"k": "v"})
    [producer] = [c for c in addresses.broker.clients.values() if isinstance(c, ProducerSession)]
    assert producer.pub_counts == {"t": 6, "e": 1}


def raw_send(serial: int, request: bytes) -> bytes:
    """A SendMessage call carrying ``request`` as it is."""
    payload = (
        t._delimited(rpc_pb2.RpcConnHeader(flag=0))
        + t._delimited(rpc_pb2.RequestHeader(serviceType=t.Service.BROKER_WRITE, protocolVer=2))
        + t._delimited(rpc_pb2.RequestBody(method=13, timeout=10, request=request))
    )
    return t.encode_frame(serial, payload)


PLAIN = broker_pb2.SendMessageRequestP2B(
    clientId="p", topicName="t", partitionId=0, data=b"x", flag=0, checkSum=-1, sentAddr=0
)


def request_bytes(**raw: bytes) -> bytes:
    """PLAIN's fields in number order, as the SDKs write them, with the text fields
    named in ``raw`` written as the bytes given."""
    out = b""
    for field in PLAIN.DESCRIPTOR.fields:
        if field.name in raw:
            value = raw[field.name]
            out += bytes([field.number << 3 | 2, len(value)]) + value  # tag, length
        elif PLAIN.HasField(field.name):
            one = broker_pb2.SendMessageRequestP2B()
            setattr(one, field.name, getattr(PLAIN, field.name))
            out += one.SerializePartialToString()
    return out


@pytest.mark.parametrize("run", ["read as one run", "read call by call"])
async def test_text_that_is_not_utf8_refuses_its_call_only(
    nursery: trio.Nursery, tube_clients: TubeClients, caplog: pytest.LogCaptureFixture, run: str
) -> None:
    """protobuf hands a proto2 string that is not UTF-8 over as bytes: that call is
    refused as a bad request, and the calls around it are served, whichever way the
    calls of the read are taken."""
    caplog.set_level(logging.INFO, logger="trionsq")
    addresses = await start_tubemq(nursery)
    addresses.broker.topic("t", ext=True)
    broker = await tube_clients.open(addresses.tubemq_broker)
    not_utf8 = b"\xff\xfe"
    calls = [
        send(1, "t", 0, b"a"),
        raw_send(2, request_bytes(clientId=not_utf8)),
        send(3, "t", 0, b"b"),
        raw_send(4, request_bytes(topicName=not_utf8)),
        raw_send(5, request_bytes(msgType=not_utf8)),
        send(6, "t", 0, b"c"),
    ]
    if run == "read call by call":  # a field out of order: the run is not canonical
        calls[2] = raw_send(3, request_bytes()[3:] + request_bytes()[:3])
    frames = t.FrameReader(1 << 20)
    frames.receive_data(b"".join(calls))
    read = frames.next_frames(10)
    assert isinstance(read[0], t.Frame)
    t.decode_request(read[0], frozenset({2, 3}))  # the envelope's prefix, as the server has it
    end, sends = take_sends(read, 0, frozenset({2, 3}))
    assert (end, sends is not None) == (6, run == "read as one run")
    await broker.send_raw(b"".join(calls))
    answers = [await broker.next_frame() for _ in calls]
    replies = [t.decode_reply(frame).body for frame in answers if frame is not None]
    assert [
        (r.success, r.errCode, r.errMsg)
        for r in replies
        if isinstance(r, broker_pb2.SendMessageResponseB2P)
    ] == [
        (True, 200, "1"),
        (False, 400, "Illegal value: clientId is not UTF-8 text"),
        (True, 200, "2"),
        (False, 400, "Illegal value: topicName is not UTF-8 text"),
        (False, 400, "Illegal value: msgType is not UTF-8 text"),
        (True, 200, "3"),
    ]
    stored = addresses.broker.topics["t"].partitions[0].log.read(1, 10)
    assert [record.body for record in stored] == [
        b"a",
        b"b" if run == "read as one run" else b"x",
        b"c",
    ]
    assert [r.getMessage() for r in caplog.records if r.levelno >= logging.ERROR] == []
