"""Prometheus' own linter on a real broker's ``/metrics`` (issue 30 item 13).

``promtool check metrics`` (Debian's prometheus package; ``make`` installs it before
the suite, as it does chromium) reads the exposition of a broker with what every
family can show: plain, partitioned and ephemeral topics and channels, consumers (one
with its own rate limit, two in a consumer group), end-to-end latency samples at
several quantiles, a channel rate limit and a publish limit, a paused channel. A
machine without promtool fails here rather than skipping, so a green run means the
linter really read the text.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Final

import pytest
import trio

from trionsq import NsqdConfig
from trionsq.protocol import Fin, IdentifyRequest, Mpub, Pub, Rdy, Sub
from trionsq.protocol.client import encode_identify
from trionsq.testing import wait_until

from .raw import http, next_frame, next_message, ok, publish

if TYPE_CHECKING:
    from trionsq.nursery_tree import BoundAddresses

    from .raw import Clients

PROMTOOL: Final = Path("/usr/bin/promtool")
NSQ_EXPORTER_COUNTS: Final = frozenset(
    {
        "nsq_topic_channel_count",
        "nsq_topic_message_count",
        "nsq_channel_client_count",
        "nsq_channel_message_count",
        "nsq_channel_in_flight_count",
        "nsq_channel_deferred_count",
        "nsq_channel_requeue_count",
        "nsq_channel_timeout_count",
        "nsq_client_finish_count",
        "nsq_client_message_count",
        "nsq_client_ready_count",
        "nsq_client_in_flight_count",
        "nsq_client_requeue_count",
    }
)
"""lovoo/nsq_exporter's gauges named ``*_count`` (collector/stats_*.go), kept as named."""
COUNT_SUFFIX_PROBLEM: Final = (
    'non-histogram and non-summary metrics should not have "_count" suffix'
)
CONFIG: Final = NsqdConfig.loopback(e2e_processing_latency_percentiles=(0.99, 0.95, 0.5))


@pytest.fixture
def nsqd_config() -> NsqdConfig:
    return CONFIG


async def post(addresses: BoundAddresses, path: str) -> None:
    response = await http(addresses, "POST", path)
    assert response.status_code == 200, (path, response.content)


async def test_promtool_check_metrics_passes_on_a_busy_broker(
    nsqd: BoundAddresses, clients: Clients
) -> None:
    assert PROMTOOL.exists(), "promtool missing: `make /usr/bin/promtool` installs it"
    broker = nsqd.broker
    producer = await clients.connect(nsqd.tcp)
    await post(nsqd, "/topic/create?topic=parts&partition_num=2")
    await post(nsqd, "/topic/create?topic=orders")
    await post(nsqd, "/channel/rate_limit?topic=orders&channel=billing&msgs_per_sec=1000")
    await post(nsqd, "/topic/publish_limit?topic=orders&msgs_per_sec=100000")
    await post(nsqd, "/channel/create?topic=orders&channel=audit")
    await post(nsqd, "/channel/pause?topic=orders&channel=audit")
    # consumers: a plain one, one with its own limit, an ephemeral one, a group of two
    billing = await clients.subscribe(nsqd.tcp, "orders", "billing", rdy=20)
    limited = await clients.subscribe(
        nsqd.tcp,
        "orders",
        "limited",
        rdy=20,
        identify=IdentifyRequest(max_msgs_per_sec=500),
    )
    await clients.subscribe(nsqd.tcp, "orders", "tail#ephemeral", rdy=1)
    for name in ("worker-a", "worker-b"):
        for partition in (0, 1):
            member = await clients.connect(nsqd.tcp)
            await member.stream.send_all(encode_identify(IdentifyRequest(group_member=name)))
            assert ok(await next_frame(member))
            await member.send(Sub("parts", "group", partition), Rdy(10))
            assert ok(await next_frame(member))
    await publish(producer, Mpub("orders", tuple(b"o%d" % i for i in range(20))))
    await publish(producer, *(Pub("parts", b"p", p) for p in (0, 1) for _ in range(5)))
    for consumer in (billing, limited):  # latency samples: finished messages
        finished = [await next_message(consumer) for _ in range(20)]
        await consumer.send(*(Fin(m.id) for m in finished))
    await wait_until(
        lambda: all(
            broker.topics["orders"].partitions[0].channels[name].statistics().in_flight_count == 0
            for name in ("billing", "limited")
        ),
        "the FINs counted",
        within=10,
    )
    response = await http(nsqd, "GET", "/metrics")
    assert response.status_code == 200
    text = response.content
    for present in (
        b'quantile="0.5"',
        b'channel="billing"',
        b'partition="1"',
        b"nsq_client_state{",
    ):
        assert present in text, present
    problems = await promtool(text)
    # nsq_exporter's own names (kept, for its dashboards) are gauges ending in "_count",
    # which the linter flags; that is all it may say about the whole exposition
    suffixed = {f"{name} {COUNT_SUFFIX_PROBLEM}" for name in NSQ_EXPORTER_COUNTS}
    assert problems, "promtool flags nsq_exporter's names: it really linted"
    assert set(problems) <= suffixed, "\n".join(problems)
    # and everything else, every family trionsq names itself, passes outright
    assert await promtool(without_families(text, NSQ_EXPORTER_COUNTS)) == []


async def promtool(exposition: bytes) -> list[str]:
    """``promtool check metrics`` on ``exposition``: its problems, one per line (none: it
    passed, exit status 0; lint problems: status 3; a text it cannot parse fails the
    test)."""
    result = await trio.run_process(
        [str(PROMTOOL), "check", "metrics"],
        stdin=exposition,
        capture_stdout=True,
        capture_stderr=True,
        check=False,
    )
    report = (result.stdout + result.stderr).decode()
    problems = [line.strip() for line in report.splitlines() if line.strip()]
    assert result.returncode == (3 if problems else 0), report
    return problems


def without_families(exposition: bytes, names: frozenset[str]) -> bytes:
    """The exposition minus the families ``names`` (their HELP, TYPE and samples)."""
    kept = []
    for line in exposition.splitlines(keepends=True):
        words = line.split(maxsplit=3)
        if line.startswith(b"#") and len(words) > 2:
            name = words[2]
        else:
            name = line.split(b"{", 1)[0].split(b" ", 1)[0]
        if name.decode() not in names:
            kept.append(line)
    return b"".join(kept)
