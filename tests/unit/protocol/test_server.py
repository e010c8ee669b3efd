"""Table tests for the server state machine: every command and every error text of
spec tcp-protocol §4/§8 that the bytes alone decide, in the spec's order.

Each case runs three ways (h11's ``tr`` pattern): whole, one byte per call, and with
trailing data, and must give the same events each time.
"""

from __future__ import annotations

import struct
from typing import TYPE_CHECKING

import pytest

from trionsq.protocol import (
    Auth,
    Cls,
    Dpub,
    ExtMessage,
    Fin,
    Identify,
    IdentifyRequest,
    InternalCreateTopic,
    Mpub,
    MpubExt,
    MpubTrace,
    Nop,
    OffsetSpec,
    ProtocolError,
    Pub,
    PubExt,
    PublishHeader,
    PubTrace,
    Pull,
    Rdy,
    Req,
    ServerConnection,
    ServerSettings,
    Sub,
    SubAdvanced,
    SubOrdered,
    Touch,
    TracedMessage,
)

from .wire import ext_part, fatal, feed, feed_bytewise, mpub_body, sized, soft

if TYPE_CHECKING:
    from trionsq.protocol.server import Event

HEX = b"0123456789abcdef"
SUB = b"SUB t c\n"
SUBBED = Sub("t", "c")
AUTH_ON = ServerSettings(auth_enabled=True)
I32 = struct.Struct(">i")


def identify(json: bytes) -> bytes:
    return b"IDENTIFY\n" + sized(json)


def ident(**fields: object) -> Identify:
    """An Identify event; events compare by their request only."""
    request = IdentifyRequest(**fields)  # type: ignore[arg-type]
    return Identify(request, None, None)  # type: ignore[arg-type]


def invalid(description: str) -> ProtocolError:
    return fatal("E_INVALID", description)


def bad_body(description: str) -> ProtocolError:
    return fatal("E_BAD_BODY", description)


def bad_message(description: str) -> ProtocolError:
    return fatal("E_BAD_MESSAGE", description)


