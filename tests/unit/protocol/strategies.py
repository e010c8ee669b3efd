"""Hypothesis strategies for the protocol: commands, messages, frames, and whole
valid command sequences with the events a :class:`ServerConnection` must produce.

Constraints the server puts on a command's context, and how these strategies meet them:

- FIN/REQ/TOUCH/RDY/CLS are accepted only after a SUB-family command; RDY after CLS
  is silently ignored (no event).
- IDENTIFY and AUTH are accepted only before SUB; AUTH only with ``auth_enabled``
  and only once; with auth enabled every PUB/SUB needs AUTH first.
- Message ids: in hex mode the server splits the line on spaces, so an id holds no
  space or newline (and no trailing ``\\r``, which is stripped as a CRLF). Binary
  mode (IDENTIFY with ``extend_support``, SUB with a partition, SUB_ORDERED,
  SUB_ADVANCED) takes the 16 bytes positionally, so any bytes work.
- IDENTIFY must negotiate without an upgrade (no snappy/deflate) and, before a SUB,
  keep heartbeats on; SUB_ORDERED needs sample rate 0.
"""

from __future__ import annotations

import itertools
import string
import struct
from typing import TYPE_CHECKING, Final, TypeVar

import attrs
import orjson
from hypothesis import strategies as st

from trionsq.protocol import (
    MAGIC_V2,
    Auth,
    Cls,
    Command,
    Dpub,
    ExtMessage,
    Fin,
    Identify,
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
    Rdy,
    Req,
    ServerSettings,
    Sub,
    SubAdvanced,
    SubOrdered,
    Touch,
    TracedMessage,
    binary_id,
    hex_id,
)
from trionsq.protocol.client import NON_FATAL_ERROR_CODES, encode_commands
from trionsq.protocol.identify import ExtFilter, ExtFilterItem, negotiate
from trionsq.protocol.message import EXT_VERSION_JSON, EXT_VERSION_NONE, EXT_VERSION_TAG
from trionsq.protocol.server import Event

if TYPE_CHECKING:
    from collections.abc import Callable, Sequence


T = TypeVar("T")

INT64_MIN: Final = -(2**63)
INT64_MAX: Final = 2**63 - 1
UINT64_MAX: Final = 2**64 - 1
UINT32_MAX: Final = 2**32 - 1
DEFAULT_SETTINGS: Final = ServerSettings()
NAME_CHARS: Final = string.ascii_letters + string.digits + "._-"
EPHEMERAL: Final = "#ephemeral"

# ---------------------------------------------------------------------- scalars

names: st.SearchStrategy[str] = st.one_of(
    st.text(NAME_CHARS, min_size=1, max_size=64),
    st.text(NAME_CHARS, min_size=1, max_size=64 - len(EPHEMERAL)).map(lambda n: n + EPHEMERAL),
)
"""Valid topic/channel names (spec §4.4), ephemeral ones included."""

bodies: st.SearchStrategy[bytes] = st.binary(min_size=1, max_size=300)
partitions: st.SearchStrategy[int | None] = st.one_of(
    st.none(), st.integers(0, 16), st.integers(0, INT64_MAX)
)
trace_ids: st.SearchStrategy[int] = st.one_of(st.integers(0, 255), st.integers(0, UINT64_MAX))
plain_text: st.SearchStrategy[str] = st.text(st.characters(exclude_categories=["Cs"]), max_size=20)
"""JSON-encodable text (no lone surrogates)."""


def _hex_mode_ok(message_id: bytes) -> bool:
    return b" " not in message_id and b"\n" not in message_id and not message_id.endswith(b"\r")


hex_message_ids: st.SearchStrategy[bytes] = st.one_of(
    st.integers(0, UINT64_MAX).map(hex_id),
    st.binary(min_size=16, max_size=16).filter(_hex_mode_ok),
)
"""Ids a connection in hex mode parses back: 16 bytes, no space/newline/trailing CR."""


def binary_message_ids() -> st.SearchStrategy[bytes]:
    """Any 16 bytes (a binary-mode connection reads them by position)."""
    raw = st.binary(min_size=16, max_size=16)
    pairs = st.builds(binary_id, st.integers(0, UINT64_MAX), trace_ids)
    special = st.sampled_from(
        [b"\n" * 16, b" " * 16, b"0123456 89\nabcde", b"\x00" * 16, b"\x00" * 15 + b"\r"]
    )
    return st.one_of(pairs, special, raw)


