"""PUB and MPUB that arrive whole take the parser's fast path, with or without a
Youzan partition: the same events and gate checks as the body reader, which a
stream fed byte by byte always takes (replicated publishes name their partition:
docs/replication.md)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from hypothesis import given
from hypothesis import strategies as st

from trionsq.protocol import ServerConnection
from trionsq.protocol.commands import Mpub, Pub

from .test_server import RecordingGate
from .wire import feed, feed_bytewise, mpub_body, sized

if TYPE_CHECKING:
    from trionsq.protocol.parsing import Event, _Reader

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
