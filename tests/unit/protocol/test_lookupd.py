"""The lookupd TCP protocol V1 codec (spec lookupd-tcp): every command and error text,
in the spec's order, and the exact bytes of every reply and client command.

Table cases run three ways (h11's ``tr`` pattern): whole, one byte per call, and
with trailing data, and must give the same events each time. Hypothesis checks that
the client encoder and the server parser agree, that chunking never changes a parse,
and that no input makes the server raise.
"""

from __future__ import annotations

import itertools
import struct

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from trionsq.protocol.errors import ProtocolError
from trionsq.protocol.lookupd import (
    DEFAULT_MAX_REPLY_SIZE,
    MAGIC_V1,
    MAX_IDENTIFY_BODY_SIZE,
    MAX_LINE_LENGTH,
    OK_REPLY,
    LookupClientConnection,
    LookupCommand,
    LookupdInfo,
    LookupEvent,
    LookupIdentify,
    LookupServerConnection,
    PeerInfo,
    Ping,
    Register,
    Unregister,
    decode_identify_reply,
    decode_peer_info,
    encode_error_reply,
    encode_identify_reply,
    encode_lookup_command,
    encode_reply,
    go_trim_space,
    is_error_reply,
    is_valid_partition_id,
    reply_error,
)

I32 = struct.Struct(">i")
FAST = settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
MORE = settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])

PEER_JSON = (
    b'{"version":"1.3.0","tcp_port":4150,"http_port":4151,"hostname":"h","broadcast_address":"b"}'
)
PEER = PeerInfo(version="1.3.0", tcp_port=4150, http_port=4151, hostname="h", broadcast_address="b")
IDENT = LookupIdentify(PEER)


def sized(body: bytes) -> bytes:
    return I32.pack(len(body)) + body


def identify(body: bytes) -> bytes:
    return b"IDENTIFY\n" + sized(body)


ID = identify(PEER_JSON)


def fatal(code: str, description: str | None) -> ProtocolError:
    return ProtocolError(code, description, fatal=True)


def invalid(description: str) -> ProtocolError:
    return fatal("E_INVALID", description)


def bad_body(description: str) -> ProtocolError:
    return fatal("E_BAD_BODY", description)


def feed(data: bytes, *, eof: bool = False, magic: bytes = MAGIC_V1) -> list[LookupEvent]:
    conn = LookupServerConnection()
    events = conn.receive_data(magic + data)
    if eof:
        events += conn.receive_data(b"")
    return events


def feed_chunks(chunks: list[bytes], *, eof: bool = False) -> list[LookupEvent]:
    conn = LookupServerConnection()
    events: list[LookupEvent] = []
    for chunk in chunks:
        events += conn.receive_data(chunk)
    if eof:
        events += conn.receive_data(b"")
    return events


def feed_bytewise(data: bytes, *, eof: bool = False, magic: bytes = MAGIC_V1) -> list[LookupEvent]:
    stream = magic + data
    return feed_chunks([stream[i : i + 1] for i in range(len(stream))], eof=eof)