P = pytest.param
CASES = [
    # -- framing and dispatch
    P(b"NOP\n", [Nop()], None, id="nop"),
    P(b"NOP\r\n", [Nop()], None, id="crlf"),
    P(b"FOO\n", [invalid("invalid command FOO")], None, id="unknown-command"),
    P(b"\n", [invalid("invalid command ")], None, id="empty-line"),
    P(b"nop\n", [invalid("invalid command nop")], None, id="verbs-are-case-sensitive"),
    P(
        b"NOP\n",
        [invalid("cannot NOP in current state (TLS required)")],
        ServerSettings(tls_required=True),
        id="tls-required",
    ),
    P(
        b"BOGUS\n",
        [invalid("cannot BOGUS in current state (TLS required)")],
        ServerSettings(tls_required=True),
        id="tls-check-before-unknown-command",
    ),
    P(
        identify(b"{}"),
        [ident()],
        ServerSettings(tls_required=True),
        id="tls-required-allows-identify",
    ),
    P(b"A" * 16385, [invalid("command line longer than 16384 bytes")], None, id="line-too-long"),
    # -- IDENTIFY
    P(identify(b"{}"), [ident()], None, id="identify"),
    P(
        identify(b'{"short_id":"a","long_id":"b","unknown":[1]}'),
        [ident(short_id="a", long_id="b")],
        None,
        id="identify-ignores-unknown-keys",
    ),
    P(identify(b'{"heartbeat_interval":null}'), [ident()], None, id="identify-null-keeps-default"),
    P(
        SUB + identify(b"{}"),
        [SUBBED, invalid("cannot IDENTIFY in current state")],
        None,
        id="identify-after-sub",
    ),
    P(
        b"IDENTIFY\n" + I32.pack(5242881),
        [bad_body("IDENTIFY body too big 5242881 > 5242880")],
        None,
        id="identify-too-big",
    ),
    P(
        b"IDENTIFY\n" + I32.pack(0),
        [bad_body("IDENTIFY invalid body size 0")],
        None,
        id="identify-size-0",
    ),
    P(
        b"IDENTIFY\n" + I32.pack(-1),
        [bad_body("IDENTIFY invalid body size -1")],
        None,
        id="identify-size-negative",
    ),
    P(
        identify(b"{"),
        [bad_body("IDENTIFY failed to decode JSON body")],
        None,
        id="identify-bad-json",
    ),
    P(
        identify(b"[]"),
        [bad_body("IDENTIFY failed to decode JSON body")],
        None,
        id="identify-not-object",
    ),
    P(
        identify(b'{"heartbeat_interval":"1000"}'),
        [bad_body("IDENTIFY failed to decode JSON body")],
        None,
        id="identify-string-for-int",
    ),
    P(
        identify(b'{"heartbeat_interval":1000.0}'),
        [bad_body("IDENTIFY failed to decode JSON body")],
        None,
        id="identify-float-for-int",
    ),
    P(
        identify(b'{"snappy":1}'),
        [bad_body("IDENTIFY failed to decode JSON body")],
        None,
        id="identify-int-for-bool",
    ),
    P(
        identify(b'{"heartbeat_interval":999}'),
        [bad_body("IDENTIFY heartbeat interval (999) is invalid")],
        None,
        id="heartbeat-too-small",
    ),
    P(
        identify(b'{"heartbeat_interval":60001}'),
        [bad_body("IDENTIFY heartbeat interval (60001) is invalid")],
        None,
        id="heartbeat-too-big",
    ),
    P(
        identify(b'{"heartbeat_interval":-2}'),
        [bad_body("IDENTIFY heartbeat interval (-2) is invalid")],
        None,
        id="heartbeat-negative",
    ),
    P(
        identify(b'{"output_buffer_timeout":9}'),
        [bad_body("IDENTIFY output buffer timeout (9) is invalid")],
        None,
        id="buffer-timeout-small",
    ),
    P(
        identify(b'{"output_buffer_timeout":30001}'),
        [bad_body("IDENTIFY output buffer timeout (30001) is invalid")],
        None,
        id="buffer-timeout-big",
    ),
    P(
        identify(b'{"output_buffer_size":63}'),
        [bad_body("IDENTIFY output buffer size (63) is invalid")],
        None,
        id="buffer-size-small",
    ),
    P(
        identify(b'{"output_buffer_size":65537}'),
        [bad_body("IDENTIFY output buffer size (65537) is invalid")],
        None,
        id="buffer-size-big",
    ),
    P(
        identify(b'{"output_buffer_size":1,"output_buffer_timeout":1}'),
        [bad_body("IDENTIFY output buffer timeout (1) is invalid")],
        None,
        id="buffer-timeout-checked-before-size",
    ),
    P(
        identify(b'{"sample_rate":100}'),
        [bad_body("IDENTIFY sample rate (100) is invalid")],
        None,
        id="sample-rate-big",
    ),
    P(
        identify(b'{"sample_rate":-1}'),
        [bad_body("IDENTIFY sample rate (-1) is invalid")],
        None,
        id="sample-rate-negative",
    ),
    P(
        identify(b'{"msg_timeout":999}'),
        [bad_body("IDENTIFY msg timeout (999) is invalid")],
        None,
        id="msg-timeout-small",
    ),
    P(
        identify(b'{"msg_timeout":900001}'),
        [bad_body("IDENTIFY msg timeout (900001) is invalid")],
        None,
        id="msg-timeout-big",
    ),
    P(
        identify(b'{"desired_tag":"' + b"x" * 101 + b'"}'),
        [bad_body("IDENTIFY invalid tag len 101, exceed limit 100")],
        None,
        id="tag-too-long",
    ),
    P(
        identify(b'{"snappy":true,"deflate":true}'),
        [fatal("E_IDENTIFY_FAILED", "cannot enable both deflate and snappy compression")],
        None,
        id="both-compressions",
    ),
    # -- AUTH
    P(b"AUTH\n" + sized(b"secret"), [Auth(b"secret")], AUTH_ON, id="auth"),
    P(
        b"AUTH\n" + sized(b"s") + SUB + b"AUTH\n",
        [Auth(b"s"), SUBBED, invalid("cannot AUTH in current state")],
        AUTH_ON,
        id="auth-after-sub",
    ),
    P(b"AUTH x\n", [invalid("AUTH invalid number of parameters")], AUTH_ON, id="auth-params"),
    P(
        b"AUTH\n" + I32.pack(5242881),
        [bad_body("AUTH body too big 5242881 > 5242880")],
        AUTH_ON,
        id="auth-too-big",
    ),
    P(b"AUTH\n" + I32.pack(0), [bad_body("AUTH invalid body size 0")], AUTH_ON, id="auth-size-0"),
    P(
        b"AUTH\n" + sized(b"a") + b"AUTH\n" + sized(b"b"),
        [Auth(b"a"), invalid("AUTH already set")],
        AUTH_ON,
        id="auth-twice",
    ),
    P(
        b"AUTH\n" + sized(b"a"),
        [fatal("E_AUTH_DISABLED", "AUTH disabled")],
        None,
        id="auth-disabled",
    ),
    # -- SUB family
    P(SUB, [SUBBED], None, id="sub"),
    P(
        b"SUB t#ephemeral c#ephemeral\n",
        [Sub("t#ephemeral", "c#ephemeral")],
        None,
        id="sub-ephemeral",
    ),
    P(SUB + SUB, [SUBBED, invalid("cannot SUB in current state")], None, id="sub-twice"),
    P(
        identify(b'{"heartbeat_interval":-1}') + SUB,
        [ident(heartbeat_interval=-1), invalid("cannot SUB with heartbeats disabled")],
        None,
        id="sub-heartbeats-disabled",
    ),
    P(b"SUB t\n", [invalid("SUB insufficient number of parameters")], None, id="sub-params"),
    P(
        b"SUB a*b c\n",
        [fatal("E_BAD_TOPIC", 'SUB topic name "a*b" is not valid')],
        None,
        id="sub-bad-topic",
    ),
    P(
        b"SUB " + b"t" * 65 + b" c\n",
        [fatal("E_BAD_TOPIC", 'SUB topic name "' + "t" * 65 + '" is not valid')],
        None,
        id="sub-topic-too-long",
    ),
    P(
        b"SUB t c!\n",
        [fatal("E_BAD_CHANNEL", 'SUB channel name "c!" is not valid')],
        None,
        id="sub-bad-channel",
    ),
    P(
        b"SUB t c\xff\n",
        [fatal("E_BAD_CHANNEL", 'SUB channel name "c\\xff" is not valid')],
        None,
        id="sub-channel-go-quoting",
    ),
    P(SUB, [fatal("E_AUTH_FIRST", "AUTH required before SUB")], AUTH_ON, id="sub-auth-first"),
    P(b"SUB t c 2\n", [Sub("t", "c", 2)], None, id="sub-partition"),
    P(b"SUB t c -1\n", [Sub("t", "c", None)], None, id="sub-partition-default"),
    P(b"SUB t c 1 x\n", [Sub("t", "c", None)], None, id="sub-partition-only-with-4-params"),
    P(
        b"SUB t c abc\n",
        [
            fatal(
                "E_BAD_PARTITION",
                'topic partition is not valid: strconv.Atoi: parsing "abc": invalid syntax',
            )
        ],
        None,
        id="sub-bad-partition",
    ),
    P(
        b"SUB t c -3\n",
        [fatal("E_BAD_PARTITION", "partition should not less than 0")],
        None,
        id="sub-negative-partition",
    ),
    P(b"SUB_ORDERED t c 0\n", [SubOrdered("t", "c", 0)], None, id="sub-ordered"),
    P(b"SUB_ORDERED t c\n", [SubOrdered("t", "c", None)], None, id="sub-ordered-default-partition"),
    P(
        identify(b'{"sample_rate":10}') + b"SUB_ORDERED t c 0\n",
        [ident(sample_rate=10), invalid("order consume is not allowed while sample rate is not 0")],
        None,
        id="sub-ordered-sample-rate",
    ),
    P(
        b"SUB_ADVANCED t c 0 timestamp:100\n",
        [SubAdvanced("t", "c", 0, OffsetSpec("timestamp", 100))],
        None,
        id="sub-advanced",
    ),
    P(
        b"SUB_ADVANCED t c -1 special:-1\n",
        [SubAdvanced("t", "c", None, OffsetSpec("special", -1))],
        None,
        id="sub-advanced-special",
    ),
    P(b"SUB_ADVANCED t c 1\n", [SubAdvanced("t", "c", 1)], None, id="sub-advanced-no-offset"),
    P(
        b"SUB_ADVANCED t c 0 foo:1\n",
        [invalid("invalid consume offset: foo:1")],
        None,
        id="sub-advanced-bad-kind",
    ),
    P(
        b"SUB_ADVANCED t c 0 msgcount:x\n",
        [invalid("invalid consume offset: msgcount:x")],
        None,
        id="sub-advanced-bad-number",
    ),
    P(
        b"SUB_ADVANCED t c 0 special:5\n",
        [invalid("invalid consume offset: special:5")],
        None,
        id="sub-advanced-bad-special",
    ),
    # -- RDY
    P(b"RDY 1\n", [invalid("cannot RDY in current state")], None, id="rdy-before-sub"),
    P(SUB + b"RDY 10\n", [SUBBED, Rdy(10)], None, id="rdy"),
    P(SUB + b"RDY\n", [SUBBED, Rdy(1)], None, id="rdy-default-1"),
    P(SUB + b"RDY \n", [SUBBED, Rdy(0)], None, id="rdy-empty-is-0"),
    P(SUB + b"RDY -1\n", [SUBBED, invalid("RDY could not parse count -1")], None, id="rdy-sign"),
    P(SUB + b"RDY +5\n", [SUBBED, invalid("RDY could not parse count +5")], None, id="rdy-plus"),
    P(
        SUB + b"RDY 2501\n",
        [SUBBED, invalid("RDY count 2501 out of range 0-2500")],
        None,
        id="rdy-too-big",
    ),
    P(SUB + b"CLS\nRDY 5\nNOP\n", [SUBBED, Cls(), Nop()], None, id="rdy-ignored-when-closing"),
    # -- PULL (trionsq's pull consumption)
    P(b"PULL 1\n", [invalid("cannot PULL in current state")], None, id="pull-before-sub"),
    P(SUB + b"PULL 10\n", [SUBBED, Pull(10)], None, id="pull"),
    P(
        SUB + b"PULL\n",
        [SUBBED, invalid("PULL insufficient number of params")],
        None,
        id="pull-bare",
    ),
    P(SUB + b"PULL x\n", [SUBBED, invalid("PULL could not parse count x")], None, id="pull-nan"),
    P(
        SUB + b"PULL 2501\n",
        [SUBBED, invalid("PULL count 2501 out of range 0-2500")],
        None,
        id="pull-too-big",
    ),
    P(
        SUB + b"PULL 99999999999999999999\n",
        [SUBBED, invalid("PULL count 99999999999999999999 out of range 0-2500")],
        None,
        id="pull-huge-quoted-as-sent",
    ),
    P(
        SUB + b"PULL 18446744073709551617\n",
        [SUBBED, invalid("PULL count 18446744073709551617 out of range 0-2500")],
        None,
        id="pull-past-uint64-is-not-wrapped-into-range",
    ),
    P(SUB + b"PULL 0007\n", [SUBBED, Pull(7)], None, id="pull-leading-zeros"),
    P(SUB + b"CLS\nPULL 5\nNOP\n", [SUBBED, Cls(), Nop()], None, id="pull-ignored-when-closing"),
    # -- FIN / REQ / TOUCH / CLS / NOP
    P(b"FIN " + HEX + b"\n", [invalid("cannot FIN in current state")], None, id="fin-before-sub"),
    P(SUB + b"FIN " + HEX + b"\n", [SUBBED, Fin(HEX)], None, id="fin"),
    P(
        SUB + b"FIN\n",
        [SUBBED, invalid("FIN insufficient number of params")],
        None,
        id="fin-params",
    ),
    P(SUB + b"FIN abc\n", [SUBBED, invalid("invalid message ID")], None, id="fin-short-id"),
    P(
        SUB + b"FIN " + HEX + b"0\n",
        [SUBBED, invalid("invalid message ID")],
        None,
        id="fin-long-id",
    ),
    P(SUB + b"CLS\nFIN " + HEX + b"\n", [SUBBED, Cls(), Fin(HEX)], None, id="fin-while-closing"),
    P(SUB + b"REQ " + HEX + b" 100\n", [SUBBED, Req(HEX, 100)], None, id="req"),
    P(b"REQ " + HEX + b" 1\n", [invalid("cannot REQ in current state")], None, id="req-before-sub"),
    P(
        SUB + b"REQ " + HEX + b"\n",
        [SUBBED, invalid("REQ insufficient number of params")],
        None,
        id="req-params",
    ),
    P(SUB + b"REQ abc 1\n", [SUBBED, invalid("invalid message ID")], None, id="req-bad-id"),
    P(
        SUB + b"REQ " + HEX + b" x\n",
        [SUBBED, invalid("REQ could not parse timeout x")],
        None,
        id="req-bad-timeout",
    ),
    P(SUB + b"TOUCH " + HEX + b"\n", [SUBBED, Touch(HEX)], None, id="touch"),
    P(
        b"TOUCH " + HEX + b"\n",
        [invalid("cannot TOUCH in current state")],
        None,
        id="touch-before-sub",
    ),
    P(
        SUB + b"TOUCH\n",
        [SUBBED, invalid("TOUCH insufficient number of params")],
        None,
        id="touch-params",
    ),
    P(SUB + b"TOUCH 12\n", [SUBBED, invalid("invalid message ID")], None, id="touch-bad-id"),
    P(b"CLS\n", [invalid("cannot CLS in current state")], None, id="cls-before-sub"),
    P(
        SUB + b"CLS\nCLS\n",
        [SUBBED, Cls(), invalid("cannot CLS in current state")],
        None,
        id="cls-twice",
    ),
    # -- binary ids: positional FIN/REQ/TOUCH
    P(
        b"SUB t c 0\nFIN 0\n3 5678 abcdef!\n",
        [Sub("t", "c", 0), Fin(b"0\n3 5678 abcdef!")],
        None,
        id="binary-fin",
    ),
    P(
        b"SUB t c 0\nREQ " + b"\n" * 8 + b" " * 8 + b" 7\n",
        [Sub("t", "c", 0), Req(b"\n" * 8 + b" " * 8, 7)],
        None,
        id="binary-req",
    ),
    P(
        b"SUB_ORDERED t c 0\nTOUCH " + b"\r\n" * 8 + b"\n",
        [SubOrdered("t", "c", 0), Touch(b"\r\n" * 8)],
        None,
        id="binary-touch",
    ),
    P(
        identify(b'{"extend_support":true}')
        + SUB
        + b"FIN \x00\x00\x00\x00\x00\x00\x00\x01\n\n\n\n\n\n\n\n\n",
        [ident(extend_support=True), SUBBED, Fin(b"\x00" * 7 + b"\x01" + b"\n" * 8)],
        None,
        id="binary-fin-after-extend-support",
    ),
    P(
        b"SUB t c 0\nREQ " + b"x" * 16 + b"\n",
        [Sub("t", "c", 0), invalid("REQ insufficient number of params")],
        None,
        id="binary-req-params",
    ),
    P(
        b"SUB t c 0\nFIN " + b"x" * 17 + b"\n",
        [Sub("t", "c", 0), invalid("invalid message ID")],
        None,
        id="binary-fin-long-id",
    ),
    # -- PUB
    P(b"PUB t\n" + sized(b"hello"), [Pub("t", b"hello")], None, id="pub"),
    P(b"PUB t 3\n" + sized(b"hello"), [Pub("t", b"hello", 3)], None, id="pub-partition"),
    P(b"PUB\n", [invalid("PUB insufficient number of parameters")], None, id="pub-params"),
    P(
        b"PUB t!\n",
        [fatal("E_BAD_TOPIC", 'PUB topic name "t!" is not valid')],
        None,
        id="pub-bad-topic",
    ),
    P(
        b"PUB t\n" + I32.pack(0),
        [bad_message("PUB invalid message body size 0")],
        None,
        id="pub-size-0",
    ),
    P(
        b"PUB t\n" + I32.pack(1048577),
        [bad_message("PUB message too big 1048577 > 1048576")],
        None,
        id="pub-too-big-before-body",
    ),
    P(
        b"PUB t\n" + sized(b"x"),
        [fatal("E_AUTH_FIRST", "AUTH required before PUB")],
        AUTH_ON,
        id="pub-auth-first",
    ),
    P(SUB + b"PUB t\n" + sized(b"x"), [SUBBED, Pub("t", b"x")], None, id="pub-in-any-state"),
    # -- MPUB
    P(b"MPUB t\n" + mpub_body(b"a", b"bc"), [Mpub("t", (b"a", b"bc"))], None, id="mpub"),
    P(b"MPUB t 1\n" + mpub_body(b"a"), [Mpub("t", (b"a",), 1)], None, id="mpub-partition"),
    P(b"MPUB\n", [invalid("MPUB insufficient number of parameters")], None, id="mpub-params"),
    P(
        b"MPUB t!\n",
        [fatal("E_BAD_TOPIC", 'E_BAD_TOPIC MPUB topic name "t!" is not valid')],
        None,
        id="mpub-bad-topic",
    ),
    P(
        b"MPUB t\n",
        [fatal("E_AUTH_FIRST", "AUTH required before MPUB")],
        AUTH_ON,
        id="mpub-auth-first-before-body",
    ),
    P(b"MPUB t\n" + I32.pack(0), [bad_body("MPUB invalid body size 0")], None, id="mpub-size-0"),
    P(
        b"MPUB t\n" + I32.pack(5242881),
        [bad_body("MPUB body too big 5242881 > 5242880")],
        None,
        id="mpub-too-big",
    ),
    P(
        b"MPUB t\n" + I32.pack(100) + I32.pack(0),
        [bad_body("MPUB invalid message count 0")],
        None,
        id="mpub-count-0",
    ),
    P(
        b"MPUB t\n" + I32.pack(100) + I32.pack(1048576),
        [bad_body("MPUB invalid message count 1048576")],
        None,
        id="mpub-count-too-big",
    ),
    P(
        b"MPUB t\n" + I32.pack(100) + I32.pack(2) + I32.pack(0),
        [bad_message("MPUB invalid message(0) body size 0")],
        None,
        id="mpub-part-size-0",
    ),
    P(
        b"MPUB t\n" + I32.pack(100) + I32.pack(2) + sized(b"a") + I32.pack(-4),
        [bad_message("MPUB invalid message(1) body size -4")],
        None,
        id="mpub-part-index",
    ),
    P(
        b"MPUB t\n" + I32.pack(5000000) + I32.pack(2) + I32.pack(1048577),
        [bad_message("MPUB message too big 1048577 > 1048576")],
        None,
        id="mpub-part-too-big",
    ),
    P(
        b"MPUB t\n" + I32.pack(10) + I32.pack(2) + sized(b"a") + sized(b"b"),
        [bad_body("MPUB body size 10 is smaller than its messages")],
        None,
        id="mpub-parts-overrun-body",
    ),
    P(
        b"MPUB t\n" + I32.pack(100) + I32.pack(1) + sized(b"a") + b"NOP\n",
        [Mpub("t", (b"a",)), Nop()],
        None,
        id="mpub-reads-by-parts-like-nsqd",
    ),
    # -- DPUB
    P(b"DPUB t 1000\n" + sized(b"x"), [Dpub("t", 1000, b"x")], None, id="dpub"),
    P(b"DPUB t\n", [invalid("DPUB insufficient number of parameters")], None, id="dpub-params"),
    P(
        b"DPUB t! 1\n",
        [fatal("E_BAD_TOPIC", 'DPUB topic name "t!" is not valid')],
        None,
        id="dpub-bad-topic",
    ),
    P(b"DPUB t x\n", [invalid("DPUB could not parse timeout x")], None, id="dpub-bad-timeout"),
    P(
        b"DPUB t 3600001\n",
        [invalid("DPUB timeout 3600001 out of range 0-3600000")],
        None,
        id="dpub-timeout-range",
    ),
    P(
        b"DPUB t 99999999999999999999\n",
        [invalid("DPUB timeout 99999999999999999999 out of range 0-3600000")],
        None,
        id="dpub-huge-quoted-as-sent",
    ),
    P(
        b"DPUB t 18446744073709551616\n" + sized(b"x"),
        [invalid("DPUB timeout 18446744073709551616 out of range 0-3600000")],
        None,
        id="dpub-past-uint64-is-not-wrapped-into-range",
    ),
    P(
        b"DPUB t 1\n" + I32.pack(0),
        [bad_message("DPUB invalid message body size 0")],
        None,
        id="dpub-size-0",
    ),
    P(
        b"DPUB t 1\n" + I32.pack(1048577),
        [bad_message("DPUB message too big 1048577 > 1048576")],
        None,
        id="dpub-too-big",
    ),
    P(
        b"DPUB t 1\n" + sized(b"x"),
        [fatal("E_AUTH_FIRST", "AUTH required before DPUB")],
        AUTH_ON,
        id="dpub-auth-first",
    ),
    # -- PUB_TRACE / PUB_EXT
    P(
        b"PUB_TRACE t\n" + sized(struct.pack(">Q", 99) + b"body"),
        [PubTrace("t", 99, b"body")],
        None,
        id="pub-trace",
    ),
    P(
        b"PUB_TRACE t 2\n" + sized(struct.pack(">Q", 1) + b"b"),
        [PubTrace("t", 1, b"b", 2)],
        None,
        id="pub-trace-partition",
    ),
    P(b"PUB_TRACE\n", [invalid("insufficient number of parameters")], None, id="pub-trace-params"),
    P(
        b"PUB_TRACE t abc\n",
        [
            fatal(
                "E_BAD_PARTITION",
                'topic partition is not valid: strconv.Atoi: parsing "abc": invalid syntax',
            )
        ],
        None,
        id="pub-trace-bad-partition",
    ),
    P(
        b"PUB_TRACE t\n" + I32.pack(0),
        [bad_body("invalid body size 0")],
        None,
        id="pub-trace-size-0",
    ),
    P(
        b"PUB_TRACE t\n" + I32.pack(1048577),
        [bad_message("message too big 1048577 > 1048576")],
        None,
        id="pub-trace-too-big",
    ),
    P(
        b"PUB_TRACE t\n" + sized(b"12345678"),
        [bad_body("invalid body size 8 with trace id enabled")],
        None,
        id="pub-trace-size-8",
    ),
    P(
        b"PUB_TRACE t\n" + sized(b"123456789"),
        [fatal("E_AUTH_FIRST", "AUTH required before PUB")],
        AUTH_ON,
        id="pub-trace-auth-first",
    ),
    P(
        b"PUB_EXT t\n" + sized(ext_part(b'{"a":"b"}', b"body")),
        [PubExt("t", ExtMessage(b'{"a":"b"}', b"body"))],
        None,
        id="pub-ext",
    ),
    P(
        b"PUB_EXT t\n" + sized(b"\x00\x00"),
        [bad_body("invalid body size 2 with ext json header enabled")],
        None,
        id="pub-ext-size-2",
    ),
    P(
        b"PUB_EXT t\n" + sized(struct.pack(">H", 3) + b"{}x"),
        [bad_body("invalid body size 5 in ext json header content length")],
        None,
        id="pub-ext-header-length",
    ),
    P(
        b"PUB_EXT t\n" + sized(ext_part(b'{"##trace_id":5}', b"b")) + b"NOP\n",
        [soft("INVALID_TRACE_ID", "passin trace id should be string"), Nop()],
        None,
        id="pub-ext-trace-id-not-string",
    ),
    P(
        b"PUB_EXT t\n" + sized(ext_part(b'{"##trace_id":"x1"}', b"b")) + b"NOP\n",
        [soft("INVALID_TRACE_ID", "invalid trace id"), Nop()],
        None,
        id="pub-ext-trace-id-invalid",
    ),
    # -- MPUB_TRACE / MPUB_EXT
    P(
        b"MPUB_TRACE t\n" + mpub_body(struct.pack(">Q", 7) + b"a", struct.pack(">Q", 8) + b"b"),
        [MpubTrace("t", (TracedMessage(7, b"a"), TracedMessage(8, b"b")))],
        None,
        id="mpub-trace",
    ),
    P(
        b"MPUB_TRACE t\n" + I32.pack(5242881),
        [bad_body("body too big 5242881 > 5242880")],
        None,
        id="mpub-trace-too-big",
    ),
    P(
        b"MPUB_TRACE t\n" + mpub_body(b"12345678"),
        [bad_message("MPUB invalid message(0) body size 8")],
        None,
        id="mpub-trace-part-too-small",
    ),
    P(
        b"MPUB_EXT t\n" + mpub_body(ext_part(b"{}", b"a"), ext_part(b'{"k":1}', b"b")),
        [MpubExt("t", (ExtMessage(b"{}", b"a"), ExtMessage(b'{"k":1}', b"b")))],
        None,
        id="mpub-ext",
    ),
    P(
        b"PUB_TRACE ../x\n" + sized(b"123456789"),
        [fatal("E_TOPIC_NOT_EXIST", "")],
        None,
        id="youzan-invalid-name-cannot-exist",
    ),
    P(
        b"MPUB_EXT " + b"t" * 65 + b"\n" + I32.pack(20),
        [fatal("E_TOPIC_NOT_EXIST", "")],
        None,
        id="youzan-mpub-invalid-name-cannot-exist",
    ),
    P(
        SUB + b"RDY " + b"1" * 5000 + b"\n",
        [SUBBED, invalid("RDY count 8198552921648689607 out of range 0-2500")],
        None,
        id="rdy-huge-wraps-like-go-uint64",
    ),
    P(
        b"SUB t c " + b"9" * 5000 + b"\n",
        [
            fatal(
                "E_BAD_PARTITION",
                f'topic partition is not valid: strconv.Atoi: parsing "{"9" * 5000}": value out of range',
            )
        ],
        None,
        id="partition-out-of-range",
    ),
    P(
        b"SUB t c -1\nFIN 0123456789abcde\n\n",
        [SUBBED, Fin(b"0123456789abcde\n")],
        None,
        id="explicit-partition-arg-means-binary-ids",
    ),
    P(
        b"SUB t c 0\nFIN " + b"\x00" * 15 + b"\r\n",
        [Sub("t", "c", 0), Fin(b"\x00" * 15 + b"\r")],
        None,
        id="binary-id-ending-in-cr",
    ),
    # -- INTERNAL_CREATE_TOPIC
    P(b"INTERNAL_CREATE_TOPIC t 0\n", [InternalCreateTopic("t", 0)], None, id="create-topic"),
    P(
        b"INTERNAL_CREATE_TOPIC t 3 true\n",
        [InternalCreateTopic("t", 3, ext=True)],
        None,
        id="create-topic-ext",
    ),
    P(
        b"INTERNAL_CREATE_TOPIC t 3 F\n",
        [InternalCreateTopic("t", 3, ext=False)],
        None,
        id="create-topic-go-bool",
    ),
    P(
        b"INTERNAL_CREATE_TOPIC t\n",
        [invalid("CREATE_TOPIC insufficient number of parameters")],
        None,
        id="create-topic-params",
    ),
    P(
        b"INTERNAL_CREATE_TOPIC t -1\n",
        [fatal("E_BAD_PARTITION", "partition should not less than 0")],
        None,
        id="create-topic-negative",
    ),
    P(
        b"INTERNAL_CREATE_TOPIC t abc\n",
        [
            fatal(
                "E_BAD_PARTITION",
                'topic partition is not valid: strconv.Atoi: parsing "abc": invalid syntax',
            )
        ],
        None,
        id="create-topic-bad-partition",
    ),
    P(
        b"INTERNAL_CREATE_TOPIC t 0 maybe\n",
        [
            fatal(
                "E_BAD_EXT",
                'topic ext is not valid: strconv.ParseBool: parsing "maybe": invalid syntax',
            )
        ],
        None,
        id="create-topic-bad-ext",
    ),
]


