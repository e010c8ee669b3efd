"""Table tests for the client side: the exact bytes of every command, and the frame
decoder fed whole, one byte per call, and followed by the start of another frame."""

from __future__ import annotations

import struct
from typing import TYPE_CHECKING

import pytest

from trionsq.protocol import (
    CLOSE_WAIT_FRAME,
    HEARTBEAT_FRAME,
    MAGIC_V2,
    OK_FRAME,
    Auth,
    Cls,
    Dpub,
    ExtMessage,
    Fin,
    IdentifyRequest,
    InternalCreateTopic,
    Message,
    Mpub,
    MpubExt,
    MpubTrace,
    Nop,
    OffsetSpec,
    ProtocolError,
    Pub,
    PubExt,
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
    binary_id,
    encode_message,
    encode_message_frame,
    error_frame,
    hex_id,
    response_frame,
    traced_reply,
    traced_reply_frame,
)
from trionsq.protocol import client as client_module
from trionsq.protocol.client import (
    DEFAULT_MAX_FRAME_SIZE,
    NON_FATAL_ERROR_CODES,
    ClientConnection,
    ErrorReply,
    MessageFrame,
    Response,
    TracedReply,
    decode_error_reply,
    decode_traced_reply,
    encode_command,
    encode_commands,
    encode_identify,
    is_fatal_error_code,
)
from trionsq.protocol.frames import frame

from .strategies import identify_event
from .wire import ext_part, mpub_body, sized

if TYPE_CHECKING:
    from trionsq.protocol import Command
    from trionsq.protocol.client import Frame

ID = b"0123456789abcdef"
BIN = binary_id(0x0A0B, 0x20)  # contains neither space nor newline
Q = struct.Struct(">Q")
P = pytest.param

# ---------------------------------------------------------------------- encode_command

