"""pynsq, gnsq and ansq from PyPI publish and consume through trionsq: REQ, competing
consumers on one channel, and a second channel that gets every message."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import TYPE_CHECKING

import pytest
import trio

from trionsq import NsqdConfig, serve_nsqd
from trionsq.broker.rate_limits import BURST_SECONDS, PublishMode, Rates
from trionsq.protocol import ExtMessage, IdentifyRequest, PubExt, Rdy, Sub
from trionsq.protocol.client import MessageFrame, encode_identify
from trionsq.testing import ProtocolClient

if TYPE_CHECKING:
    from trionsq.nursery_tree import BoundAddresses

CLIENTS = Path(__file__).with_name("clients")
COUNT = 200
RATE = 200
PIPELINED = 600


async def run_client(script: str, *args: str) -> str:
    """Run a client script (in its own process, as its users do); the summary it
    prints last (a JSON line)."""
    with trio.fail_after(60):
        result = await trio.run_process(
            [sys.executable, script, *args],
            capture_stdout=True,
            capture_stderr=True,
            check=False,
            stdin=subprocess.DEVNULL,
        )
    assert result.returncode == 0, result.stderr.decode()[-3000:]
    return result.stdout.decode().strip().splitlines()[-1]


@pytest.mark.parametrize("client", ["pynsq", "gnsq", "ansq"])
async def test_round_trip(client: str, nursery: trio.Nursery) -> None:
    addresses: BoundAddresses = await nursery.start(serve_nsqd, NsqdConfig.loopback())
    host, port = addresses.tcp
    script = CLIENTS / f"{client}_roundtrip.py"
    summary = json.loads(
        await run_client(str(script), f"{host}:{port}", f"rt_{client}", str(COUNT))
    )
    everything = sorted(f"m{i}" for i in range(COUNT))
    shared: dict[str, list[int]] = summary["seen"]["shared"]
    assert sorted(shared) == everything
    assert shared["m0"] == [1, 2]  # requeued once, redelivered with attempts 2
    assert all(attempts == [1] for body, attempts in shared.items() if body != "m0")
    other: dict[str, list[int]] = summary["seen"]["other"]
    assert sorted(other) == everything  # a second channel gets every message
    assert all(attempts == [1] for attempts in other.values())
    counts: dict[str, int] = summary["per_consumer"]
    assert counts["shared-1"] > 0  # both consumers of "shared" got some
    assert counts["shared-2"] > 0
    assert counts["shared-1"] + counts["shared-2"] == COUNT + 1  # each once, m0 twice


async def test_pynsq_on_a_plain_topic_beside_an_ext_topic_in_use(nursery: trio.Nursery) -> None:
    """Youzan's ext topics, tags and binary ids do not leak into a standard client."""
    addresses: BoundAddresses = await nursery.start(serve_nsqd, NsqdConfig.loopback())
    addresses.broker.topic("ext", ext=True)
    ext_consumer = await ProtocolClient.connect(addresses.tcp)
    await ext_consumer.stream.send_all(
        encode_identify(IdentifyRequest(extend_support=True, desired_tag="a"))
    )
    await ext_consumer.read(1)
    ext_consumer.decoder.extended = True
    await ext_consumer.send(Sub("ext", "c"), Rdy(10))
    await ext_consumer.read(1)
    producer = await ProtocolClient.connect(addresses.tcp)
    header = b'{"##client_dispatch_tag":"a","k":"v"}'
    await producer.send(PubExt("ext", ExtMessage(header, b"tagged")))
    host, port = addresses.tcp
    summary = json.loads(
        await run_client(str(CLIENTS / "pynsq_roundtrip.py"), f"{host}:{port}", "plain", "50")
    )
    assert sorted(summary["seen"]["other"]) == sorted(f"m{i}" for i in range(50))
    (frame,) = await ext_consumer.read(1)
    assert isinstance(frame, MessageFrame)
    assert (frame.message.body, frame.message.ext) == (b"tagged", header)
    await producer.aclose()
    await ext_consumer.aclose()


async def test_pynsq_pipelining_over_a_throttling_limit_sees_no_error(
    nursery: trio.Nursery,
) -> None:
    """Issue 30: pynsq fails every pending callback on any error frame, so refusing a
    publish failed the pipelined ones behind it (an app that retries them duplicates
    the stored ones). Throttled (the default mode), 600 publishes sent at once all get
    OK, each is stored once, and they are answered at the limit's rate: the bucket's
    10 at once, then 200 a second."""
    addresses: BoundAddresses = await nursery.start(serve_nsqd, NsqdConfig.loopback())
    addresses.broker.topic("throttled")
    addresses.broker.set_publish_limit("throttled", Rates(msgs_per_sec=RATE))
    host, port = addresses.tcp
    summary = json.loads(
        await run_client(
            str(CLIENTS / "pynsq_throttled.py"), f"{host}:{port}", "throttled", str(PIPELINED)
        )
    )
    assert (summary["ok"], summary["failed"], summary["errors"]) == (PIPELINED, 0, [])
    expected = (PIPELINED - RATE * BURST_SECONDS) / RATE
    took = summary["last"] - summary["first"]
    # never faster than the limit; slower only as far as a busy machine delays the
    # broker (a full suite on two workers once took 12% longer)
    assert 0.95 <= took / expected <= 1.5, (took, expected)
    consumer = await ProtocolClient.connect(addresses.tcp)
    await consumer.send(Sub("throttled", "c"), Rdy(PIPELINED + 10))
    frames = [f for f in await consumer.drain(quiet=0.5) if isinstance(f, MessageFrame)]
    assert sorted(f.message.body for f in frames) == sorted(
        b"m%d" % i for i in range(PIPELINED)
    )  # every message, each once
    await consumer.aclose()
    limit = addresses.broker.topics["throttled"].publish_limit
    assert limit is not None
    assert (limit.refused, limit.throttled > 0) == (0, True)


async def test_pynsq_over_a_refusing_limit_gets_the_error_and_goes_on(
    nursery: trio.Nursery,
) -> None:
    """trionsq's publish limit in refuse mode (docs/extensions.md, "Rate limits"): the
    refused publish gets its error in pynsq's callback, the connection stays, a later
    publish works."""
    addresses: BoundAddresses = await nursery.start(serve_nsqd, NsqdConfig.loopback())
    addresses.broker.topic("limited")
    addresses.broker.set_publish_limit("limited", Rates(msgs_per_sec=2), PublishMode.REFUSE)
    host, port = addresses.tcp
    summary = json.loads(
        await run_client(str(CLIENTS / "pynsq_rate_limited.py"), f"{host}:{port}", "limited")
    )
    assert summary["answers"] == [
        "b'OK'",
        "error: b'E_PUB_FAILED PUB failed rate limit exceeded'",
        "error: b'E_MPUB_FAILED MPUB failed rate limit exceeded'",
        "b'OK'",
    ]
    assert summary["connections"] == 1
    assert addresses.broker.topics["limited"].statistics().message_count == 2
