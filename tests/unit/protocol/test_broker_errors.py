"""Wire texts of the errors only the broker can decide (spec tcp-protocol §4, §8)."""

from __future__ import annotations

import pytest

from trionsq.protocol import ProtocolError
from trionsq.protocol import broker_errors as be

HEX = b"0123456789abcdef"

P = pytest.param
CASES = [
    P(
        be.identify_upgrade_failed("tls: bad handshake"),
        b"E_IDENTIFY_FAILED IDENTIFY failed tls: bad handshake",
        True,
    ),
    P(be.auth_failed(), b"E_AUTH_FAILED AUTH failed", True),
    P(be.auth_no_authorizations(), b"E_UNAUTHORIZED AUTH no authorizations found", True),
    P(be.unauthorized("SUB", "t", "c"), b'E_UNAUTHORIZED AUTH failed for SUB on "t" "c"', True),
    P(be.unauthorized("PUB", "t"), b'E_UNAUTHORIZED AUTH failed for PUB on "t" ""', True),
    P(
        be.sub_failed("channel consumers for t:c exceeds limit of 1"),
        b"E_SUB_FAILED SUB failed channel consumers for t:c exceeds limit of 1",
        True,
    ),
    P(be.sub_failed_deleted(), b"E_SUB_FAILED SUB failed to deleted topic/channel", True),
    P(
        be.fin_failed(HEX, be.NOT_IN_FLIGHT),
        b"E_FIN_FAILED FIN 0123456789abcdef failed ID not in flight",
        False,
    ),
    P(
        be.fin_failed(HEX, be.NOT_OWNER),
        b"E_FIN_FAILED FIN 0123456789abcdef failed client does not own message",
        False,
    ),
    P(
        be.req_failed(HEX, be.NOT_IN_FLIGHT),
        b"E_REQ_FAILED REQ 0123456789abcdef failed ID not in flight",
        False,
    ),
    P(
        be.touch_failed(HEX, be.NOT_IN_FLIGHT),
        b"E_TOUCH_FAILED TOUCH 0123456789abcdef failed ID not in flight",
        False,
    ),
    P(be.pub_failed("PUB", "exiting"), b"E_PUB_FAILED PUB failed exiting", True),
    P(be.pub_failed("MPUB", "exiting"), b"E_MPUB_FAILED MPUB failed exiting", True),
    P(be.pub_failed("DPUB", "exiting"), b"E_DPUB_FAILED DPUB failed exiting", True),
    P(
        be.pub_failed("PUB", "pub to wait channel timeout", youzan=True),
        b"E_PUB_FAILED pub to wait channel timeout",
        False,
    ),
    P(be.pub_failed("MPUB", "disk full", youzan=True), b"E_MPUB_FAILED disk full", False),
    P(be.topic_not_exist(), b"E_TOPIC_NOT_EXIST ", True),
    P(
        be.bad_partition_for_ordered(),
        b"E_BAD_PARTITION topic partition is not valid for multi partition: -1",
        True,
    ),
    P(
        be.pub_too_much_waiting(209715201),
        b"E_PUB_TOO_MUCH_WAITING pub too much waiting in the queue: 209715201",
        True,
    ),
    P(be.ext_not_supported("t"), b"E_EXT_NOT_SUPPORT ext content not supported in topic t", False),
    P(be.failed_on_not_leader(fatal=False), b"E_FAILED_ON_NOT_LEADER ", False),
    P(be.failed_on_not_writable(fatal=True), b"E_FAILED_ON_NOT_WRITABLE ", True),
    P(
        be.sub_order_is_must(),
        b"E_SUB_ORDER_IS_MUST this topic is configured only allow ordered sub",
        True,
    ),
    P(
        be.sub_extend_needed(),
        b"E_SUB_EXTEND_NEED this topic is extended and should identify as extend support.",
        True,
    ),
    P(
        be.sub_extend_forbidden(),
        b"E_SUB_EXTEND_FORBIDDON this topic is not extended and should not identify as extend support.",
        True,
    ),
    P(
        be.sub_channel_not_registered(),
        b"E_SUB_CHANNEL_NOT_REGISTERED channel is not registered under topic.",
        True,
    ),
    P(be.invalid_internal_id(), b"E_INVALID Invalid Message ID", True),
    P(be.no_channel(), b"E_INVALID No channel", True),
    P(
        be.create_topic_failed("coordinator enabled"),
        b"E_CREATE_TOPIC_FAILED coordinator enabled",
        False,
    ),
]


def test_too_many_connections_is_a_bare_text() -> None:
    error = be.too_many_connections()
    assert error.data == b"too much client connections"
    assert error.fatal


@pytest.mark.parametrize(("error", "data", "is_fatal"), CASES)
def test_broker_error_text(error: ProtocolError, data: bytes, is_fatal: bool) -> None:
    assert error.data == data
    assert error.fatal is is_fatal
    assert error.code == data.split(b" ", 1)[0].decode()