ENCODE_CASES = [
    P(
        identify_event(IdentifyRequest()),
        b"IDENTIFY\n" + sized(b"{}"),
        id="identify-defaults",
    ),
    P(
        identify_event(
            IdentifyRequest(client_id="c", heartbeat_interval=1000, extend_support=True)
        ),
        b"IDENTIFY\n" + sized(b'{"client_id":"c","heartbeat_interval":1000,"extend_support":true}'),
        id="identify-fields",
    ),
    P(Auth(b"s3cr3t"), b"AUTH\n" + sized(b"s3cr3t"), id="auth"),
    P(Sub("t", "c"), b"SUB t c\n", id="sub"),
    P(Sub("t#ephemeral", "c#ephemeral"), b"SUB t#ephemeral c#ephemeral\n", id="sub-ephemeral"),
    P(Sub("t", "c", 0), b"SUB t c 0\n", id="sub-partition-0"),
    P(Sub("t", "c", 12), b"SUB t c 12\n", id="sub-partition"),
    P(SubOrdered("t", "c"), b"SUB_ORDERED t c\n", id="sub-ordered"),
    P(SubOrdered("t", "c", 3), b"SUB_ORDERED t c 3\n", id="sub-ordered-partition"),
    P(SubAdvanced("t", "c"), b"SUB_ADVANCED t c\n", id="sub-advanced"),
    P(SubAdvanced("t", "c", 2), b"SUB_ADVANCED t c 2\n", id="sub-advanced-partition"),
    P(
        SubAdvanced("t", "c", 2, OffsetSpec("timestamp", 1700000000)),
        b"SUB_ADVANCED t c 2 timestamp:1700000000\n",
        id="sub-advanced-offset",
    ),
    P(
        SubAdvanced("t", "c", None, OffsetSpec("special", -1)),
        b"SUB_ADVANCED t c -1 special:-1\n",
        id="sub-advanced-offset-default-partition",
    ),
    P(
        SubAdvanced("t", "c", 0, OffsetSpec("virtual_queue", 0)),
        b"SUB_ADVANCED t c 0 virtual_queue:0\n",
        id="sub-advanced-virtual-queue",
    ),
    P(
        SubAdvanced("t", "c", 1, OffsetSpec("msgcount", 42)),
        b"SUB_ADVANCED t c 1 msgcount:42\n",
        id="sub-advanced-msgcount",
    ),
    P(Pub("t", b"hello"), b"PUB t\n" + sized(b"hello"), id="pub"),
    P(Pub("t", b"a\nb c", 1), b"PUB t 1\n" + sized(b"a\nb c"), id="pub-partition"),
    P(Mpub("t", (b"a", b"bc")), b"MPUB t\n" + mpub_body(b"a", b"bc"), id="mpub"),
    P(
        Mpub("t", (b"a",)),
        b"MPUB t\n\x00\x00\x00\x09\x00\x00\x00\x01\x00\x00\x00\x01a",
        id="mpub-literal",
    ),
    P(Mpub("t", (b"x",), 4), b"MPUB t 4\n" + mpub_body(b"x"), id="mpub-partition"),
    P(Dpub("t", 1500, b"later"), b"DPUB t 1500\n" + sized(b"later"), id="dpub"),
    P(Dpub("t", 0, b"now"), b"DPUB t 0\n" + sized(b"now"), id="dpub-zero"),
    P(
        PubTrace("t", 99, b"body"),
        b"PUB_TRACE t\n" + sized(Q.pack(99) + b"body"),
        id="pub-trace",
    ),
    P(
        PubTrace("t", 2**64 - 1, b"b", 0),
        b"PUB_TRACE t 0\n" + sized(b"\xff" * 8 + b"b"),
        id="pub-trace-partition",
    ),
    P(
        MpubTrace("t", (TracedMessage(1, b"a"), TracedMessage(2, b"bb"))),
        b"MPUB_TRACE t\n" + mpub_body(Q.pack(1) + b"a", Q.pack(2) + b"bb"),
        id="mpub-trace",
    ),
    P(
        MpubTrace("t", (TracedMessage(0, b"a"),), 7),
        b"MPUB_TRACE t 7\n" + mpub_body(Q.pack(0) + b"a"),
        id="mpub-trace-partition",
    ),
    P(
        PubExt("t", ExtMessage(b'{"##trace_id":"5"}', b"body")),
        b"PUB_EXT t\n" + sized(ext_part(b'{"##trace_id":"5"}', b"body")),
        id="pub-ext",
    ),
    P(
        PubExt("t", ExtMessage(b"{}", b"b"), 3),
        b"PUB_EXT t 3\n" + sized(b"\x00\x02{}b"),
        id="pub-ext-partition",
    ),
    P(
        MpubExt("t", (ExtMessage(b"{}", b"a"), ExtMessage(b'{"k":1}', b"b"))),
        b"MPUB_EXT t\n" + mpub_body(ext_part(b"{}", b"a"), ext_part(b'{"k":1}', b"b")),
        id="mpub-ext",
    ),
    P(
        MpubExt("t", (ExtMessage(b"{}", b"a"),), 1),
        b"MPUB_EXT t 1\n" + mpub_body(ext_part(b"{}", b"a")),
        id="mpub-ext-partition",
    ),
    P(Rdy(0), b"RDY 0\n", id="rdy-0"),
    P(Rdy(2500), b"RDY 2500\n", id="rdy"),
    P(Pull(100), b"PULL 100\n", id="pull"),
    P(Fin(ID), b"FIN 0123456789abcdef\n", id="fin"),
    P(Fin(b"\n" * 16), b"FIN " + b"\n" * 16 + b"\n", id="fin-binary-newlines"),
    P(Req(ID, 0), b"REQ 0123456789abcdef 0\n", id="req"),
    P(Req(BIN, 60000), b"REQ " + BIN + b" 60000\n", id="req-binary"),
    P(Touch(ID), b"TOUCH 0123456789abcdef\n", id="touch"),
    P(Cls(), b"CLS\n", id="cls"),
    P(Nop(), b"NOP\n", id="nop"),
    P(InternalCreateTopic("t", 0), b"INTERNAL_CREATE_TOPIC t 0\n", id="create-topic"),
    P(
        InternalCreateTopic("t", 3, ext=True),
        b"INTERNAL_CREATE_TOPIC t 3 true\n",
        id="create-topic-ext",
    ),
]