def _with_trailer(expected: list[Event], settings: ServerSettings | None) -> list[Event]:
    if expected and isinstance(expected[-1], ProtocolError) and expected[-1].fatal:
        return expected
    if settings is not None and settings.tls_required:
        return [*expected, invalid("cannot NOP in current state (TLS required)")]
    return [*expected, Nop()]


@pytest.mark.parametrize(("data", "expected", "settings"), CASES)
def test_command_table(data: bytes, expected: list[Event], settings: ServerSettings | None) -> None:
    assert feed(data, settings) == expected
    assert feed_bytewise(data, settings) == expected
    assert feed(data + b"NOP\n", settings) == _with_trailer(expected, settings)


EOF_CASES = [
    P(b"IDENTIFY\n\x00\x00", "E_BAD_BODY", "IDENTIFY failed to read body size", id="identify-size"),
    P(
        b"IDENTIFY\n" + I32.pack(10) + b"{}",
        "E_BAD_BODY",
        "IDENTIFY failed to read body",
        id="identify-body",
    ),
    P(b"AUTH\n\x00", "E_BAD_BODY", "AUTH failed to read body size", id="auth-size"),
    P(b"AUTH\n" + I32.pack(3) + b"a", "E_BAD_BODY", "AUTH failed to read body", id="auth-body"),
    P(b"PUB t\n\x00", "E_BAD_MESSAGE", "PUB failed to read message body size", id="pub-size"),
    P(
        b"PUB t\n" + I32.pack(5) + b"he",
        "E_BAD_MESSAGE",
        "PUB failed to read message body",
        id="pub-body",
    ),
    P(b"DPUB t 5\n", "E_BAD_MESSAGE", "DPUB failed to read message body size", id="dpub-size"),
    P(
        b"DPUB t 5\n" + I32.pack(5),
        "E_BAD_MESSAGE",
        "DPUB failed to read message body",
        id="dpub-body",
    ),
    P(b"MPUB t\n\x00\x00\x00", "E_BAD_BODY", "MPUB failed to read body size", id="mpub-size"),
    P(
        b"MPUB t\n" + I32.pack(20),
        "E_BAD_BODY",
        "MPUB failed to read message count",
        id="mpub-count",
    ),
    P(
        b"MPUB t\n" + I32.pack(20) + I32.pack(2) + sized(b"a"),
        "E_BAD_MESSAGE",
        "MPUB failed to read message(1) body size",
        id="mpub-part-size",
    ),
    P(
        b"MPUB t\n" + I32.pack(20) + I32.pack(2) + I32.pack(3) + b"a",
        "E_BAD_MESSAGE",
        "MPUB failed to read message body",
        id="mpub-part-body",
    ),
    P(b"PUB_TRACE t\n\x00", "E_BAD_BODY", "failed to read body size", id="pub-trace-size"),
    P(
        b"PUB_TRACE t\n" + I32.pack(20) + b"1234",
        "E_BAD_MESSAGE",
        "failed to read message body",
        id="pub-trace-body",
    ),
    P(
        b"PUB_EXT t\n" + I32.pack(20) + b"\x00",
        "E_BAD_MESSAGE",
        "failed to read message body",
        id="pub-ext-body",
    ),
]


