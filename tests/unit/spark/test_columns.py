"""A page of records as the source's Arrow rows, without Spark."""

from __future__ import annotations

import orjson

from trionsq.protocol.record_batch import decode_record_batch, encode_record_batch
from trionsq.queues.record import Record
from trionsq.spark.arrow_page import to_arrow


def test_a_page_becomes_rows_over_its_own_bytes() -> None:
    header = orjson.dumps({"##client_dispatch_tag": "eu", "n": 3, "s": "x"})
    records = [
        Record(0, 40, 1, 1_700_000_000_123_456_789, b"plain"),
        Record(40, 90, 2, 1_700_000_000_223_456_789, b"ext", 7, 4, header),
        Record(130, 38, 3, 1_700_000_000_323_456_789, b"tag", 0, 2, b"us"),
    ]
    page = decode_record_batch(
        encode_record_batch(records, next_offset=168, latest_offset=168, earliest_offset=0)
    )
    rows = to_arrow(page, "t", 4, 3).to_pylist()
    assert [r["body"] for r in rows] == [b"plain", b"ext", b"tag"]
    assert [r["offset"] for r in rows] == [0, 40, 130]
    assert [r["id"] for r in rows] == [1, 2, 3]
    assert {r["partition"] for r in rows} == {4}
    assert [r["trace_id"] for r in rows] == [None, "7", None]
    assert [r["tag"] for r in rows] == [None, "eu", "us"]
    assert rows[0]["headers"] is None
    assert dict(rows[1]["headers"]) == {"##client_dispatch_tag": "eu", "n": "3", "s": "x"}
    assert rows[0]["timestamp"].timestamp() == 1_700_000_000.123456
    cut = to_arrow(page, "t", 4, 2)
    assert cut.num_rows == 2
