"""PUB and MPUB that arrive whole take the parser's fast path, with or without a
Youzan partition: the same events and gate checks as the body reader, which a
stream fed byte by byte always takes (replicated publishes name their partition:
docs/replication.md). One split between two reads is held until the next and then
takes the fast path too."""

from __future__ import annotations

import itertools
import struct
from typing import TYPE_CHECKING

from hypothesis import given
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