@pytest.mark.parametrize(("data", "code", "description"), EOF_CASES)
def test_eof_mid_command_sends_the_read_error(data: bytes, code: str, description: str) -> None:
    expected = [fatal(code, description)]
    assert feed(data, eof=True) == expected
    assert feed_bytewise(data, eof=True) == expected


def test_eof_between_commands_or_mid_line_sends_nothing() -> None:
    assert feed(b"NOP\n", eof=True) == [Nop()]
    assert feed(b"PUB t", eof=True) == []
    conn = ServerConnection()
    assert conn.receive_data(b"  V") == []
    assert conn.receive_data(b"") == []
    assert conn.closed


def test_bad_magic_is_a_bare_code_and_closes() -> None:
    events = feed(b"NOP\n", magic=b"  V1")
    assert events == [fatal("E_BAD_PROTOCOL", None)]
    assert isinstance(events[0], ProtocolError)
    assert events[0].data == b"E_BAD_PROTOCOL"


def test_fatal_error_closes_and_later_data_is_ignored() -> None:
    conn = ServerConnection()
    assert conn.receive_data(b"  V2FOO\nNOP\n") == [invalid("invalid command FOO")]
    assert conn.closed
    assert conn.receive_data(b"NOP\n") == []


def test_many_commands_in_one_receive_all_come_out() -> None:
    stream = b"".join(b"PUB t\n" + sized(b"m%d" % i) for i in range(1000))
    events = feed(stream)
    assert events == [Pub("t", b"m%d" % i) for i in range(1000)]


