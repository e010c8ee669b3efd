"""Websocket churn against a real broker (issue 30, item 1): admin stream sessions
(an upgrade, then ops and garbage frames) cut at a random byte, sometimes after
reading what the broker sent, then closed or reset. The broker answers /ping after
each, and nothing is logged at ERROR (a vanished peer is no failure)."""

from __future__ import annotations

import os
import socket
import struct
from typing import TYPE_CHECKING

import orjson
from hypothesis import given
from hypothesis import strategies as st

from .mutations import fuzz_settings, mutated

if TYPE_CHECKING:
    from trionsq.nursery_tree import BoundAddresses

    from .conftest import Errors

UPGRADE = (
    b"GET /admin/stream%s HTTP/1.1\r\nHost: n\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n"
    b"Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\nSec-WebSocket-Version: 13\r\n\r\n"
)
QUERIES = [b"", b"?snapshot_interval_ms=100", b"?events=topic,channel", b"?snapshot_interval_ms=7"]
OPS = [
    {"op": "subscribe", "topics": ["churn"], "snapshot_interval_ms": 100},
    {"op": "topic.create", "topic": "churn", "ref": 1},
    {"op": "channel.create", "topic": "churn", "channel": "c", "ref": 2},
    {"op": "sample", "topic": "churn", "every": 1, "bodies": True},
    {"op": "topic.pause", "topic": "churn"},
    {"op": "topic.unpause", "topic": "churn"},
    {"op": "auth", "secret": "x"},
    {"op": "dance"},
]


def frame(payload: bytes, opcode: int = 1) -> bytes:
    """A client's masked frame (RFC 6455 §5.2)."""
    mask = os.urandom(4)
    size = len(payload)
    if size < 126:
        head = struct.pack(">BB", 0x80 | opcode, 0x80 | size)
    else:
        head = struct.pack(">BBH", 0x80 | opcode, 0x80 | 126, size)
    return head + mask + bytes(b ^ mask[i % 4] for i, b in enumerate(payload))


frames = st.one_of(
    st.sampled_from(OPS).map(lambda op: frame(orjson.dumps(op))),
    st.sampled_from(OPS).flatmap(lambda op: mutated(frame(orjson.dumps(op)), max_ops=2)),
    st.binary(max_size=40).map(frame),
    st.just(frame(b"\x03\xe8", opcode=8)),  # a close frame
)


def ping(address: tuple[str, int]) -> None:
    with socket.create_connection(address, timeout=10) as sock:
        sock.sendall(b"GET /ping HTTP/1.1\r\nHost: n\r\nConnection: close\r\n\r\n")
        answer = b""
        while chunk := sock.recv(4096):
            answer += chunk
    assert answer.endswith(b"\r\n\r\nOK"), answer[:200]


@fuzz_settings
@given(
    query=st.sampled_from(QUERIES),
    sent=st.lists(frames, max_size=4),
    data=st.data(),
    read_first=st.booleans(),
    reset=st.booleans(),
)
def test_websocket_sessions_dropped_anywhere(
    broker: tuple[BoundAddresses, Errors],
    query: bytes,
    sent: list[bytes],
    data: st.DataObject,
    read_first: bool,
    reset: bool,
) -> None:
    addresses, errors = broker
    assert addresses.http is not None
    upgrade = UPGRADE % query
    session = upgrade + b"".join(sent)
    cut = data.draw(st.integers(0, len(session)), label="cut")
    with socket.create_connection(addresses.http, timeout=10) as sock:
        sock.sendall(session[:cut])
        if read_first and cut >= len(upgrade):  # the broker answers a whole upgrade
            sock.recv(65536)
        if reset:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    ping(addresses.http)
    assert not errors.records, errors.records[0].getMessage()[:300]
