"""The outbound buffer's flush rules (spec §6) and message encoding per client mode."""

from __future__ import annotations

from trionsq.broker.channel import Delivery
from trionsq.protocol import OK_FRAME, decode_message, encode_message_frame, hex_id
from trionsq.protocol.client import ClientConnection, MessageFrame, Response
from trionsq.protocol.message import binary_id
from trionsq.queues.record import Record, record_size
from trionsq.server.outbound import OutboundBuffer


def delivery(
    internal_id: int, body: bytes = b"x" * 100, attempts: int = 1, **kw: object
) -> Delivery:
    record = Record(0, record_size(len(body)), internal_id, 123, body, **kw)  # type: ignore[arg-type]
    return Delivery(record, attempts)


def test_messages_wait_for_size_timer_or_not_ready() -> None:
    out = OutboundBuffer(buffer_size=1000, buffer_timeout=0.25)
    out.add_deliveries([delivery(1)], now=10.0)
    assert not out.flush_due(10.0, ready=True)
    assert out.flush_deadline() == 10.25
    assert out.flush_due(10.25, ready=True)  # timer
    assert out.flush_due(10.0, ready=False)  # client not ready: flush now
    out.add_deliveries([delivery(i) for i in range(2, 10)], now=10.1)
    assert out.flush_due(10.1, ready=True)  # size reached
    data = out.take()
    assert len(data) == 9 * (30 + 4 + 100)
    assert out.flush_deadline() is None
    assert not out.flush_due(99.0, ready=False)  # nothing buffered


def test_a_response_flushes_everything_before_it_in_order() -> None:
    out = OutboundBuffer(buffer_size=65536, buffer_timeout=0)
    out.add_deliveries([delivery(1)], now=0.0)
    assert not out.flush_due(1e9, ready=True)  # timeout 0: no timer
    out.add_response(OK_FRAME)
    assert out.flush_due(0.0, ready=True)
    frames = ClientConnection().receive_data(out.take())
    assert isinstance(frames[0], MessageFrame)
    assert isinstance(frames[1], Response)
    assert frames[1].data == b"OK"


def test_hex_ids_for_standard_clients_binary_for_youzan() -> None:
    plain = OutboundBuffer(buffer_size=1, buffer_timeout=0)
    plain.add_deliveries([delivery(255, b"body", attempts=3)], now=0.0)
    assert plain.take() == encode_message_frame(123, 3, hex_id(255), b"body")
    youzan = OutboundBuffer(buffer_size=1, buffer_timeout=0, binary_ids=True)
    youzan.add_deliveries([delivery(255, b"body", trace_id=9)], now=0.0)
    assert youzan.take() == encode_message_frame(123, 1, binary_id(255, 9), b"body")


def test_extended_and_detail_layouts() -> None:
    out = OutboundBuffer(
        buffer_size=1, buffer_timeout=0, binary_ids=True, extended=True, detail=True
    )
    record = Record(4096, 60, 7, 123, b"b", 5, 4, b'{"a":1}')
    out.add_deliveries([Delivery(record, 2)], now=0.0)
    data = out.take()
    message = decode_message(data[8:], extended=True, detail=True)
    assert (message.id, message.attempts, message.body) == (binary_id(7, 5), 2, b"b")
    assert (message.ext_version, message.ext) == (4, b'{"a":1}')
    assert (message.offset, message.raw_size) == (4096, 60)
