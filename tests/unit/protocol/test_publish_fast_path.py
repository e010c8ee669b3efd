"""PUB and MPUB that arrive whole take the parser's fast path, with or without a
Youzan partition: the same events and gate checks as the body reader, which a
stream fed byte by byte always takes (replicated publishes name their partition:
docs/replication.md). One split between two reads is held until the next and then
takes the fast path too."""

from __future__ import annotations

import itertools
import struct
from typing import TYPE_CHECKING

from hypothesis import given, settings
from hypothesis import strategies as st

from trionsq.protocol import ProtocolError, ServerConnection, ServerSettings
from trionsq.protocol.commands import Mpub, Pub

from .test_server import RecordingGate
from .wire import fatal, feed, feed_bytewise, mpub_body, sized

if TYPE_CHECKING:
    from trionsq.protocol.parsing import Event, PublishHeader, _Reader

partitions = st.one_of(
    st.sampled_from([b"", b"0", b"3", b"007", b"-1", b"-2", b"x", b"1 2", b"99999999999"]),
    st.integers(min_value=0, max_value=10**12).map(lambda n: str(n).encode()),
)
bodies = st.lists(st.binary(min_size=1, max_size=8), min_size=1, max_size=4)


@given(partition=partitions, parts=bodies)
def test_whole_and_bytewise_publishes_agree(partition: bytes, parts: list[bytes]) -> None:
    suffix = b" " + partition if partition else b""
    stream = b"PUB t" + suffix + b"\n" + sized(parts[0])
    stream += b"MPUB t" + suffix + b"\n" + mpub_body(*parts)
    whole_gate, bytewise_gate = RecordingGate(None), RecordingGate(None)
    # twice over: the second round has the topic's name cached (the fast path's need)
    whole = feed(stream + stream, gate=whole_gate)
    assert whole == feed_bytewise(stream + stream, gate=bytewise_gate)
    assert whole_gate.seen == bytewise_gate.seen


class CountedReaders(ServerConnection):
    """Counts the commands that went to a body reader (off the fast path)."""

    readers = 0

    def _start_reader(
        self, reader: _Reader, data: bytes, pos: int, end: int, events: list[Event]
    ) -> int:
        self.readers += 1
        return super()._start_reader(reader, data, pos, end, events)


def test_a_named_partition_takes_the_fast_path() -> None:
    stream = b"PUB t 3\n" + sized(b"a") + b"MPUB t 3\n" + mpub_body(b"a", b"b")
    conn = CountedReaders()
    assert conn.receive_data(b"  V2" + stream + stream)[2:] == [
        Pub("t", b"a", 3),
        Mpub("t", (b"a", b"b"), 3),
    ]
    assert conn.readers == 1  # the first PUB, before the name was known (unfixed: 4, all)


def _split(stream: bytes, cuts: list[int]) -> list[bytes]:
    points = sorted({0, len(stream), *(c % (len(stream) + 1) for c in cuts)})
    return [stream[a:b] for a, b in itertools.pairwise(points)]


