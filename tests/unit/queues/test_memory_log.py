"""The in-memory partition log: ids from 1, chained offsets, reads and discards."""

from __future__ import annotations

from trionsq.queues.memory_log import MemoryLog
from trionsq.queues.record import record_size


def test_append_assigns_ids_and_offsets() -> None:
    log = MemoryLog()
    first = log.append([b"a" * 200], timestamp=1)
    batch = log.append([b"b", b"cc", b"ddd"], timestamp=2, trace_ids=[7, 8, 9])
    assert [(r.internal_id, r.offset) for r in first] == [(1, 0)]
    assert first[0].raw_size == record_size(200) == 234
    assert [r.internal_id for r in batch] == [2, 3, 4]
    assert [r.offset for r in batch] == [234, 234 + 35, 234 + 35 + 36]
    assert [r.trace_id for r in batch] == [7, 8, 9]
    assert log.next_id == 5
    assert log.next_offset == batch[-1].end
    assert log.bytes_held == 206
    assert len(log) == 4


def test_ext_records_count_their_header() -> None:
    log = MemoryLog()
    (record,) = log.append([b"x"], timestamp=0, ext_version=4, exts=[b'{"a":1}'])
    assert record.raw_size == record_size(1, 4, 7)
    assert record.ext == b'{"a":1}'


def test_deferred_records_carry_their_time() -> None:
    log = MemoryLog()
    (record,) = log.append([b"x"], timestamp=5, deliver_at=99)
    assert record.deliver_at == 99
    assert record.raw_size == record_size(1, deferred=True)


def test_read_get_and_discard() -> None:
    log = MemoryLog()
    log.append([b"%d" % i for i in range(5000)], timestamp=0)
    assert [r.internal_id for r in log.read(10, 3)] == [10, 11, 12]
    assert log.discard_before(3000) == 2999
    assert log.start_id == 3000
    assert log.read(5, 2)[0].internal_id == 3000  # what is gone is skipped
    assert log.get(2999) is None
    record = log.get(4000)
    assert record is not None
    assert record.body == b"3999"
    assert log.start_offset == log.read(3000, 1)[0].offset
    assert log.discard_before(10**9) == 2001
    assert len(log) == 0
    assert log.start_offset == log.next_offset
    assert log.bytes_held == 0