def test_large_body_split_across_receives_is_kept_once_and_whole() -> None:
    body = bytes(range(256)) * 4000  # 1,024,000 bytes
    stream = b"  V2PUB t\n" + sized(body) + b"NOP\n"
    conn = ServerConnection()
    events: list[Event] = []
    for start in range(0, len(stream), 65536):
        events += conn.receive_data(stream[start : start + 65536])
    assert events == [Pub("t", body), Nop()]


def test_bytearray_input_gives_bytes_in_events() -> None:
    conn = ServerConnection()
    events = conn.receive_data(bytearray(b"  V2PUB t\n" + sized(b"x")))
    assert events == [Pub("t", b"x")]
    assert isinstance(events[0], Pub)
    assert type(events[0].body) is bytes


def test_identify_reply_and_settings() -> None:
    events = feed(
        identify(
            b'{"feature_negotiation":true,"heartbeat_interval":5000,'
            b'"output_buffer_size":-1,"msg_timeout":2000,"deflate":true,'
            b'"deflate_level":9,"client_id":"c","hostname":"h"}'
        )
    )
    assert len(events) == 1
    event = events[0]
    assert isinstance(event, Identify)
    settings = event.settings
    assert settings.heartbeat_interval_ms == 5000
    assert (settings.output_buffer_size, settings.output_buffer_timeout_ms) == (1, 0)
    assert settings.msg_timeout_ms == 2000
    assert (settings.deflate, settings.deflate_level) == (True, 6)
    assert (settings.client_id, settings.hostname) == ("c", "h")
    assert event.response is not None


