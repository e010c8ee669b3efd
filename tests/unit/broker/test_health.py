"""Storage health: nsqd's OK / NOK text, one log line per fault episode."""

from __future__ import annotations

import errno
import logging
import sys
from typing import TYPE_CHECKING

from trionsq.broker.health import APPEND, PERSIST, StorageHealth, go_error_text
from trionsq.logs import OncePerInterval

if TYPE_CHECKING:
    import pytest


def full(name: str = "/data/t-0.000003.log") -> OSError:
    return OSError(errno.ENOSPC, "No space left on device", name)


def test_the_error_reads_as_go_words_it_and_names_only_the_file() -> None:
    assert go_error_text(full()) == "t-0.000003.log: no space left on device"
    assert go_error_text(OSError(errno.EMFILE, "Too many open files")) == "too many open files"


def test_healthy_until_an_area_fails_and_again_once_every_area_works(
    caplog: pytest.LogCaptureFixture,
) -> None:
    health = StorageHealth()
    assert (health.healthy, health.text) == (True, "OK")
    with caplog.at_level(logging.DEBUG, logger="trionsq.storage"):
        for _ in range(100):
            fault = health.failed(APPEND, full())
        health.failed(PERSIST, full("/data/metadata.json"))
        assert fault.reason == "t-0.000003.log: no space left on device"
        assert health.text == "NOK - metadata.json: no space left on device"
        health.succeeded(APPEND)
        assert not health.healthy  # the states still cannot be written
        health.succeeded(PERSIST)
        health.succeeded(PERSIST)  # nothing to end: says nothing
    assert (health.healthy, health.text) == (True, "OK")
    lines = [record.getMessage() for record in caplog.records]
    assert lines == [
        "storage: appending messages failed: t-0.000003.log: no space left on device"
        " (logged once until it succeeds again)",
        "storage: saving channel states and metadata failed: metadata.json: no space left"
        " on device (logged once until it succeeds again)",
        "storage: appending messages works again after 100 failed attempts",
        "storage: saving channel states and metadata works again after 1 failed attempts",
    ]


def test_a_repeated_complaint_passes_once_per_interval_without_its_traceback() -> None:
    now = [0.0]
    once = OncePerInterval(60.0, clock=lambda: now[0])

    def record() -> logging.LogRecord:
        try:
            raise OSError(errno.EMFILE, "Too many open files")
        except OSError:
            info = sys.exc_info()
        return logging.LogRecord("trio", logging.ERROR, __file__, 1, "accept", (), info)

    first = record()
    assert once.filter(first)
    assert first.exc_info is None
    now[0] = 59.9
    assert not once.filter(record())
    now[0] = 60.0
    assert once.filter(record())
