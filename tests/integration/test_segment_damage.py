"""A damaged byte in a segment costs exactly its record (issue 14): real broker, real
files, real sockets. Each case publishes durably, stops the broker, flips one byte,
restarts, and reads everything back."""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING

import httpx
import pytest
import trio
import trio.testing

from trionsq import NsqdConfig, serve_nsqd
from trionsq.protocol import Fin, Mpub, Rdy
from trionsq.queues.record import FIXED_SIZE

from .raw import bodies, next_message, publish, quiet

if TYPE_CHECKING:
    from pathlib import Path

    from trionsq.nursery_tree import BoundAddresses

    from .raw import Clients

TOPIC = "damaged"
TOTAL = 200


def body_of(number: int) -> bytes:
    """Unique, findable in a segment, and long enough to land in the middle of one."""
    return b"message-%04d-" % number + bytes([65 + number % 26]) * 80


@pytest.mark.parametrize(
    ("where", "part"),
    [
        ("active", "size"),  # (a) a size field in the middle of the active segment
        ("active", "body"),  # (b) a body byte: the checksum no longer matches
        ("older", "size"),  # (c) a size field in an older, already rolled segment
        ("older", "body"),
    ],
)
async def test_a_flipped_byte_loses_exactly_its_record(
    clients: Clients,
    nursery: trio.Nursery,
    tmp_path: Path,
    autojump_clock: trio.testing.MockClock,
    caplog: pytest.LogCaptureFixture,
    where: str,
    part: str,
) -> None:
    autojump_clock.autojump_threshold = 0.1  # real sockets and file threads
    rolling = where == "older"
    config = NsqdConfig.loopback(
        data_path=str(tmp_path), max_bytes_per_file=4096 if rolling else 1 << 20
    )
    sent = [body_of(number) for number in range(TOTAL)]
    # 127-byte records in batches of 10: 30 records to a 4 KiB segment, so message 45
    # is in the middle of the second one
    victim = 45 if rolling else TOTAL // 2
    async with trio.open_nursery() as first:
        addresses: BoundAddresses = await first.start(serve_nsqd, config)
        await clients.subscribe(addresses.tcp, TOPIC, "everything")
        # this channel finishes everything before the victim: after the restart its
        # cursor starts right at the damaged record
        resumed = await clients.subscribe(addresses.tcp, TOPIC, "resumed")
        producer = await clients.connect(addresses.tcp)
        for start in range(0, TOTAL, 10):
            await publish(producer, Mpub(TOPIC, tuple(sent[start : start + 10])))
        await resumed.send(Rdy(victim))
        for _ in range(victim):
            await resumed.send(Fin((await next_message(resumed)).id))
        await quiet(resumed, 1)
        first.cancel_scope.cancel()  # a graceful stop: channel positions are saved
    await clients.close_all()
    segment, damaged_record = damage(tmp_path, sent, victim, rolling=rolling, part=part)
    caplog.set_level(logging.WARNING, "trionsq.storage")
    again: BoundAddresses = await nursery.start(serve_nsqd, config)
    reader = await clients.subscribe(again.tcp, TOPIC, "everything", rdy=TOTAL)
    received = bodies(await quiet(reader, 2))
    assert received == sent[:victim] + sent[victim + 1 :]
    reader = await clients.subscribe(again.tcp, TOPIC, "resumed", rdy=TOTAL)
    assert bodies(await quiet(reader, 2)) == sent[victim + 1 :]

    assert again.http is not None
    async with httpx.AsyncClient(base_url=f"http://{again.http[0]}:{again.http[1]}") as http:
        answer = await http.get(f"/stats?format=json&topic={TOPIC}")
    (topic,) = answer.json()["topics"]
    assert topic["lost_count"] == 1

    (bad,) = bad_files(segment)
    assert bad.read_bytes() == damaged_record  # the damaged bytes, as found
    lines = [r.getMessage() for r in caplog.records if "damaged record" in r.getMessage()]
    assert len(lines) == 1
    assert segment.name in lines[0]
    assert bad.name in lines[0]


def damage(
    data_path: Path, sent: list[bytes], victim: int, *, rolling: bool, part: str
) -> tuple[Path, bytes]:
    """Flip one byte of message ``victim``'s record: in its size field (the third
    byte, +256: a plausible size that frames the wrong bytes) or in its body. Returns
    the segment and the record's bytes as damaged."""
    segments = sorted(data_path.glob(f"{TOPIC}-0.*.log"))
    assert len(segments) > 3 if rolling else len(segments) == 1
    segment = segments[1] if rolling else segments[0]
    data = bytearray(segment.read_bytes())
    inside = [n for n, body in enumerate(sent) if body in data]
    assert inside[0] < victim < inside[-1]
    start = data.index(sent[victim]) - FIXED_SIZE  # plain records: the body follows the fields
    data[start + 2 if part == "size" else start + FIXED_SIZE + 20] ^= 0x01
    segment.write_bytes(bytes(data))
    return segment, bytes(data[start : start + FIXED_SIZE + len(sent[victim])])


def bad_files(segment: Path) -> list[Path]:
    return sorted(segment.parent.glob(f"{segment.name}.*.bad"))
