"""pynsq and gnsq find every broker of a cluster through the lookupds and get every
message: 3 brokers, 2 lookupds, messages spread over the brokers before anyone reads.

The issue's acceptance figure, 100,000 messages, is the default;
``TRIONSQ_CLUSTER_MESSAGES`` sets another (``-s`` shows the times).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path
from typing import TYPE_CHECKING, Final

import pytest
import trio

from trionsq.protocol import Mpub
from trionsq.protocol.client import Response
from trionsq.testing import ProtocolClient

if TYPE_CHECKING:
    from trionsq.testing import NsqCluster

CLIENTS: Final = Path(__file__).with_name("clients")
MESSAGES: Final = int(os.environ.get("TRIONSQ_CLUSTER_MESSAGES", "100000"))
"""Spread over the three brokers: the issue's acceptance figure (about 8 s with both
clients at once on 2 cores); ``TRIONSQ_CLUSTER_MESSAGES`` changes it."""
BATCH: Final = 1000
TOPIC: Final = "cluster"


def bodies_of(broker: int) -> list[bytes]:
    """Broker ``broker``'s share of the messages: every third number."""
    return [b"n%d" % i for i in range(broker, MESSAGES, 3)]


async def publish_share(address: tuple[str, int], bodies: list[bytes]) -> None:
    """MPUB in batches, pipelined: every batch sent, then every OK read."""
    client = await ProtocolClient.connect(address)
    try:
        batches = [tuple(bodies[i : i + BATCH]) for i in range(0, len(bodies), BATCH)]
        await client.send(*(Mpub(TOPIC, batch) for batch in batches))
        replies = await client.read(len(batches))
        assert len(replies) == len(batches)
        assert all(isinstance(reply, Response) and reply.is_ok for reply in replies), replies
    finally:
        await client.aclose()


async def consume(script: str, cluster: NsqCluster, channel: str) -> dict[str, list[str]]:
    return await run_reader(script, cluster.lookupd_http_addresses, TOPIC, channel, MESSAGES)


async def run_reader(
    script: str, lookupds: list[str], topic: str, channel: str, count: int
) -> dict[str, list[str]]:
    """Run a reader script of ``clients/`` until it has ``count`` bodies: its summary
    (``bodies`` in arrival order, the brokers it was ``connections`` to)."""
    with trio.fail_after(150):
        result = await trio.run_process(
            [sys.executable, str(CLIENTS / script), ",".join(lookupds), topic, channel, str(count)],
            capture_stdout=True,
            capture_stderr=True,
            check=False,
            stdin=subprocess.DEVNULL,
        )
    assert result.returncode == 0, result.stderr.decode()[-3000:]
    summary: dict[str, list[str]] = json.loads(result.stdout.decode().strip().splitlines()[-1])
    return summary


@pytest.mark.nsq_cluster(brokers=3, lookupds=2)
async def test_pynsq_and_gnsq_read_every_message_of_a_cluster_through_lookupd(
    nsq_cluster: NsqCluster,
) -> None:
    channels = {"pynsq_cluster.py": "pynsq", "gnsq_cluster.py": "gnsq"}
    for broker in nsq_cluster.brokers:  # the channels exist before anything is published
        for channel in channels.values():
            await broker.broker.create_channel(TOPIC, channel)
    started = time.perf_counter()
    async with trio.open_nursery() as nursery:
        for index, broker in enumerate(nsq_cluster.brokers):
            nursery.start_soon(publish_share, broker.tcp, bodies_of(index))
    published = time.perf_counter()
    await nsq_cluster.wait_registered()  # every broker is a producer of the topic

    summaries: dict[str, dict[str, list[str]]] = {}
    took: dict[str, float] = {}

    async def run(script: str) -> None:
        summaries[script] = await consume(script, nsq_cluster, channels[script])
        took[channels[script]] = time.perf_counter() - published

    async with trio.open_nursery() as nursery:  # each reads its own channel
        for script in channels:
            nursery.start_soon(run, script)
    consumed = time.perf_counter()
    print(  # noqa: T201 - the figure the issue asks about, shown with -s
        f"{MESSAGES} messages over 3 brokers: published in {published - started:.2f}s, "
        f"both clients done {consumed - published:.2f}s later",
        ", ".join(f"{name} {seconds:.2f}s" for name, seconds in sorted(took.items())),
    )

    expected = Counter(f"n{i}" for i in range(MESSAGES))
    brokers = sorted(f"127.0.0.1:{broker.tcp[1]}" for broker in nsq_cluster.brokers)
    for script, summary in summaries.items():
        received = Counter(summary["bodies"])
        assert len(summary["bodies"]) == MESSAGES, script  # each exactly once
        assert received == expected, script
        assert summary["connections"] == brokers, script  # found through the lookupds
    for broker in nsq_cluster.brokers:
        for channel in channels.values():
            (found,) = broker.broker.find_channel(TOPIC, channel)
            assert found.statistics().depth == 0
            assert found.statistics().in_flight_count == 0