@pytest.mark.parametrize(("command", "wire"), ENCODE_CASES)
def test_encode_command(command: Command, wire: bytes) -> None:
    assert encode_command(command) == wire


def test_every_command_class_has_a_table_case() -> None:
    covered = {type(p.values[0]) for p in ENCODE_CASES}
    assert covered == set(client_module._ENCODERS)


def test_encode_commands_joins() -> None:
    cmds: list[Command] = [Nop(), Rdy(1), Pub("t", b"x")]
    assert encode_commands(cmds) == b"NOP\nRDY 1\nPUB t\n\x00\x00\x00\x01x"
    assert encode_commands([]) == b""


def test_encode_identify_matches_the_command() -> None:
    request = IdentifyRequest(feature_negotiation=True, user_agent="trionsq/0.1")
    assert encode_identify(request) == encode_command(identify_event(request))


def test_magic_is_reexported() -> None:
    assert client_module.MAGIC_V2 == MAGIC_V2 == b"  V2"


@pytest.mark.parametrize(
    "command",
    [Sub("a b", "c"), Sub("t", "c\n"), Pub("t t", b"x"), Dpub("t\n", 1, b"x")],
    ids=["space-topic", "newline-channel", "space-pub", "newline-dpub"],
)
def test_names_that_would_split_the_line_are_refused(command: Command) -> None:
    with pytest.raises(ValueError, match="space or newline"):
        encode_command(command)


def test_ext_header_too_long_is_refused() -> None:
    with pytest.raises(ValueError, match="uint16"):
        encode_command(PubExt("t", ExtMessage(b" " * 65536, b"b")))


def test_not_a_command_is_a_type_error() -> None:
    with pytest.raises(TypeError, match="not a command"):
        encode_command(object())  # type: ignore[arg-type]


@pytest.mark.parametrize(("command", "wire"), ENCODE_CASES)
def test_the_server_reads_the_table_back(command: Command, wire: bytes) -> None:
    """Each case on a fresh connection, in the state its command needs."""
    settings = ServerSettings(auth_enabled=isinstance(command, Auth))
    prefix: list[Command] = []
    if isinstance(command, Rdy | Pull | Fin | Req | Touch | Cls):
        # binary ids with a newline need binary-id mode: a SUB with a partition
        prefix.append(Sub("t", "c", 0) if b"\n" in wire[4:-1] or BIN in wire else Sub("t", "c"))
    conn = ServerConnection(settings)
    assert conn.receive_data(MAGIC_V2 + encode_commands(prefix) + wire) == [*prefix, command]


# ---------------------------------------------------------------------- frame decoder

PLAIN = Message(1_700_000_000_000_000_000, 1, hex_id(0xABC), b"body")
EXT = Message(5, 2, BIN, b"b", ext_version=4, ext=b'{"k":"v"}')
DETAIL = Message(5, 3, BIN, b"b", offset=1024, raw_size=40)
BOTH = Message(5, 4, BIN, b"", ext_version=2, ext=b"tag", offset=0, raw_size=30)
EXT_NONE = Message(5, 1, BIN, b"xyz")