def test_identify_upgrade_stops_parsing_and_hands_back_the_rest() -> None:
    conn = ServerConnection(ServerSettings(tls_available=True))
    tls_hello = b"\x16\x03\x01\x02\x00\x01"
    events = conn.receive_data(b"  V2" + identify(b'{"tls_v1":true}') + tls_hello)
    assert events == [ident(tls_v1=True)]
    assert conn.trailing_data == tls_hello
    conn.tls_established()
    assert conn.receive_data(b"NOP\n") == [Nop()]


def test_identify_without_upgrade_keeps_parsing() -> None:
    conn = ServerConnection()  # no certificate: tls_v1 is declined, nothing to upgrade
    events = conn.receive_data(b"  V2" + identify(b'{"tls_v1":true}') + b"NOP\n")
    assert events == [ident(tls_v1=True), Nop()]
    assert conn.trailing_data == b""


def test_tls_established_lifts_tls_requirement() -> None:
    conn = ServerConnection(ServerSettings(tls_required=True, tls_available=True))
    conn.receive_data(b"  V2")
    conn.tls_established()
    assert conn.receive_data(b"NOP\n") == [Nop()]


def test_pub_ext_extracts_trace_id_and_tag() -> None:
    header = b'{"##trace_id":"123","##client_dispatch_tag":"tagA","k":"v"}'
    events = feed(b"PUB_EXT t\n" + sized(ext_part(header, b"body")))
    assert events == [PubExt("t", ExtMessage(header, b"body"))]
    event = events[0]
    assert isinstance(event, PubExt)
    assert (event.message.trace_id, event.message.tag) == (123, "tagA")


