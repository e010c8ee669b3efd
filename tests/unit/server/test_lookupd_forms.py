"""Which registration form a broker uses with a lookupd, and the bytes of each (issue 38)."""

from __future__ import annotations

import pytest

from trionsq.broker.topology import TopologyChange
from trionsq.protocol.lookupd import LookupdInfo, Register, Unregister, encode_lookup_command
from trionsq.server.lookupd_peers import change_commands, knows_partitions

NSQLOOKUPD = LookupdInfo(4160, 4161, "1.3.0", "lk", "lk")
"""nsqlookupd 1.3's IDENTIFY answer, and trionsq's (the same bytes)."""
YOUZAN = LookupdInfo(4160, 4161, "0.3.7-HA.1.13.0", "lk", "lk")


@pytest.mark.parametrize(
    ("reply", "info", "expected"),
    [
        (NSQLOOKUPD, {"version": "1.3.0"}, False),  # nsqlookupd 1.3's /info
        (NSQLOOKUPD, None, False),  # no /info answer
        (NSQLOOKUPD, [], False),
        (NSQLOOKUPD, {"version": "1.3.0", "trionsq_version": "0.2.0"}, True),
        (NSQLOOKUPD, {"version": "0.3.7-HA.1.13.0", "ha_support": False}, True),
        (YOUZAN, None, True),  # Youzan's IDENTIFY answer says so by itself
    ],
)
def test_knows_partitions(reply: LookupdInfo, info: object, expected: bool) -> None:
    assert knows_partitions(reply, info) is expected


def wire(commands: list[Register | Unregister]) -> bytes:
    return b"".join(encode_lookup_command(command) for command in commands)


def test_a_topic_with_three_partitions_in_each_form() -> None:
    created = TopologyChange("t", None, True, (0, 1, 2))
    assert wire(change_commands(created, True)) == b"REGISTER t 0\nREGISTER t 1\nREGISTER t 2\n"
    assert wire(change_commands(created, False)) == b"REGISTER t\n"
    grown = TopologyChange("t", None, True, (3,), whole=False)
    assert wire(change_commands(grown, True)) == b"REGISTER t 3\n"
    assert change_commands(grown, False) == []
    left = TopologyChange("t", "c", False, (1,), whole=False)
    assert wire(change_commands(left, True)) == b"UNREGISTER t 1 c\n"
    assert change_commands(left, False) == []
    gone = TopologyChange("t", "c", False, (2,))
    assert wire(change_commands(gone, True)) == b"UNREGISTER t 2 c\n"
    assert wire(change_commands(gone, False)) == b"UNREGISTER t c\n"