FRAME_CASES = [
    P(OK_FRAME, [Response(b"OK")], False, False, id="ok"),
    P(HEARTBEAT_FRAME, [Response(b"_heartbeat_")], False, False, id="heartbeat"),
    P(CLOSE_WAIT_FRAME, [Response(b"CLOSE_WAIT")], False, False, id="close-wait"),
    P(response_frame(b""), [Response(b"")], False, False, id="empty-response"),
    P(
        response_frame(b'{"max_rdy_count":2500}'),
        [Response(b'{"max_rdy_count":2500}')],
        False,
        False,
        id="json",
    ),
    P(
        traced_reply_frame(2, 99, 32, 38),
        [Response(traced_reply(2, 99, 32, 38))],
        False,
        False,
        id="traced",
    ),
    P(
        error_frame(ProtocolError("E_INVALID", "invalid command FOO")),
        [ErrorReply(ProtocolError("E_INVALID", "invalid command FOO"))],
        False,
        False,
        id="error",
    ),
    P(
        frame(1, b"E_BAD_PROTOCOL"),
        [ErrorReply(ProtocolError("E_BAD_PROTOCOL", None))],
        False,
        False,
        id="bare-code",
    ),
    P(
        frame(1, b"E_TOPIC_NOT_EXIST "),
        [ErrorReply(ProtocolError("E_TOPIC_NOT_EXIST", ""))],
        False,
        False,
        id="empty-description",
    ),
    P(
        frame(1, b"E_FIN_FAILED FIN 0123456789abcdef failed ID not in flight"),
        [
            ErrorReply(
                ProtocolError(
                    "E_FIN_FAILED", "FIN 0123456789abcdef failed ID not in flight", fatal=False
                )
            )
        ],
        False,
        False,
        id="non-fatal",
    ),
    P(
        encode_message_frame(PLAIN.timestamp, PLAIN.attempts, PLAIN.id, PLAIN.body),
        [MessageFrame(PLAIN)],
        False,
        False,
        id="plain-message",
    ),
    P(
        frame(2, encode_message(EXT, extended=True)),
        [MessageFrame(EXT)],
        True,
        False,
        id="extended",
    ),
    P(
        frame(2, encode_message(EXT_NONE, extended=True)),
        [MessageFrame(EXT_NONE)],
        True,
        False,
        id="extended-version-0",
    ),
    P(
        frame(2, encode_message(DETAIL, detail=True)),
        [MessageFrame(DETAIL)],
        False,
        True,
        id="detail",
    ),
    P(
        frame(2, encode_message(BOTH, extended=True, detail=True)),
        [MessageFrame(BOTH)],
        True,
        True,
        id="extended-and-detail",
    ),
    P(
        OK_FRAME + HEARTBEAT_FRAME + frame(2, encode_message(PLAIN)) + CLOSE_WAIT_FRAME,
        [Response(b"OK"), Response(b"_heartbeat_"), MessageFrame(PLAIN), Response(b"CLOSE_WAIT")],
        False,
        False,
        id="several",
    ),
]


def _collect(conn: ClientConnection, chunks: list[bytes]) -> list[Frame]:
    frames: list[Frame] = []
    for chunk in chunks:
        frames += conn.receive_data(chunk)
    return frames


@pytest.mark.parametrize(("data", "expected", "extended", "detail"), FRAME_CASES)
def test_frames(data: bytes, expected: list[Frame], extended: bool, detail: bool) -> None:
    whole = ClientConnection(extended=extended, detail=detail)
    assert whole.receive_data(data) == expected
    assert whole.buffered == 0
    assert whole.receive_data(b"") == []

    bytewise = ClientConnection(extended=extended, detail=detail)
    assert _collect(bytewise, [data[i : i + 1] for i in range(len(data))]) == expected

    trailing = ClientConnection(extended=extended, detail=detail)
    assert trailing.receive_data(data + OK_FRAME[:5]) == expected
    assert trailing.buffered == 5
    assert trailing.receive_data(OK_FRAME[5:]) == [Response(b"OK")]

    as_bytearray = ClientConnection(extended=extended, detail=detail)
    got = as_bytearray.receive_data(bytearray(data))
    assert got == expected
    for f in got:
        payload = f.data if isinstance(f, Response) else None
        assert payload is None or type(payload) is bytes


def test_response_helpers() -> None:
    assert Response(b"OK").is_ok
    assert not Response(b"OK").is_heartbeat
    assert Response(b"_heartbeat_").is_heartbeat
    assert Response(b"CLOSE_WAIT").is_close_wait
    assert not Response(b"CLOSE_WAIT").is_ok
    traced = Response(traced_reply(1, 2, 3, 4))
    assert traced.is_traced
    assert not traced.is_ok
    assert traced.traced() == TracedReply(1, 2, 3, 4)
    assert not Response(b"OK").is_traced
    assert not Response(b"x" * 30).is_traced


