"""TTL rules: the shorter of the topic's TTL and a message's ``##ttl`` holds, and
headers are looked at only once a message with ``##ttl`` was published."""

from __future__ import annotations

from trionsq.broker.ttl import TopicTtl, header_ttl_ns
from trionsq.queues.record import Record

SECOND = 10**9


def _ext(header: bytes) -> Record:
    return Record(0, 0, 1, 0, b"body", 0, 4, header)


def test_the_shorter_limit_holds() -> None:
    rules = TopicTtl(ttl_ns=10 * SECOND, headers=True)
    assert rules.limit_ns(_ext(b'{"##ttl":"2"}')) == 2 * SECOND
    assert rules.limit_ns(_ext(b'{"##ttl":"60"}')) == 10 * SECOND
    assert rules.limit_ns(_ext(b"{}")) == 10 * SECOND
    assert TopicTtl(headers=True).limit_ns(_ext(b'{"##ttl":"0.5"}')) == SECOND // 2
    assert TopicTtl().limit_ns(_ext(b'{"##ttl":"0.5"}')) == 0  # never published with one


def test_headers_are_noticed_at_the_first_publish_that_has_one() -> None:
    rules = TopicTtl()
    assert not rules.note_published([b'{"a":"b"}', b"{}"])
    assert not rules.active
    assert rules.note_published([b"{}", b'{"##ttl":"5"}'])
    assert rules.active
    assert not rules.note_published([b'{"##ttl":"5"}'])  # once is enough


def test_a_bad_or_missing_header_ttl_is_none() -> None:
    for header in (b"not json", b"[]", b'{"##ttl":5}', b'{"##ttl":"-1"}', b'{"##ttl":"x"}', b"{}"):
        assert header_ttl_ns(header) is None
    assert header_ttl_ns(b'{"##ttl":"1.5"}') == 3 * SECOND // 2