P = pytest.param
TOPIC_64 = b"t" * 64
CASES = [
    # -- framing and dispatch
    P(b"PING\n", [Ping()], id="ping"),
    P(b"PING\r\n", [Ping()], id="crlf"),
    P(b" \t PING \v\f\r\n", [Ping()], id="ascii-whitespace-trimmed"),
    P(b"\xc2\xa0\xe3\x80\x80PING\xc2\x85\xe2\x80\xa8\n", [Ping()], id="unicode-space-trimmed"),
    P(b"PING\xc2\n", [invalid("invalid command PING\udcc2")], id="broken-utf8-not-trimmed"),
    P(b"PING extra args\n", [Ping()], id="ping-ignores-args"),
    P(b"PING  \n", [Ping()], id="trailing-spaces-trimmed"),
    P(b"FOO\n", [invalid("invalid command FOO")], id="unknown-command"),
    P(b"ping\n", [invalid("invalid command ping")], id="verbs-are-case-sensitive"),
    P(b"\n", [invalid("invalid command ")], id="empty-line"),
    P(b"  \r\n", [invalid("invalid command ")], id="blank-line"),
    P(b"NOP\n", [invalid("invalid command NOP")], id="v2-command"),
    P(
        b"A" * (MAX_LINE_LENGTH + 1),
        [invalid(f"command line longer than {MAX_LINE_LENGTH} bytes")],
        id="line-too-long",
    ),
    P(b"PING" + b" " * (MAX_LINE_LENGTH - 4) + b"\n", [Ping()], id="line-at-limit"),
    # -- IDENTIFY
    P(ID, [IDENT], id="identify"),
    P(b"PING\n" + ID, [Ping(), IDENT], id="ping-before-identify"),
    P(b"IDENTIFY extra\n" + sized(PEER_JSON), [IDENT], id="identify-ignores-args"),
    P(
        identify(
            b'{"version":"v","tcp_port":1,"http_port":2,"broadcast_address":"b",'
            b'"topology_zone":"z","topology_region":"r","distributed_id":"d",'
            b'"remote_address":"x","unknown":[1,{"a":null}]}'
        ),
        [
            LookupIdentify(
                PeerInfo(
                    version="v",
                    tcp_port=1,
                    http_port=2,
                    broadcast_address="b",
                    topology_zone="z",
                    topology_region="r",
                    distributed_id="d",
                )
            )
        ],
        id="identify-all-fields-unknown-ignored",
    ),
    P(
        identify(b'{"version":"v","tcp_port":-1,"http_port":2,"broadcast_address":"b"}'),
        [LookupIdentify(PeerInfo(version="v", tcp_port=-1, http_port=2, broadcast_address="b"))],
        id="identify-nonzero-port-is-enough",
    ),
    P(
        identify(
            b'{"version":"v","tcp_port":1,"http_port":2,"broadcast_address":"b","hostname":null}'
        ),
        [LookupIdentify(PeerInfo(version="v", tcp_port=1, http_port=2, broadcast_address="b"))],
        id="identify-null-keeps-default",
    ),
    P(ID + ID, [IDENT, invalid("cannot IDENTIFY again")], id="identify-twice"),
    P(ID + b"IDENTIFY\n", [IDENT, invalid("cannot IDENTIFY again")], id="identify-again-no-body"),
    P(
        b"IDENTIFY\n" + I32.pack(-1),
        [bad_body("IDENTIFY invalid body size -1")],
        id="identify-negative-size",
    ),
    P(
        b"IDENTIFY\n" + I32.pack(MAX_IDENTIFY_BODY_SIZE + 1),
        [
            bad_body(
                f"IDENTIFY body too big {MAX_IDENTIFY_BODY_SIZE + 1} > {MAX_IDENTIFY_BODY_SIZE}"
            )
        ],
        id="identify-too-big",
    ),
    P(identify(b""), [bad_body("IDENTIFY failed to decode JSON body")], id="identify-empty"),
    P(identify(b"{"), [bad_body("IDENTIFY failed to decode JSON body")], id="identify-bad-json"),
    P(identify(b"[]"), [bad_body("IDENTIFY failed to decode JSON body")], id="identify-array"),
    P(
        identify(b'{"version":"v","tcp_port":"1","http_port":2,"broadcast_address":"b"}'),
        [bad_body("IDENTIFY failed to decode JSON body")],
        id="identify-port-as-string",
    ),
    P(
        identify(b'{"version":"v","tcp_port":1.0,"http_port":2,"broadcast_address":"b"}'),
        [bad_body("IDENTIFY failed to decode JSON body")],
        id="identify-port-as-float",
    ),
    P(
        identify(b'{"version":1,"tcp_port":1,"http_port":2,"broadcast_address":"b"}'),
        [bad_body("IDENTIFY failed to decode JSON body")],
        id="identify-version-as-number",
    ),
    P(identify(b"null"), [bad_body("IDENTIFY missing fields")], id="identify-null-body"),
    P(identify(b"{}"), [bad_body("IDENTIFY missing fields")], id="identify-empty-object"),
    P(
        identify(b'{"version":"v","tcp_port":1,"http_port":2}'),
        [bad_body("IDENTIFY missing fields")],
        id="identify-no-broadcast-address",
    ),
    P(
        identify(b'{"version":"v","tcp_port":0,"http_port":2,"broadcast_address":"b"}'),
        [bad_body("IDENTIFY missing fields")],
        id="identify-no-tcp-port",
    ),
    P(
        identify(b'{"version":"v","tcp_port":1,"broadcast_address":"b"}'),
        [bad_body("IDENTIFY missing fields")],
        id="identify-no-http-port",
    ),
    P(
        identify(b'{"version":"","tcp_port":1,"http_port":2,"broadcast_address":"b"}'),
        [bad_body("IDENTIFY missing fields")],
        id="identify-no-version",
    ),
    # -- REGISTER
    P(b"REGISTER t\n", [invalid("client must IDENTIFY")], id="register-needs-identify"),
    P(b"REGISTER\n", [invalid("client must IDENTIFY")], id="identify-checked-before-params"),
    P(ID + b"REGISTER t\n", [IDENT, Register("t")], id="register-topic"),
    P(ID + b"REGISTER t c\n", [IDENT, Register("t", "c")], id="register-channel"),
    P(ID + b"REGISTER t c\r\n", [IDENT, Register("t", "c")], id="register-crlf"),
    P(ID + b"REGISTER t c extra\n", [IDENT, Register("t", "c")], id="register-extra-ignored"),
    P(ID + b"REGISTER t  c\n", [IDENT, Register("t")], id="register-empty-channel-arg"),
    P(
        ID + b"REGISTER t#ephemeral c#ephemeral\n",
        [IDENT, Register("t#ephemeral", "c#ephemeral")],
        id="register-ephemeral",
    ),
    P(
        ID + b"REGISTER " + TOPIC_64 + b"\n",
        [IDENT, Register(TOPIC_64.decode())],
        id="register-topic-64",
    ),
    P(
        ID + b"REGISTER\n",
        [IDENT, invalid("REGISTER insufficient number of params")],
        id="register-no-params",
    ),
    P(
        ID + b"REGISTER \n",
        [IDENT, invalid("REGISTER insufficient number of params")],
        id="register-trailing-space-no-params",
    ),
    P(
        ID + b"REGISTER t!\n",
        [IDENT, fatal("E_BAD_TOPIC", "REGISTER topic name 't!' is not valid")],
        id="register-bad-topic",
    ),
    P(
        ID + b"REGISTER  t\n",
        [IDENT, fatal("E_BAD_TOPIC", "REGISTER topic name '' is not valid")],
        id="register-empty-topic",
    ),
    P(
        ID + b"REGISTER " + TOPIC_64 + b"t\n",
        [IDENT, fatal("E_BAD_TOPIC", f"REGISTER topic name '{'t' * 65}' is not valid")],
        id="register-topic-too-long",
    ),
    P(
        ID + b"REGISTER t\xff\n",
        [IDENT, fatal("E_BAD_TOPIC", "REGISTER topic name 't\udcff' is not valid")],
        id="register-topic-not-utf8",
    ),
    P(
        ID + b'REGISTER "t" c\n',
        [IDENT, fatal("E_BAD_TOPIC", "REGISTER topic name '\"t\"' is not valid")],
        id="register-topic-quoted-raw",
    ),
    P(
        ID + b"REGISTER t! c!\n",
        [IDENT, fatal("E_BAD_TOPIC", "REGISTER topic name 't!' is not valid")],
        id="register-topic-checked-before-channel",
    ),
    P(
        ID + b"REGISTER t c!\n",
        [IDENT, fatal("E_BAD_CHANNEL", "REGISTER channel name 'c!' is not valid")],
        id="register-bad-channel",
    ),
    # -- REGISTER, Youzan partition form
    P(ID + b"REGISTER t 0\n", [IDENT, Register("t", None, 0)], id="register-partition-0"),
    P(ID + b"REGISTER t 254\n", [IDENT, Register("t", None, 254)], id="register-partition-254"),
    P(ID + b"REGISTER t -11\n", [IDENT, Register("t", None, -11)], id="register-partition-old"),
    P(ID + b"REGISTER t +7\n", [IDENT, Register("t", None, 7)], id="register-partition-plus"),
    P(ID + b"REGISTER t 007\n", [IDENT, Register("t", None, 7)], id="register-partition-zeros"),
    P(ID + b"REGISTER t 3 c\n", [IDENT, Register("t", "c", 3)], id="register-partition-channel"),
    P(ID + b"REGISTER t 3  c\n", [IDENT, Register("t", None, 3)], id="register-partition-empty"),
    P(
        ID + b"REGISTER t 3 c x\n",
        [IDENT, Register("t", "c", 3)],
        id="register-partition-extra-ignored",
    ),
    P(
        ID + b"REGISTER t 255\n",
        [IDENT, fatal("E_BAD_PARTITIONID", "REGISTER partition id '255' is not valid")],
        id="register-partition-255",
    ),
    P(
        ID + b"REGISTER t -1\n",
        [IDENT, fatal("E_BAD_PARTITIONID", "REGISTER partition id '-1' is not valid")],
        id="register-partition-negative",
    ),
    P(
        ID + b"REGISTER t 99999999999999999999 c\n",
        [
            IDENT,
            fatal("E_BAD_PARTITIONID", "REGISTER partition id '99999999999999999999' is not valid"),
        ],
        id="register-partition-out-of-int64",
    ),
    P(
        ID + b"REGISTER t " + b"9" * 4000 + b"\n",
        [IDENT, fatal("E_BAD_PARTITIONID", f"REGISTER partition id '{'9' * 4000}' is not valid")],
        id="register-partition-huge-literal",
    ),
    P(
        ID + b"REGISTER t 300 c!\n",
        [IDENT, fatal("E_BAD_CHANNEL", "REGISTER channel name 'c!' is not valid")],
        id="register-channel-checked-before-partition",
    ),
    P(
        ID + b"REGISTER t! 300\n",
        [IDENT, fatal("E_BAD_TOPIC", "REGISTER topic name 't!' is not valid")],
        id="register-topic-checked-before-partition",
    ),
    P(ID + b"REGISTER t 1x\n", [IDENT, Register("t", "1x")], id="register-not-int-is-channel"),
    P(ID + b"REGISTER t - c\n", [IDENT, Register("t", "-")], id="register-sign-alone-is-channel"),
    # -- UNREGISTER
    P(b"UNREGISTER t\n", [invalid("client must IDENTIFY")], id="unregister-needs-identify"),
    P(ID + b"UNREGISTER t\n", [IDENT, Unregister("t")], id="unregister-topic"),
    P(ID + b"UNREGISTER t c\n", [IDENT, Unregister("t", "c")], id="unregister-channel"),
    P(ID + b"UNREGISTER t 5\n", [IDENT, Unregister("t", None, 5)], id="unregister-partition"),
    P(ID + b"UNREGISTER t 5 c\n", [IDENT, Unregister("t", "c", 5)], id="unregister-partition-ch"),
    P(
        ID + b"UNREGISTER\n",
        [IDENT, invalid("UNREGISTER insufficient number of params")],
        id="unregister-no-params",
    ),
    P(
        ID + b"UNREGISTER t.! c\n",
        [IDENT, fatal("E_BAD_TOPIC", "UNREGISTER topic name 't.!' is not valid")],
        id="unregister-bad-topic",
    ),
    P(
        ID + b"UNREGISTER t c\x00\n",
        [IDENT, fatal("E_BAD_CHANNEL", "UNREGISTER channel name 'c\x00' is not valid")],
        id="unregister-bad-channel",
    ),
    P(
        ID + b"UNREGISTER t 256 c\n",
        [IDENT, fatal("E_BAD_PARTITIONID", "UNREGISTER partition id '256' is not valid")],
        id="unregister-bad-partition",
    ),
    # -- a sequence
    P(
        b"PING\n" + ID + b"REGISTER t\nREGISTER t c\nPING\nUNREGISTER t c\nUNREGISTER t\n",
        [
            Ping(),
            IDENT,
            Register("t"),
            Register("t", "c"),
            Ping(),
            Unregister("t", "c"),
            Unregister("t"),
        ],
        id="session",
    ),
]