def test_layout_can_change_between_frames() -> None:
    conn = ClientConnection()
    assert conn.receive_data(OK_FRAME) == [Response(b"OK")]
    conn.detail = True
    assert conn.receive_data(frame(2, encode_message(DETAIL, detail=True))) == [
        MessageFrame(DETAIL)
    ]
    conn.extended = True
    assert conn.receive_data(frame(2, encode_message(BOTH, extended=True, detail=True))) == [
        MessageFrame(BOTH)
    ]


# ---------------------------------------------------------------------- errors


@pytest.mark.parametrize(
    ("data", "code", "description"),
    [
        (b"E_INVALID cannot SUB in current state", "E_INVALID", "cannot SUB in current state"),
        (b"E_BAD_PROTOCOL", "E_BAD_PROTOCOL", None),
        (b"E_TOPIC_NOT_EXIST ", "E_TOPIC_NOT_EXIST", ""),
        (b"E_X  two  spaces ", "E_X", " two  spaces "),
        (b"", "", None),
        (b"too much client connections", "too", "much client connections"),
        (b"E_BAD \xff\xfe", "E_BAD", "\udcff\udcfe"),
    ],
)
def test_error_reply_split(data: bytes, code: str, description: str | None) -> None:
    error = decode_error_reply(data)
    assert (error.code, error.description) == (code, description)
    assert error.data == data


@pytest.mark.parametrize(
    "code",
    [
        "E_FIN_FAILED",
        "E_REQ_FAILED",
        "E_TOUCH_FAILED",
        "E_EXT_NOT_SUPPORT",
        "E_INVALID_JSON_HEADER",
        "INVALID_TRACE_ID",
        "E_CREATE_TOPIC_FAILED",
        "E_PUB_FAILED",
        "E_MPUB_FAILED",
        "E_FAILED_ON_NOT_LEADER",
        "E_FAILED_ON_NOT_WRITABLE",
        "E_DPUB_FAILED",  # trionsq's rate-limited DPUB keeps the connection
    ],
)
def test_non_fatal_codes(code: str) -> None:
    assert not is_fatal_error_code(code)
    assert code in NON_FATAL_ERROR_CODES
    reply = ClientConnection().receive_data(frame(1, code.encode() + b" x"))
    assert reply == [ErrorReply(ProtocolError(code, "x", fatal=False))]
    assert isinstance(reply[0], ErrorReply)
    assert not reply[0].fatal
    assert reply[0].code == code


@pytest.mark.parametrize(
    "code",
    [
        "E_INVALID",
        "E_BAD_BODY",
        "E_BAD_TOPIC",
        "E_BAD_CHANNEL",
        "E_BAD_MESSAGE",
        "E_BAD_PROTOCOL",
        "E_IDENTIFY_FAILED",
        "E_AUTH_FAILED",
        "E_AUTH_FIRST",
        "E_UNAUTHORIZED",
        "E_AUTH_DISABLED",
        "E_SUB_FAILED",
        "E_TOPIC_NOT_EXIST",
        "E_BAD_PARTITION",
        "E_SUB_ORDER_IS_MUST",
        "E_SUB_EXTEND_NEED",
        "E_SUB_EXTEND_FORBIDDON",
        "E_SUB_CHANNEL_NOT_REGISTERED",
        "E_PUB_TOO_MUCH_WAITING",
        "E_BAD_EXT",
        "E_SOMETHING_NEW",
    ],
)
def test_fatal_codes(code: str) -> None:
    assert is_fatal_error_code(code)
    (reply,) = ClientConnection().receive_data(frame(1, code.encode() + b" x"))
    assert isinstance(reply, ErrorReply)
    assert reply.fatal


def test_server_errors_read_back_as_sent() -> None:
    from trionsq.protocol import broker_errors as be

    for error in [
        be.fin_failed(ID, be.NOT_IN_FLIGHT),
        be.req_failed(BIN, be.NOT_OWNER),
        be.touch_failed(ID, be.NOT_IN_FLIGHT),
        be.topic_not_exist(),
        be.ext_not_supported("t"),
        be.pub_failed("PUB", "disk full", youzan=True),
        be.create_topic_failed("coordinator enabled"),
        be.sub_order_is_must(),
        be.failed_on_not_leader(fatal=False),
    ]:
        assert ClientConnection().receive_data(error_frame(error)) == [ErrorReply(error)]