def test_a_publish_split_across_reads_takes_the_fast_path() -> None:
    """Pipelined MPUBs of 40 KB read 64 KB at a time: most are split between two
    reads. The part that came is held (checked so far) and the whole takes the fast
    path (unfixed: each split one went to the body reader, about 1 us a message)."""
    bodies = tuple(b"%03d" % n * 60 for n in range(200))
    one = b"MPUB t 0\n" + mpub_body(*bodies)
    conn = CountedReaders()
    events = conn.receive_data(b"  V2PUB t 0\n" + sized(b"x"))  # the name, cached
    stream = one * 3
    for chunk in _split(stream, [len(one) // 2, len(one) + 100, 2 * len(one) + 7]):
        events += conn.receive_data(chunk)
    assert events == [Pub("t", b"x", 0)] + [Mpub("t", bodies, 0)] * 3
    assert conn.readers == 1  # the first PUB only (unfixed: 3)
    assert conn.buffered == 0


def test_a_held_publish_is_refused_at_once_when_the_gate_refuses_its_header() -> None:
    """The gate sees a held publish's header when it comes, as the body reader shows
    it before the body: a fatal verdict (no such partition) is told at once, not
    when the rest of the body comes."""

    def gate(header: PublishHeader) -> ProtocolError | None:
        return fatal("E_TOPIC_NOT_EXIST") if header.partition == 5 else None

    conn = ServerConnection(publish_gate=gate)
    assert conn.receive_data(b"  V2PUB t 0\n" + sized(b"x")) == [Pub("t", b"x", 0)]
    split = b"MPUB t 5\n" + mpub_body(b"a" * 100, b"b" * 100)
    assert conn.receive_data(split[:60]) == [fatal("E_TOPIC_NOT_EXIST")]
    assert conn.closed


_commands = st.one_of(
    st.lists(st.binary(min_size=1, max_size=40), min_size=1, max_size=5).map(
        lambda parts: b"MPUB t 1\n" + mpub_body(*parts)
    ),
    st.binary(min_size=1, max_size=60).map(lambda body: b"PUB t\n" + sized(body)),
    st.binary(max_size=60).map(lambda body: b"PUB t 1\n" + sized(body)),  # b"": invalid
    st.tuples(st.integers(-3, 300), st.integers(-3, 60), st.binary(max_size=60)).map(
        lambda t: b"MPUB t\n" + struct.pack(">ii", t[0], 1) + struct.pack(">i", t[1]) + t[2]
    ),  # lying body or part sizes
    st.just(b"NOP\n"),
)


@given(
    commands=st.lists(_commands, min_size=1, max_size=6),
    cuts=st.lists(st.integers(0, 2_000), max_size=8),
    eof=st.booleans(),
)
def test_any_split_gives_what_the_body_reader_gives(
    commands: list[bytes], cuts: list[int], eof: bool
) -> None:
    """Held or not, a stream split anywhere gives the events (errors and their order
    included) of the same stream fed a byte at a time, which the body reader takes;
    the gate sees the same headers (a held one's twice in a row)."""
    settings = ServerSettings(max_msg_size=50, max_body_size=200)
    stream = b"PUB t 1\n" + sized(b"n") + b"".join(commands)  # the name cached first
    expected_gate, gate = RecordingGate(None), RecordingGate(None)
    expected = feed_bytewise(stream, settings, gate=expected_gate, eof=eof)
    conn = ServerConnection(settings, publish_gate=gate)
    events: list[Event] = []
    for chunk in _split(b"  V2" + stream, cuts):
        events += conn.receive_data(chunk)
    if eof:
        events += conn.receive_data(b"")
    assert events == expected
    assert [h for h, _ in itertools.groupby(gate.seen)] == [
        h for h, _ in itertools.groupby(expected_gate.seen)
    ]


class NoLonePub(ServerConnection):
    """The parser without its shortcut for a read that is one whole PUB."""

    def _lone_pub(self, data: bytes) -> Pub | ProtocolError | None:
        return None


_TOPIC_PARTS = (
    *(b"t", b"t", b"t", b"u", b"t\r", b"a*b", b"", b"t 0", b"t 7", b"t" * 65, b"t 12"),
    *(b"t 007", b"t 1234567890", b"t -1", b"t 1\r", b"t  1", b"u 1", b" 1", b"t 3"),
)
"""What follows ``PUB `` on the line: names, partitions, and the near misses."""
_pub_reads = st.tuples(
    st.sampled_from(_TOPIC_PARTS),
    st.binary(max_size=10),
    st.one_of(st.none(), st.none(), st.integers(-2, 12)),  # the size field (None: honest)
    st.sampled_from([b"", b"", b"", b"", b"NOP\n", b"PUB t\n", b"\n"]),  # what follows
).map(
    lambda r: (
        b"PUB "
        + r[0]
        + b"\n"
        + struct.pack(">i", len(r[1]) if r[2] is None else r[2])
        + r[1]
        + r[3]
    )
)
_reads = st.one_of(
    _pub_reads, _pub_reads, _pub_reads, st.sampled_from([b"PUB t\n", b"PUB ", b"NOP\n"])
)
_settings = st.builds(
    ServerSettings,
    max_msg_size=st.sampled_from([1, 5, 100]),
    max_line_length=st.sampled_from([6, 4096]),
    tls_required=st.sampled_from([False, False, False, True]),
    auth_enabled=st.sampled_from([False, False, False, True]),
)


@given(
    reads=st.lists(_reads, min_size=1, max_size=8),
    settings=_settings,
    gated=st.sampled_from([None, frozenset({"PUB_EXT"}), frozenset({"PUB"}), "no gate"]),
    verdict=st.sampled_from(
        [
            None,
            None,
            fatal("E_TOPIC_NOT_EXIST", ""),
            ProtocolError("E_PUB_FAILED", "x", fatal=False),
        ]
    ),
    magic_first=st.sampled_from([True, True, True, False]),
)
@settings(max_examples=400)
def test_a_read_that_is_one_pub_gives_what_the_loop_gives(
    reads: list[bytes],
    settings: ServerSettings,
    gated: object,
    verdict: ProtocolError | None,
    magic_first: bool,
) -> None:
    """One PUB per read (a round trip's), a partition named or not: the shortcut's
    events, the gate's calls (one per PUB that names a partition) and the state
    after are those of the parsing loop, whatever the read holds and the gate says."""
    gates = RecordingGate(verdict), RecordingGate(verdict)
    conns = [
        kind(
            settings,
            publish_gate=None if gated == "no gate" else gate,
            gated_verbs=gated if isinstance(gated, frozenset) else None,
        )
        for kind, gate in zip((ServerConnection, NoLonePub), gates, strict=True)
    ]
    seen: list[list[object]] = [[], []]
    for conn, events in zip(conns, seen, strict=True):
        # the magic and a first PUB, which has the topic's name cached
        for data in ([b"  V2", b"PUB t\n" + sized(b"x")] if magic_first else []) + reads:
            events.append(conn.receive_data(data))
        events.append([conn.closed, conn.buffered, conn.unparsed])
    assert seen[0] == seen[1]
    assert gates[0].seen == gates[1].seen


def _lines_read(conn: ServerConnection) -> list[bytes]:
    """What the parsing loop reads lines from from now on (the shortcut reads none)."""
    calls: list[bytes] = []
    read_line = conn._read_line

    def counted(data: bytes, pos: int, end: int) -> tuple[bytes | None, int]:
        calls.append(data)
        return read_line(data, pos, end)

    conn._read_line = counted  # type: ignore[method-assign]
    return calls


def test_a_read_that_is_one_pub_skips_the_loop() -> None:
    conn = CountedReaders()
    assert conn.receive_data(b"  V2PUB t\n" + sized(b"x")) == [Pub("t", b"x", None)]
    calls = _lines_read(conn)
    assert conn.receive_data(b"PUB t\n" + sized(b"y")) == [Pub("t", b"y", None)]
    assert calls == []  # unfixed: the loop read its line


def test_a_gate_that_sees_pubs_sees_each_lone_pub() -> None:
    gate = RecordingGate(None)
    conn = ServerConnection(publish_gate=gate)  # no gated_verbs: every publish is gated
    for body in (b"a", b"bc"):
        assert conn.receive_data(b"  V2" * (body == b"a") + b"PUB t\n" + sized(body)) == [
            Pub("t", body, None)
        ]
    assert [header.body_size for header in gate.seen] == [1, 2]


def test_a_lone_pub_naming_a_partition_asks_the_gate_once() -> None:
    """The shortcut takes a Youzan client's PUB too (trionsq.client names a partition
    in every one): the gate sees it once, its refusal is the event, a fatal one
    closes the connection, as in the loop."""
    passing = RecordingGate(None)
    conn = CountedReaders(publish_gate=passing, gated_verbs=frozenset({"PUB_EXT"}))
    assert conn.receive_data(b"  V2PUB t\n" + sized(b"x")) == [Pub("t", b"x", None)]
    calls = _lines_read(conn)
    assert conn.receive_data(b"PUB t 3\n" + sized(b"y")) == [Pub("t", b"y", 3)]
    assert calls == []  # the loop read no line
    assert [(h.verb, h.topic, h.partition, h.body_size) for h in passing.seen] == [
        ("PUB", "t", 3, 1)
    ]
    for verdict in (
        ProtocolError("E_PUB_FAILED", "x", fatal=False),
        fatal("E_TOPIC_NOT_EXIST", ""),
    ):
        gate = RecordingGate(verdict)
        refusing = ServerConnection(publish_gate=gate, gated_verbs=frozenset({"PUB_EXT"}))
        assert refusing.receive_data(b"  V2PUB t\n" + sized(b"x")) == [Pub("t", b"x", None)]
        assert refusing.receive_data(b"PUB t 3\n" + sized(b"y")) == [verdict]
        assert len(gate.seen) == 1
        assert refusing.closed is verdict.fatal