def _with_trailer(expected: list[LookupEvent]) -> list[LookupEvent]:
    if expected and isinstance(expected[-1], ProtocolError):
        return expected  # every error is fatal: what follows is ignored
    return [*expected, Ping()]


@pytest.mark.parametrize(("data", "expected"), CASES)
def test_command_table(data: bytes, expected: list[LookupEvent]) -> None:
    assert feed(data) == expected
    assert feed_bytewise(data) == expected
    assert feed(data + b"PING\n") == _with_trailer(expected)


def test_error_texts_are_the_exact_reply_bytes() -> None:
    [_, error] = feed(ID + b"REGISTER t\xff\n")
    assert isinstance(error, ProtocolError)
    assert error.data == b"E_BAD_TOPIC REGISTER topic name 't\xff' is not valid"
    assert encode_error_reply(error) == sized(error.data)
    [error] = feed(b"IDENTIFY\n" + I32.pack(-5))
    assert isinstance(error, ProtocolError)
    assert encode_error_reply(error) == sized(b"E_BAD_BODY IDENTIFY invalid body size -5")
    [error] = feed(b"\n")
    assert isinstance(error, ProtocolError)
    assert encode_error_reply(error) == b"\x00\x00\x00\x1aE_INVALID invalid command "


# ---------------------------------------------------------------------- magic, EOF, state