@pytest.mark.parametrize(
    ("data", "message"),
    [
        (struct.pack(">Ii", 3, 0), "frame size 3 < 4"),
        (
            struct.pack(">I", DEFAULT_MAX_FRAME_SIZE + 1),
            f"frame size {DEFAULT_MAX_FRAME_SIZE + 1} >",
        ),
        (struct.pack(">I", 0xFFFFFFFF), "frame size 4294967295 >"),
        (frame(3, b"x"), "unknown frame type 3"),
        (frame(-1, b""), "unknown frame type -1"),
        (frame(2, b"x" * 25), "message too short"),
    ],
    ids=["size-under-4", "size-over-max", "size-huge", "type-3", "type-negative", "short-message"],
)
def test_broken_frames_raise(data: bytes, message: str) -> None:
    conn = ClientConnection()
    with pytest.raises(ProtocolError, match=message) as caught:
        conn.receive_data(data)
    assert caught.value.fatal
    assert conn.error == caught.value
    assert conn.closed
    with pytest.raises(ProtocolError, match=message):
        conn.receive_data(OK_FRAME)


def test_size_is_checked_before_the_frame_arrives() -> None:
    conn = ClientConnection(max_frame_size=100)
    assert conn.receive_data(struct.pack(">I", 100)) == []
    assert conn.receive_data(b"\x00\x00\x00\x00" + b"x" * 50) == []
    other = ClientConnection(max_frame_size=100)
    with pytest.raises(ProtocolError, match="frame size 101 > 100"):
        other.receive_data(struct.pack(">I", 101))


def test_frames_before_a_broken_one_come_first() -> None:
    conn = ClientConnection()
    assert conn.receive_data(OK_FRAME + frame(9, b"")) == [Response(b"OK")]
    assert conn.error is not None
    with pytest.raises(ProtocolError, match="unknown frame type 9"):
        conn.receive_data(OK_FRAME)


def test_message_in_the_wrong_layout_is_an_error() -> None:
    conn = ClientConnection(detail=True)
    with pytest.raises(ProtocolError) as caught:
        conn.receive_data(encode_message_frame(1, 1, ID, b"short"))
    assert caught.value.code == "E_BAD_MESSAGE"


def test_eof_inside_a_frame() -> None:
    conn = ClientConnection()
    assert conn.receive_data(OK_FRAME[:3]) == []
    with pytest.raises(ProtocolError, match="EOF inside a frame"):
        conn.receive_data(b"")
    clean = ClientConnection()
    assert clean.receive_data(OK_FRAME) == [Response(b"OK")]
    assert clean.receive_data(b"") == []
    assert clean.closed
    assert clean.receive_data(OK_FRAME) == []


def test_big_frame_in_many_chunks_is_linear() -> None:
    body = b"x" * 200_000
    data = encode_message_frame(1, 1, ID, body)
    conn = ClientConnection()
    frames: list[Frame] = []
    for i in range(0, len(data), 100):
        frames += conn.receive_data(data[i : i + 100])
    assert frames == [MessageFrame(Message(1, 1, ID, body))]


# ---------------------------------------------------------------------- traced replies


def test_traced_reply_example_from_the_spec() -> None:
    data = bytes.fromhex("4f4b00000000000000020a200a200a200a20000000000000002000000026")
    assert decode_traced_reply(data) == TracedReply(2, 0x0A200A200A200A20, 32, 38)


def test_traced_reply_round_trips_extremes() -> None:
    values = (2**64 - 1, 0, 2**64 - 1, 2**32 - 1)
    assert decode_traced_reply(traced_reply(*values)) == TracedReply(*values)


@pytest.mark.parametrize(
    "data",
    [b"OK", b"OK" + b"\x00" * 27, b"OK" + b"\x00" * 29, b"NO" + b"\x00" * 28, b""],
    ids=["ok", "short", "long", "not-ok", "empty"],
)
def test_not_a_traced_reply(data: bytes) -> None:
    with pytest.raises(ProtocolError) as caught:
        decode_traced_reply(data)
    assert caught.value.code == "E_BAD_RESPONSE"
