"""MPUB_EXT parts read in bulk (issue 32) give what the exact reader gave, byte for byte.

The oracle is the reader as it was before the bulk path: :class:`_ExactServer` keeps
its loop. Both connections get the same streams (keyed parts, near misses, sizes out
of bounds, declared sizes that lie, commands after them), cut into the same reads,
with or without EOF, and must give the same events, errors and their texts included,
and end in the same state.
"""

from __future__ import annotations

import struct
from typing import TYPE_CHECKING

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from trionsq.protocol import ServerConnection, ServerSettings
from trionsq.protocol.commands import ExtMessage, MpubExt, Nop
from trionsq.protocol.keyed_parts import _read_keyed_parts_py
from trionsq.protocol.parsing import _EOF_MPUB_BODY, _fatal
from trionsq.protocol.publish_readers import _ext_message
from trionsq.speedups import compiled

from .strategies import cuts_for, split
from .wire import ext_part, mpub_body, sized

if TYPE_CHECKING:
    from trionsq.protocol.errors import ProtocolError
    from trionsq.protocol.parsing import _Reader
    from trionsq.protocol.server import Event

I32 = struct.Struct(">i")
SETTINGS = ServerSettings(max_msg_size=400, max_body_size=4_000)


class _ExactServer(ServerConnection):
    """The server with MPUB_EXT read as before issue 32: field by field."""

    def _read_mpub_youzan(self, verb: str, topic: str, partition: int | None) -> _Reader:
        if verb != "MPUB_EXT":
            return (yield from super()._read_mpub_youzan(verb, topic, partition))
        size = yield from self._read_batch_size("")
        self._require_auth("PUB")
        self._require_existable(topic)
        refusal = self._gate(verb, topic, partition, size)
        count = yield from self._read_message_count()
        budget = size - 4
        exts: list[ExtMessage] = []
        soft_error: ProtocolError | None = None
        for index in range(count):
            part = yield from self._read_mpub_part_size(index, size, budget)
            budget -= part + 4
            if part <= 2:
                raise _fatal("E_BAD_MESSAGE", f"MPUB invalid message({index}) body size {part}")
            message = yield from self._read_ext_message(part, _EOF_MPUB_BODY)
            if isinstance(message, ExtMessage):
                exts.append(message)
            else:
                soft_error = soft_error or message
        if refusal is not None:
            return refusal
        if soft_error is not None:
            return soft_error
        return MpubExt(topic, tuple(exts), partition)


PLAIN = st.sampled_from([chr(c) for c in range(0x20, 0x7F) if chr(c) not in '"\\'])
KEY_CHARS = st.one_of(PLAIN, st.sampled_from(["é", "\\", '"']))
keys = st.text(KEY_CHARS, min_size=0, max_size=260)


def _key_header(key: str) -> bytes:
    return b'{"##idempotency_key":"' + key.encode() + b'"}'


headers = st.one_of(
    st.text(PLAIN, min_size=1, max_size=40).map(_key_header),  # the bulk reader's
    keys.map(_key_header),  # some too long, empty, or quoted
    keys.map(lambda k: b'{"##idempotency_key": "' + k.encode() + b'"}'),
    keys.map(lambda k: b'{"##idempotency_key":"' + k.encode() + b'","##client_dispatch_tag":"t"}'),
    st.sampled_from(
        [b"{}", b'{"k":1}', b"{bad", b'{"##idempotency_key":"}', b'{"##trace_id":"x"}']
    ),
)
parts = st.builds(ext_part, headers, st.binary(max_size=40))


@st.composite
def _streams(draw: st.DrawFn) -> bytes:
    """MPUB_EXTs, mostly well formed, sometimes lying about a size or a count."""
    stream = b""
    for _ in range(draw(st.integers(1, 3))):
        batch = draw(st.lists(parts, min_size=1, max_size=8))
        wire = [sized(p) for p in batch]
        if draw(st.booleans()):  # a part size that lies
            at = draw(st.integers(0, len(wire) - 1))
            size = draw(st.sampled_from([-1, 0, 1, 2, 3, 401, len(batch[at]) + 9]))
            wire[at] = I32.pack(size) + wire[at][4:]
        inner = I32.pack(len(batch)) + b"".join(wire)
        declared = len(inner) + draw(st.sampled_from([0, 0, 0, -3, 5, 5_000]))
        count = draw(st.sampled_from([len(batch), len(batch), len(batch) + 1, len(batch) - 1]))
        inner = I32.pack(count) + inner[4:]
        partition = draw(st.sampled_from([b"", b" 1"]))
        stream += b"MPUB_EXT t" + partition + b"\n" + I32.pack(declared) + inner
        stream += draw(st.sampled_from([b"", b"NOP\n", b"PUB t\n" + sized(b"x")]))
    return stream