def test_bad_magic_is_a_bare_code_and_closes() -> None:
    conn = LookupServerConnection()
    events = conn.receive_data(b"  V2PING\n")
    assert events == [fatal("E_BAD_PROTOCOL", None)]
    assert isinstance(events[0], ProtocolError)
    assert encode_error_reply(events[0]) == b"\x00\x00\x00\x0eE_BAD_PROTOCOL"
    assert conn.closed
    assert conn.receive_data(b"PING\n") == []
    assert feed_bytewise(b"PING\n", magic=b"V1  ") == [fatal("E_BAD_PROTOCOL", None)]


def test_magic_split_across_receives() -> None:
    assert feed_chunks([b" ", b" V", b"1PI", b"NG\n"]) == [Ping()]


EOF_CASES = [
    P(b"IDENTIFY\n", "IDENTIFY failed to read body size", id="no-size"),
    P(b"IDENTIFY\n\x00\x00", "IDENTIFY failed to read body size", id="half-size"),
    P(b"IDENTIFY\n" + I32.pack(10), "IDENTIFY failed to read body", id="no-body"),
    P(b"IDENTIFY\n" + I32.pack(10) + b"{}", "IDENTIFY failed to read body", id="half-body"),
]


@pytest.mark.parametrize(("data", "description"), EOF_CASES)
def test_eof_mid_identify_sends_the_read_error(data: bytes, description: str) -> None:
    assert feed(data, eof=True) == [bad_body(description)]
    assert feed_bytewise(data, eof=True) == [bad_body(description)]