def message_ids(*, binary: bool) -> st.SearchStrategy[bytes]:
    """Ids for FIN/REQ/TOUCH on a connection in the given id mode."""
    return binary_message_ids() if binary else hex_message_ids


offset_specs: st.SearchStrategy[OffsetSpec] = st.one_of(
    st.builds(
        OffsetSpec,
        st.sampled_from(["timestamp", "virtual_queue", "msgcount"]),
        st.integers(INT64_MIN, INT64_MAX),
    ),
    st.just(OffsetSpec("special", -1)),
)

# ---------------------------------------------------------------------- IDENTIFY


ext_filters: st.SearchStrategy[ExtFilter | None] = st.one_of(
    st.none(),
    st.builds(
        ExtFilter,
        st.integers(INT64_MIN, INT64_MAX),
        st.booleans(),
        plain_text,
        plain_text,
        st.lists(st.builds(ExtFilterItem, plain_text, plain_text), max_size=3).map(tuple),
    ),
)


def identify_requests(
    *, heartbeats: bool = True, sample_rate_zero: bool = False
) -> st.SearchStrategy[IdentifyRequest]:
    """Requests the default server settles without an error or a stream upgrade.

    ``heartbeats=False`` allows ``heartbeat_interval=-1`` (which forbids a later SUB).
    """
    heartbeat = st.one_of(st.just(0), st.integers(1000, 60_000))
    if not heartbeats:
        heartbeat = st.one_of(heartbeat, st.just(-1))
    return st.builds(
        IdentifyRequest,
        client_id=plain_text,
        hostname=plain_text,
        user_agent=plain_text,
        heartbeat_interval=heartbeat,
        output_buffer_size=st.one_of(st.sampled_from([-1, 0]), st.integers(64, 65_536)),
        output_buffer_timeout=st.one_of(st.sampled_from([-1, 0]), st.integers(10, 30_000)),
        feature_negotiation=st.booleans(),
        tls_v1=st.booleans(),  # the default server has no certificate: never negotiated
        deflate=st.just(False),
        deflate_level=st.integers(0, 9),
        snappy=st.just(False),
        sample_rate=st.just(0) if sample_rate_zero else st.integers(0, 99),
        msg_timeout=st.one_of(st.just(0), st.integers(1000, 900_000)),
        topology_region=plain_text,
        topology_zone=plain_text,
        extend_support=st.booleans(),
        desired_tag=st.text(NAME_CHARS, max_size=100),
        ext_filter=ext_filters,
        short_id=plain_text,
        long_id=plain_text,
    )


def identify_event(
    request: IdentifyRequest, settings: ServerSettings = DEFAULT_SETTINGS
) -> Identify:
    """The Identify event a server produces for ``request`` (events compare by request)."""
    negotiated, response = negotiate(request, settings)
    return Identify(request, negotiated, response)


def identifies(**kwargs: bool) -> st.SearchStrategy[Identify]:
    return identify_requests(**kwargs).map(identify_event)


# ---------------------------------------------------------------------- publishes


def _header_json(
    extra: dict[str, str | int | bool | None],
    trace_id: int | None,
    tag: str | None,
    idempotency_key: str | None,
) -> bytes:
    header: dict[str, str | int | bool | None] = dict(extra)
    if trace_id is not None:
        header["##trace_id"] = str(trace_id)
    if tag is not None:
        header["##client_dispatch_tag"] = tag
    if idempotency_key is not None:
        header["##idempotency_key"] = idempotency_key
    return orjson.dumps(header)


json_scalars: st.SearchStrategy[str | int | bool | None] = st.one_of(
    st.none(), st.booleans(), st.integers(INT64_MIN, INT64_MAX), plain_text
)
ext_headers: st.SearchStrategy[bytes] = st.builds(
    _header_json,
    st.dictionaries(
        plain_text.filter(
            lambda k: k not in ("##trace_id", "##client_dispatch_tag", "##idempotency_key", "##ttl")
        ),
        json_scalars,
        max_size=4,
    ),
    st.none() | st.integers(0, UINT64_MAX),
    st.none() | st.text(NAME_CHARS, min_size=1, max_size=20),
    st.none() | st.text(NAME_CHARS, min_size=1, max_size=40),
)
"""JSON object headers the server accepts (a ``##trace_id`` is a uint64 string, an
``##idempotency_key`` a non-empty string; no ``##ttl``, whose values the server
checks: hypothesis once drew ``{"##ttl": null}`` among the free keys)."""

