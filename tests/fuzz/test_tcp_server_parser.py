"""Fuzz the broker's protocol V2 parser (:class:`ServerConnection`): any bytes, split
into reads anywhere, give commands and :class:`ProtocolError` values only; a fatal
error ends the list and closes the parser; what it holds for an incomplete command
stays within the line and body limits."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from trionsq.protocol import MAGIC_V2
from trionsq.protocol import commands as command_module
from trionsq.protocol.errors import ProtocolError
from trionsq.protocol.server import PublishHeader, ServerConnection
from trionsq.protocol.settings import ServerSettings

from ..unit.protocol.strategies import Scenario, scenarios
from .mutations import cuts, fuzz_settings, mutated, split

SETTINGS = [
    ServerSettings(),
    ServerSettings(auth_enabled=True),
    ServerSettings(tls_required=True),
    ServerSettings(max_msg_size=64, max_body_size=256, max_line_length=32),
]
VERBS = [
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


def gate(header: PublishHeader) -> ProtocolError | None:
    """A broker stand-in that is pure: topics starting with ``x`` do not exist."""
    if header.topic.startswith("x"):
        return ProtocolError("E_TOPIC_NOT_EXIST", "", fatal=header.verb != "PUB")
    return None


def run(settings: ServerSettings, reads: list[bytes]) -> None:
    connection = ServerConnection(settings, publish_gate=gate)
    limit = max(settings.max_line_length, settings.max_body_size, settings.max_msg_size)
    for data in [*reads, b""]:
        was_closed = connection.closed
        events = connection.receive_data(data)
        if was_closed:
            assert events == []
        for index, event in enumerate(events):
            if isinstance(event, ProtocolError):
                if event.fatal:
                    assert index == len(events) - 1, "a fatal error ends the list"
                    assert connection.closed
            else:
                assert type(event).__module__ == command_module.__name__, event
        assert connection.buffered <= limit + 4


# A line of words the parser knows, so fuzzing reaches the body readers.
command_lines = st.builds(
    lambda verb, args, tail: verb + b"".join(b" " + a for a in args) + b"\n" + tail,
    st.sampled_from(VERBS),
    st.lists(st.binary(max_size=12), max_size=4),
    st.binary(max_size=64),
)


@fuzz_settings
@given(
    settings=st.sampled_from(SETTINGS),
    data=st.binary(max_size=2048),
    magic=st.booleans(),
    cut_at=cuts,
)
def test_arbitrary_bytes(
    settings: ServerSettings, data: bytes, magic: bool, cut_at: list[int]
) -> None:
    run(settings, split((MAGIC_V2 if magic else b"") + data, cut_at))


@fuzz_settings
@given(
    settings=st.sampled_from(SETTINGS),
    lines=st.lists(command_lines, max_size=8),
    cut_at=cuts,
)
def test_known_verbs_with_arbitrary_arguments(
    settings: ServerSettings, lines: list[bytes], cut_at: list[int]
) -> None:
    run(settings, split(MAGIC_V2 + b"".join(lines), cut_at))


@fuzz_settings
@given(data=st.data(), scenario=scenarios(), cut_at=cuts)
def test_mutated_valid_streams(data: st.DataObject, scenario: Scenario, cut_at: list[int]) -> None:
    stream = data.draw(mutated(scenario.stream))
    run(scenario.settings, split(stream, cut_at))