def test_eof_between_commands_mid_line_or_mid_magic_sends_nothing() -> None:
    assert feed(b"PING\n", eof=True) == [Ping()]
    assert feed(ID + b"REGISTER t", eof=True) == [IDENT]
    assert feed(b"", eof=True) == []
    conn = LookupServerConnection()
    assert conn.receive_data(b"  V") == []
    assert conn.receive_data(b"") == []
    assert conn.closed
    assert conn.receive_data(b"1PING\n") == []


def test_fatal_error_closes_and_later_data_is_ignored() -> None:
    conn = LookupServerConnection()
    assert conn.receive_data(MAGIC_V1 + b"FOO\nPING\n") == [invalid("invalid command FOO")]
    assert conn.closed
    assert conn.receive_data(b"PING\n") == []
    assert conn.receive_data(b"") == []


def test_identified_state_and_peer() -> None:
    conn = LookupServerConnection()
    assert conn.receive_data(MAGIC_V1 + b"PING\n") == [Ping()]
    assert not conn.identified
    assert conn.peer is None
    assert conn.receive_data(ID) == [IDENT]
    assert conn.identified
    assert conn.peer == PEER


def test_identify_body_limit_is_configurable_and_checked_before_the_body() -> None:
    conn = LookupServerConnection(max_identify_body_size=len(PEER_JSON))
    assert conn.receive_data(MAGIC_V1 + ID) == [IDENT]
    small = LookupServerConnection(max_identify_body_size=len(PEER_JSON) - 1)
    expected = bad_body(f"IDENTIFY body too big {len(PEER_JSON)} > {len(PEER_JSON) - 1}")
    assert small.receive_data(MAGIC_V1 + b"IDENTIFY\n" + I32.pack(len(PEER_JSON))) == [expected]


def test_large_identify_body_split_across_receives() -> None:
    padding = b" " * (MAX_IDENTIFY_BODY_SIZE - len(PEER_JSON))
    stream = MAGIC_V1 + identify(PEER_JSON + padding) + b"PING\n"
    chunks = [stream[i : i + 65536] for i in range(0, len(stream), 65536)]
    assert feed_chunks(chunks) == [IDENT, Ping()]


def test_bytearray_and_memoryview_input() -> None:
    conn = LookupServerConnection()
    assert conn.receive_data(bytearray(MAGIC_V1 + b"PING\n")) == [Ping()]
    assert conn.receive_data(memoryview(ID)) == [IDENT]


def test_line_limit_is_configurable() -> None:
    conn = LookupServerConnection(max_line_length=4)
    assert conn.receive_data(MAGIC_V1 + b"PING\nPINGS\n") == [
        Ping(),
        invalid("command line longer than 4 bytes"),
    ]


def test_go_trim_space() -> None:
    assert go_trim_space(b"") == b""
    assert go_trim_space(b" \t\n\v\f\r") == b""
    assert go_trim_space(b"\xc2\x85 a b \xe2\x80\x8a\xc2\xa0") == b"a b"
    assert go_trim_space(b"\x1c a \x1f") == b"\x1c a \x1f"  # Python's isspace, not Go's
    assert go_trim_space(b"\xe2\x80\x8b a") == b"\xe2\x80\x8b a"  # U+200B is not a space
    assert go_trim_space(b"\x80 a \xa0") == b"\x80 a \xa0"  # broken UTF-8 stays
    assert go_trim_space(b"\xe3\x80\x80") == b""


def test_partition_ids() -> None:
    assert all(is_valid_partition_id(p) for p in (0, 1, 254, -11))
    assert not any(is_valid_partition_id(p) for p in (-1, -10, -12, 255, 2**63))


