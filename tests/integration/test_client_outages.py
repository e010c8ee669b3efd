"""trionsq.client through a broker outage (issue 31, items 4 and 5): the loss and
every failed reconnect are WARNINGs and the return an INFO, so an outage shows at
default log levels; publishes made meanwhile can wait for the broker
(``publish_timeout``) instead of failing at once, and an ext topic's keyed
publishes are stored once however often they are sent again."""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING

from trionsq import NsqdConfig
from trionsq.client import open_consumer
from trionsq.testing import wait_until

from .test_trio_client import run_broker, tcp

if TYPE_CHECKING:
    import pytest
    import trio


def client_records(caplog: pytest.LogCaptureFixture, level: int) -> list[str]:
    return [
        record.getMessage()
        for record in caplog.records
        if record.name.startswith("trionsq.client") and record.levelno == level
    ]


async def test_an_outage_is_logged_at_warning_and_the_return_at_info(
    nursery: trio.Nursery, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="trionsq.client")
    first, stop = await nursery.start(run_broker, NsqdConfig.loopback())
    address = tcp(first)
    async with open_consumer("outage", "c", address) as consumer:
        stop.cancel()  # the broker goes; the consumer tries again and again
        await wait_until(lambda: consumer.reconnects >= 3, "three failed reconnects")
        warnings = client_records(caplog, logging.WARNING)
        assert any("lost" in line and address in line for line in warnings), warnings
        failed = [line for line in warnings if "reconnect" in line and address in line]
        assert len(failed) >= 2, warnings  # each failure, not only the first
        assert not [line for line in client_records(caplog, logging.INFO) if "back" in line]
        await nursery.start(run_broker, NsqdConfig.loopback(tcp_address=address))
        await wait_until(lambda: consumer.connections == 1, "subscribed again")
    back = [line for line in client_records(caplog, logging.INFO) if "back" in line]
    assert len(back) == 1, client_records(caplog, logging.INFO)
    assert address in back[0]