def test_pub_ext_bad_json_is_non_fatal() -> None:
    events = feed(b"PUB_EXT t\n" + sized(ext_part(b"{bad", b"b")) + b"NOP\n")
    assert len(events) == 2
    error = events[0]
    assert isinstance(error, ProtocolError)
    assert (error.code, error.fatal) == ("E_INVALID_JSON_HEADER", False)
    assert error.text.startswith("E_INVALID_JSON_HEADER fail to parse json header:")
    assert events[1] == Nop()


class RecordingGate:
    """A publish gate that records what it saw and answers with a fixed verdict."""

    def __init__(self, verdict: ProtocolError | None) -> None:
        self.verdict = verdict
        self.seen: list[PublishHeader] = []

    def __call__(self, header: PublishHeader) -> ProtocolError | None:
        self.seen.append(header)
        return self.verdict


def test_publish_gate_sees_header_before_the_body() -> None:
    gate = RecordingGate(fatal("E_TOPIC_NOT_EXIST", ""))
    conn = ServerConnection(publish_gate=gate)
    events = conn.receive_data(b"  V2PUB_EXT t 3\n" + I32.pack(100))  # no body sent at all
    assert events == [fatal("E_TOPIC_NOT_EXIST", "")]
    assert gate.seen == [PublishHeader("PUB_EXT", "t", 3, 100)]