def test_decode_peer_info_directly() -> None:
    assert decode_peer_info(PEER_JSON) == PEER
    assert decode_peer_info(b" null ") == PeerInfo()
    with pytest.raises(ProtocolError) as caught:
        decode_peer_info(b'{"tcp_port":true}')
    assert caught.value == bad_body("IDENTIFY failed to decode JSON body")


# ---------------------------------------------------------------------- reply encoders


def test_reply_encoders_exact_bytes() -> None:
    assert OK_REPLY == b"\x00\x00\x00\x02OK"
    assert encode_reply(b"") == b"\x00\x00\x00\x00"
    assert encode_reply(b"abc") == b"\x00\x00\x00\x03abc"
    assert encode_error_reply(invalid("cannot IDENTIFY again")) == (
        b"\x00\x00\x00\x1fE_INVALID cannot IDENTIFY again"
    )
    assert encode_error_reply(fatal("E_X", "")) == b"\x00\x00\x00\x04E_X "
    body = (
        b'{"tcp_port":4160,"http_port":4161,"version":"1.3.0",'
        b'"broadcast_address":"lookupd.local","hostname":"box"}'
    )
    info = LookupdInfo(
        tcp_port=4160,
        http_port=4161,
        version="1.3.0",
        broadcast_address="lookupd.local",
        hostname="box",
    )
    assert encode_identify_reply(info) == sized(body)
    assert decode_identify_reply(body) == info


# ---------------------------------------------------------------------- client side


ENCODE_CASES = [
    P(Ping(), b"PING\n", id="ping"),
    P(IDENT, b"IDENTIFY\n" + sized(PEER_JSON), id="identify"),
    P(
        LookupIdentify(
            PeerInfo(
                version="v",
                tcp_port=1,
                http_port=2,
                hostname="h",
                broadcast_address="b",
                topology_zone="z",
                topology_region="r",
            )
        ),
        b"IDENTIFY\n"
        + sized(
            b'{"version":"v","tcp_port":1,"http_port":2,"hostname":"h","broadcast_address":"b",'
            b'"topology_zone":"z","topology_region":"r"}'
        ),
        id="identify-topology",
    ),
    P(
        LookupIdentify(PeerInfo("v-HA", 1, 2, "h", "b", distributed_id="127.0.0.1:4150")),
        b"IDENTIFY\n"
        + sized(
            b'{"version":"v-HA","tcp_port":1,"http_port":2,"hostname":"h","broadcast_address":"b",'
            b'"distributed_id":"127.0.0.1:4150"}'
        ),
        id="identify-youzan",
    ),
    P(Register("t"), b"REGISTER t\n", id="register-topic"),
    P(Register("t", "c"), b"REGISTER t c\n", id="register-channel"),
    P(Register("t", None, 0), b"REGISTER t 0\n", id="register-partition"),
    P(Register("t", "c", -11), b"REGISTER t -11 c\n", id="register-partition-channel"),
    P(Unregister("t"), b"UNREGISTER t\n", id="unregister-topic"),
    P(Unregister("t", "c"), b"UNREGISTER t c\n", id="unregister-channel"),
    P(Unregister("t", "c", 254), b"UNREGISTER t 254 c\n", id="unregister-partition-channel"),
]


@pytest.mark.parametrize(("command", "raw"), ENCODE_CASES)
def test_encode_lookup_command_exact_bytes(command: LookupCommand, raw: bytes) -> None:
    assert encode_lookup_command(command) == raw
    if isinstance(command, LookupIdentify):
        assert feed(raw) == [command]
    else:
        assert feed(ID + raw) == [IDENT, command]


@pytest.mark.parametrize(
    "command",
    [
        Register("t t"),
        Register("t\n"),
        Register(""),
        Register("t", ""),
        Register("t", "c c"),
        Register("t", "c", 255),
        Unregister("t", None, -1),
        Unregister("t" * 65),
    ],
    ids=repr,
)
def test_encode_refuses_what_would_make_another_line(command: LookupCommand) -> None:
    with pytest.raises(ValueError, match="invalid"):
        encode_lookup_command(command)


def test_client_splits_replies() -> None:
    stream = OK_REPLY + encode_reply(b"") + encode_reply(b"x" * 100) + OK_REPLY
    conn = LookupClientConnection()
    assert conn.receive_data(stream) == [b"OK", b"", b"x" * 100, b"OK"]
    assert conn.buffered == 0
    bytewise = LookupClientConnection()
    got: list[bytes] = []
    for i in range(len(stream)):
        got += bytewise.receive_data(stream[i : i + 1])
    assert got == [b"OK", b"", b"x" * 100, b"OK"]
    assert bytewise.receive_data(b"") == []
    assert bytewise.closed
    assert bytewise.receive_data(OK_REPLY) == []


