"""Properties of the protocol codecs: the client encoder and the server state machine
agree on every command, both message layouts round-trip, chunking never changes a
parse, and no input makes either side raise anything but the protocol's own error.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from trionsq.protocol import (
    MAGIC_V2,
    Command,
    Dpub,
    Fin,
    Identify,
    Message,
    ProtocolError,
    Pull,
    Rdy,
    ServerConnection,
    ServerSettings,
    Sub,
    Touch,
    decode_message,
    encode_message,
    encode_message_frame,
    response_frame,
)
from trionsq.protocol.client import (
    ClientConnection,
    ErrorReply,
    MessageFrame,
    Response,
    encode_command,
    encode_commands,
)
from trionsq.protocol.commands import FinMany
from trionsq.protocol.frames import FRAME_TYPE_ERROR, FRAME_TYPE_MESSAGE, frame
from trionsq.protocol.strconv import to_int64

from . import strategies as s
from .wire import fatal, feed, sized

if TYPE_CHECKING:
    from trionsq.protocol.client import Frame
    from trionsq.protocol.server import Event

FAST = settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
MORE = settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])

COMMAND_TYPES = sorted(s.COMMAND_CASES, key=lambda t: t.__name__)
SMALL_LIMITS = ServerSettings(
    max_line_length=64, max_msg_size=200, max_body_size=600, max_rdy_count=10
)


def feed_chunks(conn: ServerConnection, chunks: list[bytes]) -> list[Event]:
    events: list[Event] = []
    for chunk in chunks:
        events += conn.receive_data(chunk)
    return events


def assert_well_formed(events: list[Event]) -> None:
    """Only commands and ProtocolErrors, and nothing after a fatal error."""
    for index, event in enumerate(events):
        if isinstance(event, ProtocolError):
            if event.fatal:
                assert index == len(events) - 1, f"events after fatal {event!r}: {events}"
        else:
            assert isinstance(event, Command)


# ---------------------------------------------------------------------- numbers


@MORE
@given(
    value=st.one_of(st.integers(0, 4000), st.integers(0, 3_700_000), st.integers(0, 10**45)),
    zeros=st.integers(0, 3),
)
def test_pull_and_dpub_read_their_number_exactly_and_quote_it(value: int, zeros: int) -> None:
    """PULL and DPUB take the number as sent: one past 2**64 is out of range, never
    wrapped into it, and the error quotes it (nsqd's ``%d`` form, without the wrap);
    RDY keeps nsqd's own reading (uint64, then int64), byte for byte."""
    sent = b"0" * zeros + str(value).encode()
    limits = ServerSettings()
    max_count, max_ms = limits.max_rdy_count, limits.max_req_timeout_ms
    pull = feed(b"SUB t c\nPULL " + sent + b"\n")
    if value <= max_count:
        assert pull == [Sub("t", "c"), Pull(value)]
    else:
        assert pull == [
            Sub("t", "c"),
            fatal("E_INVALID", f"PULL count {value} out of range 0-{max_count}"),
        ]
    dpub = feed(b"DPUB t " + sent + b"\n" + sized(b"x"))
    if value <= max_ms:
        assert dpub == [Dpub("t", value, b"x")]
    else:
        assert dpub == [fatal("E_INVALID", f"DPUB timeout {value} out of range 0-{max_ms}")]
    rdy = feed(b"SUB t c\nRDY " + sent + b"\n")
    as_go = to_int64(value % 2**64)
    if 0 <= as_go <= max_count:
        assert rdy == [Sub("t", "c"), Rdy(as_go)]
    else:
        assert rdy[-1] == fatal("E_INVALID", f"RDY count {as_go} out of range 0-{max_count}")


# ---------------------------------------------------------------------- encode/decode


@pytest.mark.parametrize("command_type", COMMAND_TYPES, ids=lambda t: t.__name__)
@FAST
@given(data=st.data())
def test_server_decodes_what_the_client_encodes(command_type: type, data: st.DataObject) -> None:
    case = data.draw(s.COMMAND_CASES[command_type])
    assert type(case.command) is command_type
    conn = ServerConnection(case.settings)
    events = conn.receive_data(case.stream)
    assert events == case.events
    assert not conn.closed
    assert conn.receive_data(b"") == []  # nothing left half-read


@MORE
@given(scenario=s.scenarios())
def test_whole_sequence_in_one_receive_gives_every_event(scenario: s.Scenario) -> None:
    conn = ServerConnection(scenario.settings)
    assert conn.receive_data(scenario.stream) == list(scenario.events)
    assert not conn.closed


@FAST
@given(commands=st.lists(s.stateless, min_size=10, max_size=60))
def test_many_commands_in_one_receive(commands: list[Command]) -> None:
    conn = ServerConnection()
    assert conn.receive_data(MAGIC_V2 + encode_commands(commands)) == commands


# ---------------------------------------------------------------------- message layouts


@MORE
@given(layout=s.layouts, data=st.data())
def test_message_layouts_round_trip(layout: tuple[bool, bool], data: st.DataObject) -> None:
    extended, detail = layout
    message = data.draw(s.messages(extended=extended, detail=detail))
    encoded = encode_message(message, extended=extended, detail=detail)
    assert decode_message(encoded, extended=extended, detail=detail) == message
    if not extended:
        assert message.ext_version == 0
        assert message.ext == b""
    if detail:
        assert message.offset is not None
        assert message.raw_size is not None
    conn = ClientConnection(extended=extended, detail=detail)
    assert conn.receive_data(frame(FRAME_TYPE_MESSAGE, encoded)) == [MessageFrame(message)]


@MORE
@given(message=s.messages())
def test_plain_message_frame_round_trips(message: Message) -> None:
    raw = encode_message_frame(message.timestamp, message.attempts, message.id, message.body)
    assert ClientConnection().receive_data(raw) == [MessageFrame(message)]


@FAST
@given(detail=st.booleans(), data=st.data())
def test_ext_version_zero_is_one_byte(detail: bool, data: st.DataObject) -> None:
    message = data.draw(s.messages(detail=detail))  # ext_version 0, no ext
    plain = encode_message(message, detail=detail)
    extended = encode_message(message, extended=True, detail=detail)
    assert extended == plain[:26] + b"\x00" + plain[26:]
    assert decode_message(extended, extended=True, detail=detail) == message


# ---------------------------------------------------------------------- chunking


@MORE
@given(scenario=s.scenarios(), data=st.data())
def test_server_chunking_does_not_change_events(scenario: s.Scenario, data: st.DataObject) -> None:
    stream = scenario.stream
    chunks = s.split(stream, data.draw(s.cuts_for(len(stream))))
    conn = ServerConnection(scenario.settings)
    assert feed_chunks(conn, chunks) == list(scenario.events)


@MORE
@given(scenario=s.scenarios(), data=st.data())
def test_a_cap_on_events_per_call_only_spreads_them_over_calls(
    scenario: s.Scenario, data: st.DataObject
) -> None:
    """What the reader does to bound one turn: at most ``cap`` events per call, the
    rest taken back with ``take_unparsed``; together the same events, in order."""
    cap = data.draw(st.integers(1, 4))
    stream = scenario.stream
    conn = ServerConnection(scenario.settings)
    events: list[object] = []
    for chunk in s.split(stream, data.draw(s.cuts_for(len(stream)))):
        batch = conn.receive_data(chunk, cap)
        while True:
            assert len(batch) <= cap
            events += batch
            if not conn.unparsed or conn.closed:
                break
            batch = conn.receive_data(conn.take_unparsed(), cap)
    assert events == list(scenario.events)


def fins_expanded(events: list[Event]) -> list[Event]:
    """Each :class:`FinMany` as the :class:`Fin` events it stands for."""
    expanded: list[Event] = []
    for event in events:
        if isinstance(event, FinMany):
            expanded += [Fin(message_id) for message_id in event.message_ids]
        else:
            expanded.append(event)
    return expanded


@MORE
@given(scenario=s.scenarios(), data=st.data())
def test_fin_runs_stand_for_the_same_fins(scenario: s.Scenario, data: st.DataObject) -> None:
    """The broker's parser gathers runs of plain FINs (``fin_runs``): however the bytes
    are cut, the runs stand for exactly the FINs of the plain parser, in order."""
    stream = scenario.stream
    chunks = s.split(stream, data.draw(s.cuts_for(len(stream))))
    conn = ServerConnection(scenario.settings, fin_runs=True)
    assert fins_expanded(feed_chunks(conn, chunks)) == list(scenario.events)


@FAST
@given(ids=st.lists(st.integers(0, 2**64 - 1), min_size=1, max_size=50), cut=st.integers(0, 2000))
def test_a_run_of_fins_is_one_event_per_read(ids: list[int], cut: int) -> None:
    """FINs of a subscribed consumer, cut anywhere: whole lines read together make one
    FinMany; a line split by the cut is completed by the next read, as a plain Fin."""
    conn = ServerConnection(fin_runs=True)
    conn.receive_data(MAGIC_V2 + b"SUB t c\n")
    stream = b"".join(b"FIN %016x\n" % internal_id for internal_id in ids)
    cut = min(max(cut, 1), len(stream) - 1)  # an empty read would be EOF
    events = conn.receive_data(stream[:cut]) + conn.receive_data(stream[cut:])
    assert fins_expanded(events) == [Fin(b"%016x" % internal_id) for internal_id in ids]
    assert all(type(event) in (Fin, FinMany) for event in events)
    assert len(events) <= 3  # a run, the split line, a run


@FAST
@given(scenario=s.scenarios(max_commands=3))
def test_server_byte_by_byte(scenario: s.Scenario) -> None:
    stream = scenario.stream
    conn = ServerConnection(scenario.settings)
    assert feed_chunks(conn, [stream[i : i + 1] for i in range(len(stream))]) == list(
        scenario.events
    )


@st.composite
def server_frames(draw: st.DrawFn, *, extended: bool, detail: bool) -> tuple[bytes, Frame]:
    kind = draw(st.sampled_from(["response", "error", "message"]))
    if kind == "response":
        body = draw(
            st.one_of(
                st.sampled_from([b"OK", b"_heartbeat_", b"CLOSE_WAIT", b""]),
                st.binary(max_size=80),
            )
        )
        return response_frame(body), Response(body)
    if kind == "error":
        data, error = draw(s.error_datas())
        return frame(FRAME_TYPE_ERROR, data), ErrorReply(error)
    message = draw(s.messages(extended=extended, detail=detail))
    return frame(FRAME_TYPE_MESSAGE, encode_message(message, extended=extended, detail=detail)), (
        MessageFrame(message)
    )


@MORE
@given(layout=s.layouts, data=st.data())
def test_client_chunking_does_not_change_frames(
    layout: tuple[bool, bool], data: st.DataObject
) -> None:
    extended, detail = layout
    pairs = data.draw(st.lists(server_frames(extended=extended, detail=detail), max_size=8))
    stream = b"".join(raw for raw, _ in pairs)
    expected = [f for _, f in pairs]
    whole = ClientConnection(extended=extended, detail=detail)
    assert whole.receive_data(stream) == expected
    assert whole.buffered == 0
    chunked = ClientConnection(extended=extended, detail=detail)
    got: list[Frame] = []
    for chunk in s.split(stream, data.draw(s.cuts_for(len(stream)))):
        got += chunked.receive_data(chunk)
    assert got == expected
    assert chunked.receive_data(b"") == []


# ---------------------------------------------------------------------- fuzz


def check_server_fuzz(
    stream: bytes, cuts: list[int], server_settings: ServerSettings | None
) -> list[Event]:
    conn = ServerConnection(server_settings)
    chunks = s.split(stream, cuts)
    events: list[Event] = []
    closed_at: int | None = None
    for chunk in chunks:
        got = conn.receive_data(chunk)
        if closed_at is not None:
            assert got == [], "events after the connection closed"
        events += got
        if conn.closed and closed_at is None:
            closed_at = len(events)
    events += conn.receive_data(b"")
    assert conn.receive_data(b"more") == []
    assert_well_formed(events)
    # the same bytes in one piece parse the same, unless an IDENTIFY negotiated
    # compression: then the rest of the chunk is handed back, not parsed, by design
    upgraded = any(
        isinstance(e, Identify) and (e.settings.snappy or e.settings.deflate) for e in events
    )
    if not upgraded:
        whole = ServerConnection(server_settings)
        assert whole.receive_data(stream) + whole.receive_data(b"") == events
    return events


@MORE
@given(payload=s.fuzz_streams, data=st.data())
def test_server_fuzz_after_magic(payload: bytes, data: st.DataObject) -> None:
    stream = MAGIC_V2 + payload
    cuts = data.draw(s.cuts_for(len(stream)))
    limits = data.draw(st.sampled_from([None, SMALL_LIMITS, ServerSettings(auth_enabled=True)]))
    check_server_fuzz(stream, cuts, limits)


@FAST
@given(stream=st.binary(max_size=200), data=st.data())
def test_server_fuzz_without_magic(stream: bytes, data: st.DataObject) -> None:
    events = check_server_fuzz(stream, data.draw(s.cuts_for(len(stream))), None)
    if len(stream) >= 4 and not stream.startswith(MAGIC_V2):
        assert events == [ProtocolError("E_BAD_PROTOCOL", None)]


@MORE
@given(
    stream=st.one_of(
        st.binary(max_size=300),
        st.lists(
            st.one_of(
                st.binary(max_size=30),
                server_frames(extended=True, detail=True).map(lambda p: p[0]),
                server_frames(extended=False, detail=False).map(lambda p: p[0]),
            ),
            max_size=6,
        ).map(b"".join),
    ),
    layout=s.layouts,
    max_frame_size=st.sampled_from([64, 1 << 20]),
    data=st.data(),
)
def test_client_fuzz_raises_only_protocol_errors(
    stream: bytes, layout: tuple[bool, bool], max_frame_size: int, data: st.DataObject
) -> None:
    extended, detail = layout
    conn = ClientConnection(extended=extended, detail=detail, max_frame_size=max_frame_size)
    failed: ProtocolError | None = None
    for chunk in [*s.split(stream, data.draw(s.cuts_for(len(stream)))), b""]:
        try:
            frames = conn.receive_data(chunk)
        except ProtocolError as error:
            repeated = failed is None or error == failed
            failed = error
            assert repeated, "a broken stream raises the same error again"
            continue
        assert failed is None, "frames after the stream broke"
        assert all(isinstance(f, Response | ErrorReply | MessageFrame) for f in frames)
    if failed is not None:
        assert conn.error == failed
        with pytest.raises(ProtocolError):
            conn.receive_data(b"x")


# ---------------------------------------------------------------------- regressions found here


@pytest.mark.parametrize(
    "line",
    [
        b"SUB t c\nRDY " + b"1" * 4301 + b"\n",
        b"SUB t c " + b"1" * 4301 + b"\n",
        b"DPUB t " + b"1" * 4301 + b"\n",
        b"INTERNAL_CREATE_TOPIC t " + b"1" * 4301 + b"\n",
        b"SUB t c\nREQ 0123456789abcdef " + b"1" * 4301 + b"\n",
        b"SUB_ADVANCED t c 0 timestamp:" + b"1" * 4301 + b"\n",
    ],
    ids=["rdy", "sub-partition", "dpub", "create-topic", "req", "offset"],
)
def test_long_numbers_do_not_raise(line: bytes) -> None:
    events = ServerConnection().receive_data(MAGIC_V2 + line)
    assert_well_formed(events)


@pytest.mark.parametrize("command_type", [Fin, Touch])
def test_binary_id_ending_in_cr(command_type: type[Fin] | type[Touch]) -> None:
    message_id = b"\x00" * 15 + b"\r"
    cmd = command_type(message_id)
    events = ServerConnection().receive_data(
        MAGIC_V2 + encode_command(Sub("t", "c", 0)) + encode_command(cmd)
    )
    assert events == [Sub("t", "c", 0), cmd]