def test_publish_gate_checks_mpub_before_its_body_size() -> None:
    gate = RecordingGate(fatal("E_UNAUTHORIZED", 'AUTH failed for MPUB on "t" ""'))
    events = feed(b"MPUB t\n" + I32.pack(0), gate=gate)
    assert events == [fatal("E_UNAUTHORIZED", 'AUTH failed for MPUB on "t" ""')]
    assert gate.seen == [PublishHeader("MPUB", "t", None, None)]


def test_non_fatal_gate_verdict_skips_the_body_and_carries_on() -> None:
    refusal = soft("E_PUB_FAILED", "pub to wait channel timeout")
    stream = b"PUB t\n" + sized(b"x") + b"MPUB t\n" + mpub_body(b"a") + b"NOP\n"
    # twice over, so the second round takes the whole-command fast path (names cached)
    for run in (feed, feed_bytewise):
        gate = RecordingGate(refusal)
        assert run(stream + stream, gate=gate) == [refusal, refusal, Nop()] * 2
        assert [h.verb for h in gate.seen] == ["PUB", "MPUB"] * 2  # asked once per command


def test_both_compressions_asked_but_one_disabled_negotiates_the_other() -> None:
    conn = ServerConnection(ServerSettings(snappy=False))
    events = conn.receive_data(b"  V2" + identify(b'{"snappy":true,"deflate":true}') + b"NOP\n")
    assert events == [ident(snappy=True, deflate=True)]
    event = events[0]
    assert isinstance(event, Identify)
    assert (event.settings.snappy, event.settings.deflate) == (False, True)
    assert conn.trailing_data == b"NOP\n"  # deflated bytes follow: not parsed here