ext_messages: st.SearchStrategy[ExtMessage] = st.builds(ExtMessage, ext_headers, bodies)
traced_messages: st.SearchStrategy[TracedMessage] = st.builds(TracedMessage, trace_ids, bodies)


def _parts(strategy: st.SearchStrategy[T]) -> st.SearchStrategy[tuple[T, ...]]:
    return st.lists(strategy, min_size=1, max_size=5).map(tuple)


pubs = st.builds(Pub, names, bodies, partitions)
mpubs = st.builds(Mpub, names, _parts(bodies), partitions)
dpubs = st.builds(Dpub, names, st.integers(0, DEFAULT_SETTINGS.max_req_timeout_ms), bodies)
pub_traces = st.builds(PubTrace, names, trace_ids, bodies, partitions)
mpub_traces = st.builds(MpubTrace, names, _parts(traced_messages), partitions)
pub_exts = st.builds(PubExt, names, ext_messages, partitions)
mpub_exts = st.builds(MpubExt, names, _parts(ext_messages), partitions)
internal_create_topics = st.builds(
    InternalCreateTopic,
    names,
    st.one_of(st.integers(0, 16), st.integers(0, INT64_MAX)),
    st.booleans(),
)
auths = st.builds(Auth, bodies)
publishes: st.SearchStrategy[Command] = st.one_of(
    pubs, mpubs, dpubs, pub_traces, mpub_traces, pub_exts, mpub_exts
)
"""Commands allowed in any state."""
stateless: st.SearchStrategy[Command] = st.one_of(publishes, st.just(Nop()), internal_create_topics)

# ---------------------------------------------------------------------- consuming

subs = st.builds(Sub, names, names, partitions)
sub_ordereds = st.builds(SubOrdered, names, names, partitions)
sub_advanceds = st.builds(SubAdvanced, names, names, partitions, st.none() | offset_specs)
subscriptions: st.SearchStrategy[Sub | SubOrdered | SubAdvanced] = st.one_of(
    subs, sub_ordereds, sub_advanceds
)
rdys = st.builds(Rdy, st.integers(0, DEFAULT_SETTINGS.max_rdy_count))
req_timeouts = st.one_of(st.integers(0, 100_000), st.integers(0, 10**15))


def consuming(*, binary: bool) -> st.SearchStrategy[Command]:
    """Commands valid after a SUB (before CLS) on a connection in the given id mode."""
    ids = message_ids(binary=binary)
    return st.one_of(
        rdys,
        st.builds(Fin, ids),
        st.builds(Req, ids, req_timeouts),
        st.builds(Touch, ids),
        st.just(Nop()),
    )


def uses_binary_ids(cmd: Command) -> bool:
    """Whether ``cmd`` switches the connection to binary ids (spec §8.1, design §6)."""
    if isinstance(cmd, Identify):
        return cmd.request.extend_support
    if isinstance(cmd, Sub):
        return cmd.partition is not None
    return isinstance(cmd, (SubOrdered, SubAdvanced))


# ---------------------------------------------------------------------- messages


@st.composite
def messages(draw: st.DrawFn, *, extended: bool = False, detail: bool = False) -> Message:
    """Messages that survive ``encode_message``/``decode_message`` in the given layout."""
    ext_version = EXT_VERSION_NONE
    ext = b""
    if extended:
        ext_version = draw(
            st.one_of(
                st.sampled_from([EXT_VERSION_NONE, EXT_VERSION_TAG, EXT_VERSION_JSON]),
                st.integers(0, 255),
            )
        )
        if ext_version != EXT_VERSION_NONE:
            ext = draw(st.binary(max_size=300))
    offset = draw(st.integers(0, UINT64_MAX)) if detail else None
    raw_size = draw(st.integers(0, UINT32_MAX)) if detail else None
    return Message(
        timestamp=draw(st.integers(INT64_MIN, INT64_MAX)),
        attempts=draw(st.integers(0, 0xFFFF)),
        id=draw(
            st.one_of(st.integers(0, UINT64_MAX).map(hex_id), st.binary(min_size=16, max_size=16))
        ),
        body=draw(st.binary(max_size=300)),
        ext_version=ext_version,
        ext=ext,
        offset=offset,
        raw_size=raw_size,
    )


layouts: st.SearchStrategy[tuple[bool, bool]] = st.tuples(st.booleans(), st.booleans())
"""(extended, detail)."""

# ---------------------------------------------------------------------- error frames


