"""A plain PUB's append to the durable log (issue 37): ``TopicLog.append_one``, whose
record is encoded and written by one call (``append_record``, compiled where built),
must leave what ``append([body], timestamp)`` leaves: the same bytes in the same
files, the same records, sparse index and bookkeeping, and nothing on a failed
write. Each test runs with both twins of ``append_record``."""

from __future__ import annotations

import errno
import os
import resource
import signal
from typing import TYPE_CHECKING

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from trionsq.queues import record_codec, segment_writer
from trionsq.queues.record import Record, encode_record
from trionsq.queues.topic_log import TopicLog

from ..test_speedups import _compiled

if TYPE_CHECKING:
    from collections.abc import Callable
    from pathlib import Path

    from trionsq.queues.segment_format import _Segment

NAME = "t-0"


def twin(name: str) -> Callable[[int, bytes, int, int, int, type[Record]], Record]:
    if name == "compiled":
        append: Callable[[int, bytes, int, int, int, type[Record]], Record]
        append = _compiled().append_record
        return append
    return record_codec._append_record_py


@pytest.fixture(params=["compiled", "pure"])
def append_twin(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> str:
    """A test once with each twin of the one-record append."""
    monkeypatch.setattr(segment_writer, "_append_record", twin(request.param))
    return str(request.param)


def _open(directory: Path, max_bytes: int = 1 << 20) -> TopicLog:
    log, _ = TopicLog.open(
        directory, NAME, max_bytes_per_file=max_bytes, cache_records=20, index_interval=256
    )
    return log


def _files(directory: Path) -> dict[str, bytes]:
    return {path.name: path.read_bytes() for path in sorted(directory.glob("*.log"))}


def _check_of(segment: _Segment) -> tuple[list[tuple[int, int, int]], int] | None:
    """A segment's sparse index and greatest timestamp (None: not loaded)."""
    check = segment.check
    return None if check is None else (list(check.index), check.timestamp_max)


def _everything(log: TopicLog) -> list[Record]:
    return log.read_cold(log.start_id, 1 << 20, max_bytes=1 << 62)


@given(
    body=st.binary(max_size=5000),
    timestamp=st.integers(min_value=-(2**63), max_value=2**63 - 1),
    internal_id=st.integers(min_value=1, max_value=2**64 - 1),
    offset=st.integers(min_value=0, max_value=2**62),
)
@settings(max_examples=60, suppress_health_check=[HealthCheck.function_scoped_fixture])
def test_both_twins_write_the_record_and_return_it(
    tmp_path: Path, body: bytes, timestamp: int, internal_id: int, offset: int
) -> None:
    written = {}
    for name in ("compiled", "pure"):
        path = tmp_path / name
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC)
        try:
            record = twin(name)(fd, body, timestamp, internal_id, offset, Record)
        finally:
            os.close(fd)
        written[name] = (path.read_bytes(), record)
    expected = Record(offset, 34 + len(body), internal_id, timestamp, body)
    assert written["compiled"] == written["pure"] == (encode_record(expected), expected)


plans = st.lists(
    st.tuples(st.binary(max_size=400), st.integers(min_value=1, max_value=60)),
    min_size=1,
    max_size=40,
)


@given(plan=plans, max_bytes=st.sampled_from([300, 1000, 1 << 20]))
@settings(max_examples=40, deadline=None, suppress_health_check=list(HealthCheck))
def test_append_one_leaves_what_append_leaves(
    tmp_path_factory: pytest.TempPathFactory,
    append_twin: str,
    plan: list[tuple[bytes, int]],
    max_bytes: int,
) -> None:
    one, batch = tmp_path_factory.mktemp("one"), tmp_path_factory.mktemp("batch")
    logs = _open(one, max_bytes), _open(batch, max_bytes)
    returned: tuple[list[Record], list[Record]] = ([], [])
    for body, timestamp in plan:  # timestamps go back at times: the clock may
        returned[0].append(logs[0].append_one(body, timestamp))
        returned[1].extend(logs[1].append([body], timestamp))
    assert returned[0] == returned[1]
    for field in ("next_id", "next_offset", "segment_count", "unsynced"):
        assert getattr(logs[0], field) == getattr(logs[1], field), field
    assert [_check_of(segment) for segment in logs[0]._segments] == [
        _check_of(segment) for segment in logs[1]._segments
    ]
    assert logs[0].read(1, 100) == logs[1].read(1, 100)  # the tail cache
    for log in logs:
        log.close()
    assert _files(one) == _files(batch)
    reopened = _open(one, max_bytes)
    assert _everything(reopened) == returned[1]
    reopened.close()


def test_a_failed_append_one_appends_nothing(append_twin: str, tmp_path: Path) -> None:
    """A write the file system cuts short (here the file size limit: the first write
    takes part, the next fails) leaves the file as it was; the log goes on."""
    log = _open(tmp_path)
    first = log.append_one(b"a" * 100, 1)
    (path,) = tmp_path.glob("*.log")
    size = path.stat().st_size
    limits = resource.getrlimit(resource.RLIMIT_FSIZE)
    handler = signal.signal(signal.SIGXFSZ, signal.SIG_IGN)  # EFBIG rather than a signal
    resource.setrlimit(resource.RLIMIT_FSIZE, (size + 50, limits[1]))
    try:
        with pytest.raises(OSError, match="too large") as refused:
            log.append_one(b"b" * 300, 2)
    finally:
        resource.setrlimit(resource.RLIMIT_FSIZE, limits)
        signal.signal(signal.SIGXFSZ, handler)
    assert refused.value.errno == errno.EFBIG
    assert refused.value.filename == str(path)
    assert path.stat().st_size == size
    assert (log.next_id, log.unsynced) == (2, 1)
    last = log.append_one(b"c", 3)
    log.close()
    log = _open(tmp_path)
    assert _everything(log) == [first, last]
    log.close()
