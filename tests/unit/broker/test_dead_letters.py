"""The dead-letter header: the message's own JSON headers, plus where it came from."""

from __future__ import annotations

import orjson

from trionsq.broker.dead_letters import DeadLetter, dead_letter_header
from trionsq.queues.record import Record


def _record(ext_version: int, ext: bytes) -> Record:
    return Record(0, 0, 1, 5, b"body", 0, ext_version, ext)


def test_a_plain_message_gets_the_five_keys() -> None:
    header = dead_letter_header(DeadLetter(_record(0, b""), 3), "orders", "billing", 2)
    assert orjson.loads(header) == {
        "##dead_from_topic": "orders",
        "##dead_from_channel": "billing",
        "##dead_from_partition": "2",
        "##dead_attempts": "3",
        "##dead_reason": "max_attempts",
    }


def test_an_ext_message_keeps_its_headers_and_ours_win() -> None:
    ext = b'{"region":"eu","##dead_attempts":"forged","##client_dispatch_tag":"red"}'
    fields = orjson.loads(dead_letter_header(DeadLetter(_record(4, ext), 7), "t", "c", 0))
    assert fields["region"] == "eu"
    assert fields["##client_dispatch_tag"] == "red"  # the dead topic can be tag-dispatched
    assert fields["##dead_attempts"] == "7"


def test_headers_that_are_not_a_json_object_are_left_behind() -> None:
    for ext in (b"not json", b"[1,2]", b'"text"'):
        fields = orjson.loads(
            dead_letter_header(DeadLetter(_record(4, ext), 1, "ttl"), "t", "c", 0)
        )
        assert set(fields) == {
            "##dead_from_topic",
            "##dead_from_channel",
            "##dead_from_partition",
            "##dead_attempts",
            "##dead_reason",
        }