@st.composite
def error_datas(draw: st.DrawFn) -> tuple[bytes, ProtocolError]:
    """An error frame's data and the error a client must read from it."""
    code = draw(
        st.one_of(
            st.sampled_from(sorted(NON_FATAL_ERROR_CODES | {"E_INVALID", "E_BAD_PROTOCOL"})),
            st.binary(max_size=20)
            .filter(lambda c: b" " not in c)
            .map(lambda c: c.decode("utf-8", "surrogateescape")),
        )
    )
    description = draw(
        st.none() | st.binary(max_size=60).map(lambda d: d.decode("utf-8", "surrogateescape"))
    )
    error = ProtocolError(code, description, fatal=code not in NON_FATAL_ERROR_CODES)
    return error.data, error


# ---------------------------------------------------------------------- sequences


@attrs.frozen
class Scenario:
    """A valid command sequence, the settings to run it under, and its events."""

    settings: ServerSettings
    commands: tuple[Command, ...]
    events: tuple[Event, ...]
    """What a fresh ServerConnection must return for ``stream``, in order."""

    @property
    def payload(self) -> bytes:
        """The commands' bytes, without the magic."""
        return encode_commands(self.commands)

    @property
    def stream(self) -> bytes:
        """Everything the client sends, magic first."""
        return MAGIC_V2 + self.payload


@st.composite
def scenarios(draw: st.DrawFn, *, max_commands: int = 6) -> Scenario:
    """Optional AUTH, IDENTIFYs and publishes, then maybe one SUB-family command
    followed by RDY/FIN/REQ/TOUCH/NOP/publishes with at most one CLS."""
    auth = draw(st.booleans())
    settings = ServerSettings(auth_enabled=auth)
    subscription = draw(st.none() | subscriptions)
    ordered = isinstance(subscription, SubOrdered)
    commands: list[Command] = []
    events: list[Event] = []

    def add(cmd: Command, *, event: bool = True) -> None:
        commands.append(cmd)
        if event:
            events.append(cmd)

    if auth:
        add(draw(auths))
    before = draw(
        st.lists(
            st.one_of(stateless, identifies(heartbeats=True, sample_rate_zero=ordered)),
            max_size=max_commands,
        )
    )
    for cmd in before:
        add(cmd)
    if subscription is None:
        return Scenario(settings, tuple(commands), tuple(events))
    add(subscription)
    binary = any(uses_binary_ids(c) for c in commands)
    after = draw(st.lists(st.one_of(consuming(binary=binary), stateless), max_size=max_commands))
    cls_at = draw(st.none() | st.integers(0, len(after)))
    for index, cmd in enumerate(after):
        if index == cls_at:
            add(Cls())
        # after CLS, RDY is silently ignored
        add(cmd, event=not (cls_at is not None and index >= cls_at and isinstance(cmd, Rdy)))
    if cls_at == len(after):
        add(Cls())
    return Scenario(settings, tuple(commands), tuple(events))


# ---------------------------------------------------------------------- one command in context


@attrs.frozen
class Case:
    """One command, with the prefix its state needs, as a tiny scenario."""

    settings: ServerSettings
    prefix: tuple[Command, ...]
    command: Command

    @property
    def stream(self) -> bytes:
        return MAGIC_V2 + encode_commands((*self.prefix, self.command))

    @property
    def events(self) -> list[Event]:
        return [*self.prefix, self.command]


_HEX_SUB: Final = Sub("t", "c")
_BINARY_IDENTIFY: Final = identify_event(IdentifyRequest(extend_support=True))


def _alone(strategy: st.SearchStrategy[Command]) -> st.SearchStrategy[Case]:
    return strategy.map(lambda c: Case(DEFAULT_SETTINGS, (), c))


@st.composite
def _consuming_case(draw: st.DrawFn, build: Callable[[bytes], Command]) -> Case:
    """FIN/REQ/TOUCH after a SUB: hex ids after a plain SUB, binary ids after an
    extend_support IDENTIFY or a partition/ordered/advanced SUB."""
    binary = draw(st.booleans())
    prefix: tuple[Command, ...] = (_HEX_SUB,)
    if binary:
        prefix = draw(
            st.sampled_from(
                [
                    (_BINARY_IDENTIFY, _HEX_SUB),
                    (Sub("t", "c", 0),),
                    (SubOrdered("t", "c"),),
                    (SubAdvanced("t", "c"),),
                ]
            )
        )
    return Case(DEFAULT_SETTINGS, prefix, build(draw(message_ids(binary=binary))))