def test_client_reply_size_bound() -> None:
    assert DEFAULT_MAX_REPLY_SIZE == 5 * 1024 * 1024
    conn = LookupClientConnection(max_reply_size=2)
    assert conn.receive_data(OK_REPLY) == [b"OK"]
    with pytest.raises(ProtocolError) as caught:
        conn.receive_data(encode_reply(b"abc"))
    assert caught.value == fatal(
        "E_BAD_RESPONSE", "response body size (3) is greater than limit (2)"
    )
    assert conn.closed
    with pytest.raises(ProtocolError) as caught:
        LookupClientConnection().receive_data(I32.pack(-1))
    assert caught.value == fatal("E_BAD_RESPONSE", "invalid response body size -1")


def test_client_error_after_good_reply_is_raised_by_the_next_call() -> None:
    conn = LookupClientConnection(max_reply_size=2)
    assert conn.receive_data(OK_REPLY + encode_reply(b"abc")) == [b"OK"]
    with pytest.raises(ProtocolError, match="greater than limit"):
        conn.receive_data(b"")


def test_client_eof_mid_reply() -> None:
    for partial in (b"\x00", OK_REPLY[:4], OK_REPLY[:5]):
        conn = LookupClientConnection()
        assert conn.receive_data(partial) == []
        assert conn.buffered == len(partial)
        with pytest.raises(ProtocolError) as caught:
            conn.receive_data(b"")
        assert caught.value == fatal("E_BAD_RESPONSE", "connection closed in the middle of a reply")


def test_reply_errors() -> None:
    assert not is_error_reply(b"OK")
    assert not is_error_reply(b'{"tcp_port":1}')
    assert is_error_reply(b"E_INVALID")
    assert reply_error(b"OK") is None
    assert reply_error(b"E_INVALID") == fatal("E_INVALID", None)
    assert reply_error(b"E_BAD_PROTOCOL") == fatal("E_BAD_PROTOCOL", None)
    error = reply_error(b"E_BAD_TOPIC REGISTER topic name 't\xff' is not valid")
    assert error == fatal("E_BAD_TOPIC", "REGISTER topic name 't\udcff' is not valid")
    assert error is not None
    assert error.data == b"E_BAD_TOPIC REGISTER topic name 't\xff' is not valid"


def test_decode_identify_reply() -> None:
    assert decode_identify_reply(b'{"tcp_port":1,"http_port":2,"extra":[]}') == LookupdInfo(1, 2)
    with pytest.raises(ProtocolError) as caught:
        decode_identify_reply(b"E_INVALID")
    assert caught.value == fatal("E_INVALID", None)
    for bad in (b"OK", b"[]", b'{"tcp_port":"1"}'):
        with pytest.raises(ProtocolError) as caught:
            decode_identify_reply(bad)
        assert caught.value.code == "E_BAD_RESPONSE"


# ---------------------------------------------------------------------- properties

_NAME_CHARS = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789._-"
names = st.builds(
    lambda stem, ephemeral: stem + ("#ephemeral" if ephemeral else ""),
    st.text(_NAME_CHARS, min_size=1, max_size=54),
    st.booleans(),
)


def _looks_like_int(name: str) -> bool:
    digits = name[1:] if name[:1] in "+-" else name
    return digits.isdigit()


plain_channels = names.filter(lambda name: not _looks_like_int(name))
partitions = st.one_of(st.integers(0, 254), st.just(-11))
texts = st.text(st.characters(codec="utf-8"), max_size=20)
nonzero_ports = st.integers(-(2**63), 2**63 - 1).filter(lambda port: port != 0)
peers = st.builds(
    PeerInfo,
    version=texts.filter(bool),
    tcp_port=nonzero_ports,
    http_port=nonzero_ports,
    hostname=texts,
    broadcast_address=texts.filter(bool),
    topology_zone=texts,
    topology_region=texts,
    distributed_id=texts,
)


@st.composite
def registrations(draw: st.DrawFn) -> Register | Unregister:
    register = draw(st.booleans())
    topic = draw(names)
    partition = draw(st.none() | partitions)
    channel_names = names if partition is not None else plain_channels
    channel = draw(st.none() | channel_names)
    if register:
        return Register(topic, channel, partition)
    return Unregister(topic, channel, partition)


non_identify = st.one_of(st.just(Ping()), registrations())


@st.composite
def sessions(draw: st.DrawFn) -> list[LookupCommand]:
    """PINGs, then IDENTIFY, then any mix of PING/REGISTER/UNREGISTER."""
    pings: list[LookupCommand] = [Ping()] * draw(st.integers(0, 2))
    rest = draw(st.lists(non_identify, max_size=12))
    return [*pings, LookupIdentify(draw(peers)), *rest]