def _feed(conn: ServerConnection, chunks: list[bytes], eof: bool) -> list[list[Event]]:
    """The events of each read (so an error must come at the same read too)."""
    return [conn.receive_data(chunk) for chunk in [*chunks, b""][: len(chunks) + eof]]


@settings(max_examples=400)
@given(stream=_streams(), data=st.data())
def test_bulk_reads_give_the_exact_readers_events(stream: bytes, data: st.DataObject) -> None:
    whole = b"  V2" + stream
    eof = data.draw(st.booleans())
    if eof:  # the stream may end anywhere
        whole = whole[: data.draw(st.integers(4, len(whole)))]
    chunks = split(whole, data.draw(cuts_for(len(whole))))
    bulk = ServerConnection(SETTINGS)
    exact = _ExactServer(SETTINGS)
    assert _feed(bulk, chunks, eof) == _feed(exact, chunks, eof)
    assert (bulk.closed, bulk.buffered) == (exact.closed, exact.buffered)


def test_keyed_parts_come_in_one_read_as_messages() -> None:
    batch = [ext_part(_key_header(f"key-{n}"), b"body %d" % n) for n in range(300)]
    events = ServerConnection().receive_data(b"  V2MPUB_EXT t 0\n" + mpub_body(*batch) + b"NOP\n")
    messages = tuple(
        ExtMessage(_key_header(f"key-{n}"), b"body %d" % n, None, None, f"key-{n}")
        for n in range(300)
    )
    assert events == [MpubExt("t", messages, 0), Nop()]
    assert [m.idempotency_key for m in events[0].messages] == [f"key-{n}" for n in range(300)]  # type: ignore[union-attr]


def test_a_body_size_larger_than_its_parts_leaves_what_follows_to_the_next_command() -> None:
    """The bulk reader asks for up to the declared size; bytes past the parts are
    the next command's, as the exact reader left them."""
    part = ext_part(_key_header("k"), b"body")
    inner = I32.pack(1) + sized(part)
    stream = b"  V2MPUB_EXT t\n" + I32.pack(len(inner) + 100) + inner + b"NOP\n" + b"NOP\n"
    events = ServerConnection().receive_data(stream)
    assert events == [
        MpubExt("t", (ExtMessage(_key_header("k"), b"body", None, None, "k"),)),
        Nop(),
        Nop(),
    ]


@pytest.mark.parametrize("header", [_key_header("a b!~#[]"), b'{"k":"v"}', b"{bad"])
def test_read_keyed_parts_twins_agree_on_one_header(header: bytes) -> None:
    data = sized(ext_part(header, b"body"))
    pure: list[ExtMessage] = []
    expected = _read_keyed_parts_py(data, 0, 5, 1_000, 1_000, ExtMessage, pure)
    assert expected[3] is (header != _key_header("a b!~#[]"))
    if compiled is not None:
        fast: list[ExtMessage] = []
        assert compiled.read_keyed_parts(data, 0, 5, 1_000, 1_000, ExtMessage, fast) == expected
        assert fast == pure
    if not expected[3]:
        assert pure == [_ext_message(header, b"body")]


@pytest.mark.parametrize("first_read", [6, 40, 10_000])
def test_a_stream_ending_anywhere_gives_the_exact_readers_error(first_read: int) -> None:
    batch = [ext_part(_key_header(f"k{n}"), b"body") for n in range(3)]
    whole = b"  V2MPUB_EXT t\n" + mpub_body(*batch)
    for end in range(4, len(whole) + 1):
        stream = whole[:end]
        chunks = [c for c in (stream[:first_read], stream[first_read:]) if c]
        bulk, exact = ServerConnection(), _ExactServer()
        assert _feed(bulk, chunks, True) == _feed(exact, chunks, True), end
