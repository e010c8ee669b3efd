"""go-nsq's RDY rules on a consumer's links: shares, more links than
max_in_flight, and backoff's stop/test/resume steps."""

from __future__ import annotations

import random
from typing import TYPE_CHECKING, cast

import pytest

from trionsq.client.discovery import Target
from trionsq.client.readiness import Link, ReadyControl

if TYPE_CHECKING:
    from trionsq.client.connection import Connection
    from trionsq.protocol.commands import Rdy


class Recorder:
    """Stands in for a connection: keeps the RDY commands it was given."""

    def __init__(self) -> None:
        self.closed = False
        self.sent: list[int] = []

    def send(self, command: Rdy) -> None:
        self.sent.append(command.count)


def links(count: int) -> list[Link]:
    return [Link(cast("Connection", Recorder()), Target(f"h:{i}"), 0.0) for i in range(count)]


def rdys(control: ReadyControl) -> list[int]:
    return [link.rdy for link in control.links]


def test_max_in_flight_is_shared_and_shares_follow_the_connections() -> None:
    control = ReadyControl(10)
    a, b, c = links(3)
    control.add(a)
    assert rdys(control) == [10]
    control.add(b)
    control.add(c)
    assert rdys(control) == [3, 3, 3]
    control.remove(b)
    assert rdys(control) == [5, 5]
    assert cast("Recorder", a.connection).sent == [10, 5, 3, 5]  # only changes are sent


def test_more_links_than_max_in_flight_gives_rdy_1_to_that_many_and_rotates_idle_ones() -> None:
    control = ReadyControl(2, chooser=random.Random(7))
    for link in links(5):
        control.add(link)
    assert control.crowded
    assert sorted(rdys(control)) == [0, 0, 0, 1, 1]
    busy = [link for link in control.links if link.rdy]
    busy[0].last_message = 9.5  # still busy at 10.0, the other has been idle
    control.redistribute(10.0, idle=1.0)
    assert sorted(rdys(control)) == [0, 0, 0, 1, 1]
    assert busy[0].rdy == 1
    assert busy[1].rdy == 0
    seen: set[int] = set()
    for step in range(40):  # every link gets its turn eventually
        control.redistribute(20.0 + 2 * step, idle=1.0)
        seen.update(i for i, link in enumerate(control.links) if link.rdy)
    assert seen == set(range(5))


def test_backoff_stops_then_tests_with_one_link_then_recovers_step_by_step() -> None:
    control = ReadyControl(9, backoff_unit=0.5, max_backoff=3.0)
    for link in links(3):
        control.add(link)
    assert control.failed() == 0.5
    assert control.stopped
    assert rdys(control) == [0, 0, 0]
    assert control.failed() is None  # results during the wait do not count
    assert control.succeeded() is None
    control.resume()
    assert sorted(rdys(control)) == [0, 0, 1]
    assert control.failed() == 1.0  # level 2
    control.resume()
    assert control.succeeded() == 0.5  # level 1: stop again, shorter
    control.resume()
    assert control.succeeded() is None  # level 0: full speed
    assert rdys(control) == [3, 3, 3]


def test_backoff_is_capped() -> None:
    control = ReadyControl(1, backoff_unit=1.0, max_backoff=5.0)
    control.add(links(1)[0])
    waits = []
    for _ in range(12):
        waits.append(control.failed())
        control.resume()
    assert waits[:4] == [1.0, 2.0, 4.0, 5.0]
    assert set(waits[3:]) == {5.0}


def test_zero_max_in_flight_is_refused() -> None:
    with pytest.raises(ValueError, match="at least 1"):
        ReadyControl(0)
