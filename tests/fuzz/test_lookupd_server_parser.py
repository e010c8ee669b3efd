"""Fuzz nsqlookupd's side of the TCP protocol V1 (:class:`LookupServerConnection`):
any bytes give commands and :class:`ProtocolError` values only, a fatal error ends
the list, and what is held for an incomplete line or body stays within its limit."""

from __future__ import annotations

import struct

from hypothesis import given
from hypothesis import strategies as st

from trionsq.protocol.errors import ProtocolError
from trionsq.protocol.lookupd import (
    MAGIC_V1,
    LookupIdentify,
    LookupServerConnection,
    Ping,
    Register,
    Unregister,
)

from .mutations import cuts, fuzz_settings, mutated, split

MAX_BODY = 2048
MAX_LINE = 128
IDENTIFY = (
    b'{"version":"1.3.0","tcp_port":4150,"http_port":4151,"broadcast_address":"h",'
    b'"hostname":"h","remote_address":"127.0.0.1:1"}'
)
VALID = (
    MAGIC_V1
    + b"IDENTIFY\n"
    + struct.pack(">i", len(IDENTIFY))
    + IDENTIFY
    + b"REGISTER t\nREGISTER t c\nREGISTER t c 1\nUNREGISTER t c\nUNREGISTER t\nPING\n"
)


def run(reads: list[bytes]) -> None:
    connection = LookupServerConnection(max_identify_body_size=MAX_BODY, max_line_length=MAX_LINE)
    for data in [*reads, b""]:
        events = connection.receive_data(data)
        for index, event in enumerate(events):
            if isinstance(event, ProtocolError):
                assert event.fatal
                assert index == len(events) - 1
                assert connection.closed
            else:
                assert isinstance(event, (LookupIdentify, Register, Unregister, Ping))
        # private state, read to check the bound: a partial line or body piece
        assert len(connection._partial_line) <= MAX_LINE + 1
        assert connection._have <= MAX_BODY


@fuzz_settings
@given(data=st.binary(max_size=2048), magic=st.booleans(), cut_at=cuts)
def test_arbitrary_bytes(data: bytes, magic: bool, cut_at: list[int]) -> None:
    run(split((MAGIC_V1 if magic else b"") + data, cut_at))


@fuzz_settings
@given(data=mutated(VALID * 2, max_ops=6), cut_at=cuts)
def test_mutated_valid_streams(data: bytes, cut_at: list[int]) -> None:
    run(split(data, cut_at))