def split(stream: bytes, cuts: list[int]) -> list[bytes]:
    """``stream`` cut at ``cuts``, without empty pieces (``b""`` would be EOF)."""
    points = [0, *sorted(set(cuts)), len(stream)]
    return [stream[a:b] for a, b in itertools.pairwise(points) if b > a]


def cuts_for(length: int) -> st.SearchStrategy[list[int]]:
    return st.lists(st.integers(0, length), max_size=12)


def assert_well_formed(events: list[LookupEvent]) -> None:
    """Only commands and ProtocolErrors; an error (always fatal) comes last."""
    for index, event in enumerate(events):
        if isinstance(event, ProtocolError):
            assert event.fatal
            assert index == len(events) - 1, f"events after {event!r}: {events}"
        else:
            assert isinstance(event, LookupIdentify | Register | Unregister | Ping)


@MORE
@given(peer=peers)
def test_identify_round_trips(peer: PeerInfo) -> None:
    command = LookupIdentify(peer)
    conn = LookupServerConnection()
    assert conn.receive_data(MAGIC_V1 + encode_lookup_command(command)) == [command]
    assert conn.peer == peer
    assert conn.receive_data(b"") == []


@MORE
@given(command=non_identify)
def test_server_decodes_what_the_client_encodes(command: LookupCommand) -> None:
    conn = LookupServerConnection()
    assert conn.receive_data(MAGIC_V1 + ID + encode_lookup_command(command)) == [IDENT, command]
    assert not conn.closed


@MORE
@given(commands=sessions(), data=st.data())
def test_chunking_does_not_change_events(
    commands: list[LookupCommand], data: st.DataObject
) -> None:
    stream = MAGIC_V1 + b"".join(encode_lookup_command(c) for c in commands)
    assert feed_chunks([stream]) == commands
    chunks = split(stream, data.draw(cuts_for(len(stream))))
    assert feed_chunks(chunks, eof=True) == commands


@FAST
@given(commands=sessions())
def test_byte_by_byte(commands: list[LookupCommand]) -> None:
    stream = b"".join(encode_lookup_command(c) for c in commands)
    assert feed_bytewise(stream) == commands


FRAGMENTS = st.sampled_from(
    [
        b"\n",
        b" ",
        b"\r\n",
        b"PING",
        b"IDENTIFY",
        b"REGISTER",
        b"UNREGISTER",
        b"t",
        b"c",
        b"7",
        b"-11",
        b"300",
        b"\x00\x00\x00\x02",
        b"\xff\xff\xff\xff",
        b"\x00\x00\x00\x00",
        PEER_JSON,
        b"{}",
        b"\xc2\xa0",
        b"\xe2\x80",
        ID,
    ]
)
garbage = st.one_of(
    st.binary(max_size=200),
    st.lists(st.one_of(FRAGMENTS, st.binary(max_size=8)), max_size=30).map(b"".join),
)


@MORE
@given(prefix=st.sampled_from([b"", ID]), tail=garbage, eof=st.booleans(), data=st.data())
def test_arbitrary_bytes_never_raise(
    prefix: bytes, tail: bytes, eof: bool, data: st.DataObject
) -> None:
    stream = MAGIC_V1 + prefix + tail
    whole = feed_chunks([stream], eof=eof)  # must not raise
    assert_well_formed(whole)
    chunks = split(stream, data.draw(cuts_for(len(stream))))
    assert feed_chunks(chunks, eof=eof) == whole


@FAST
@given(replies=st.lists(st.binary(max_size=64), max_size=10), data=st.data())
def test_client_chunking_does_not_change_replies(replies: list[bytes], data: st.DataObject) -> None:
    stream = b"".join(encode_reply(r) for r in replies)
    conn = LookupClientConnection()
    got: list[bytes] = []
    for chunk in split(stream, data.draw(cuts_for(len(stream)))):
        got += conn.receive_data(chunk)
    assert got == replies
    assert conn.receive_data(b"") == []


@FAST
@given(raw=st.binary(max_size=100), data=st.data())
def test_client_arbitrary_bytes_raise_only_protocol_errors(raw: bytes, data: st.DataObject) -> None:
    conn = LookupClientConnection(max_reply_size=64)
    codes: list[str] = []
    try:
        for chunk in [*split(raw, data.draw(cuts_for(len(raw)))), b""]:
            conn.receive_data(chunk)
    except ProtocolError as error:
        codes.append(error.code)
    assert codes in ([], ["E_BAD_RESPONSE"])