def _req(timeout: int) -> Callable[[bytes], Command]:
    return lambda message_id: Req(message_id, timeout)


COMMAND_CASES: Final[dict[type, st.SearchStrategy[Case]]] = {
    Identify: _alone(identifies(heartbeats=False)),
    Auth: auths.map(lambda c: Case(ServerSettings(auth_enabled=True), (), c)),
    Sub: _alone(subs),
    SubOrdered: _alone(sub_ordereds),
    SubAdvanced: _alone(sub_advanceds),
    Pub: _alone(pubs),
    Mpub: _alone(mpubs),
    Dpub: _alone(dpubs),
    PubTrace: _alone(pub_traces),
    MpubTrace: _alone(mpub_traces),
    PubExt: _alone(pub_exts),
    MpubExt: _alone(mpub_exts),
    Rdy: rdys.map(lambda c: Case(DEFAULT_SETTINGS, (_HEX_SUB,), c)),
    Fin: _consuming_case(Fin),
    Req: req_timeouts.flatmap(lambda t: _consuming_case(_req(t))),
    Touch: _consuming_case(Touch),
    Cls: st.just(Case(DEFAULT_SETTINGS, (_HEX_SUB,), Cls())),
    Nop: _alone(st.just(Nop())),
    InternalCreateTopic: _alone(internal_create_topics),
}
"""For every command class, one command in a context where the server accepts it."""

# ---------------------------------------------------------------------- splitting and fuzz


def split(data: bytes, cuts: Sequence[int]) -> list[bytes]:
    """``data`` cut at the given offsets (clamped, sorted, duplicates give empty
    chunks, which are dropped: an empty chunk means EOF)."""
    points = sorted({min(max(c, 0), len(data)) for c in cuts} | {0, len(data)})
    chunks = [data[a:b] for a, b in itertools.pairwise(points)]
    return [c for c in chunks if c]


def cuts_for(length: int) -> st.SearchStrategy[list[int]]:
    return st.lists(st.integers(0, max(length, 0)), max_size=12)


_VERBS: Final = [
    b"IDENTIFY",
    b"AUTH",
    b"SUB",
    b"SUB_ORDERED",
    b"SUB_ADVANCED",
    b"RDY",
    b"FIN",
    b"REQ",
    b"TOUCH",
    b"CLS",
    b"NOP",
    b"PUB",
    b"MPUB",
    b"DPUB",
    b"PUB_TRACE",
    b"PUB_EXT",
    b"MPUB_TRACE",
    b"MPUB_EXT",
    b"INTERNAL_CREATE_TOPIC",
]

_any_command: st.SearchStrategy[Command] = st.one_of(
    stateless,
    identifies(heartbeats=False),
    auths,
    subscriptions,
    consuming(binary=True),
    consuming(binary=False),
    st.just(Cls()),
)

wire_tokens: st.SearchStrategy[bytes] = st.one_of(
    st.sampled_from(_VERBS),
    st.sampled_from(
        [b" ", b"\n", b"\r\n", b"\r", b"-1", b"0", b"+1", b"#ephemeral", b":", b"true"]
    ),
    # long digit runs, past Python's 4300-digit int() limit too
    st.integers(1, 5000).map(lambda n: b"9" * n),
    st.integers(INT64_MIN * 2, UINT64_MAX * 2).map(lambda n: b"%d" % n),
    st.integers(-(2**31), 2**31 - 1).map(lambda n: struct.pack(">i", n)),
    st.binary(max_size=40),
    _any_command.map(lambda c: encode_commands([c])),
    st.sampled_from(
        [
            b'{"snappy":true}',
            b'{"deflate":true,"deflate_level":9}',
            b'{"snappy":true,"deflate":true}',
            b'{"heartbeat_interval":-1}',
            b'{"sample_rate":50}',
            b'{"extend_support":true}',
            b'{"tls_v1":true,"feature_negotiation":true}',
            b'{"desired_tag":"' + b"t" * 101 + b'"}',
        ]
    ).map(lambda body: b"IDENTIFY\n" + struct.pack(">i", len(body)) + body),
    names.map(str.encode),
)
"""Pieces of a fuzz stream: verbs, separators, numbers, sizes, whole commands, noise."""

fuzz_streams: st.SearchStrategy[bytes] = st.one_of(
    st.binary(max_size=400),
    st.lists(wire_tokens, max_size=25).map(b"".join),
)
