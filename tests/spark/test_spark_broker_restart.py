"""A broker killed (-9) and restarted under a streaming query: the query waits for it
(brokerRetryTimeout) instead of failing, reads every message once, and the exactly-once
sink stores every row once, also when a micro-batch of 50,000 rows runs again after the
restart (the broker's idempotency keys outlive it).

The broker is a ``trionsq serve`` process of its own (a thread cannot be killed -9),
restarted on the same ports and data path.
"""

from __future__ import annotations

import signal
import socket
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.parse
import urllib.request
from collections import Counter
from typing import TYPE_CHECKING

import orjson
import pytest

from trionsq.client.blocking import connect_producer

if TYPE_CHECKING:
    from collections.abc import Callable, Iterator
    from pathlib import Path

    from pyspark.sql import SparkSession

ROWS = 50_000
"""The exactly-once sink's micro-batch: more than a partition's tail cache of keys."""
READ_ROWS = 20_000
DOWN = 3.0
"""Seconds the broker stays dead before it is started again."""


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port: int = probe.getsockname()[1]
        return port


class KillableBroker:
    """``trionsq serve`` on fixed loopback ports, killed with SIGKILL and started again."""

    def __init__(self, data: Path) -> None:
        self.data = data
        self.tcp = f"127.0.0.1:{free_port()}"
        self.http = f"127.0.0.1:{free_port()}"
        self.process: subprocess.Popen[bytes] | None = None
        self.kills = 0

    def start(self) -> None:
        command = [
            sys.executable,
            "-c",
            "from trionsq.cli import main; main()",
            "serve",
            f"--data-path={self.data}",
            f"--tcp-address={self.tcp}",
            f"--http-address={self.http}",
        ]
        self.process = subprocess.Popen(  # noqa: S603 - the broker under test
            command, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
        )
        deadline = time.monotonic() + 30
        while True:
            try:
                with urllib.request.urlopen(f"http://{self.http}/ping", timeout=1):
                    return
            except OSError:
                assert self.process.poll() is None, "the broker exited at start"
                assert time.monotonic() < deadline, "the broker did not start"
                time.sleep(0.05)

    def kill(self) -> None:
        assert self.process is not None
        self.process.send_signal(signal.SIGKILL)
        self.process.wait(10)
        self.kills += 1

    def stop(self) -> None:
        if self.process is not None and self.process.poll() is None:
            self.process.terminate()
            self.process.wait(20)

    def post(self, path: str, **params: object) -> None:
        query = urllib.parse.urlencode({k: str(v) for k, v in params.items()})
        request = urllib.request.Request(f"http://{self.http}{path}?{query}", method="POST")
        with urllib.request.urlopen(request, data=b"", timeout=30):  # noqa: S310
            pass

    def stored(self, topic: str) -> int:
        """Messages the topic's partitions hold (0 while the broker is down)."""
        url = f"http://{self.http}/partition/offsets?topic={topic}"
        try:
            with urllib.request.urlopen(url, timeout=5) as answer:
                return sum(p["next_id"] - 1 for p in orjson.loads(answer.read())["partitions"])
        except (OSError, urllib.error.URLError):
            return 0


@pytest.fixture(scope="module")
def killable(tmp_path_factory: pytest.TempPathFactory) -> Iterator[KillableBroker]:
    broker = KillableBroker(tmp_path_factory.mktemp("killable-broker"))
    broker.start()
    try:
        yield broker
    finally:
        broker.stop()


def kill_when(broker: KillableBroker, ready: Callable[[], bool]) -> threading.Thread:
    """Kill -9 the broker once ``ready()``, and start it again ``DOWN`` seconds later."""

    def run() -> None:
        deadline = time.monotonic() + 120
        while not ready():
            assert time.monotonic() < deadline
            time.sleep(0.005)
        broker.kill()
        time.sleep(DOWN)
        broker.start()

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    return thread


def fill(broker: KillableBroker, topic: str, count: int) -> None:
    with connect_producer(broker.tcp) as producer:
        for start in range(0, count, 1000):
            bodies = [b"m%06d" % n for n in range(start, min(count, start + 1000))]
            producer.publish_many(topic, bodies, partition=(start // 1000) % 2)


def read_bodies(spark: SparkSession, broker: KillableBroker, topic: str) -> Counter[bytes]:
    frame = spark.read.format("trionsq").option("nsqd", broker.http).load(topic)
    return Counter(bytes(row.body) for row in frame.select("body").collect())


def test_a_stream_reads_on_across_a_broker_restart(
    spark: SparkSession, killable: KillableBroker, tmp_path: Path
) -> None:
    killable.post("/topic/create", topic="restart_read", partition_num=2)
    fill(killable, "restart_read", READ_ROWS)
    query = (
        spark.readStream.format("trionsq")
        .option("nsqd", killable.http)
        .option("startingOffsets", "earliest")
        .option("maxMessagesPerTrigger", "5000")
        .load("restart_read")
        .select("partition", "offset", "body")
        .writeStream.format("parquet")
        .option("path", str(tmp_path / "data"))
        .option("checkpointLocation", str(tmp_path / "checkpoint"))
        .trigger(availableNow=True)
        .start()
    )
    kills = killable.kills
    killer = kill_when(killable, lambda: len(query.recentProgress) >= 2)
    query.awaitTermination(180)
    killer.join(60)
    assert killable.kills == kills + 1
    assert query.exception() is None
    rows = spark.read.parquet(str(tmp_path / "data")).collect()
    assert len({(r.partition, r.offset) for r in rows}) == len(rows) == READ_ROWS
    assert {bytes(r.body) for r in rows} == {b"m%06d" % n for n in range(READ_ROWS)}


def test_the_exactly_once_sink_across_a_broker_restart_and_a_replayed_batch(
    spark: SparkSession, killable: KillableBroker, tmp_path: Path
) -> None:
    """One micro-batch of 50,000 rows; the broker is killed while it is published and
    comes back 3 s later; then the driver "dies" before committing the batch, so Spark
    publishes all of it again: every row is stored once."""
    killable.post("/topic/create", topic="restart_source", partition_num=2)
    killable.post("/topic/create", topic="restart_sink", partition_num=2, ext="true")
    fill(killable, "restart_source", ROWS)

    def run() -> None:
        query = (
            spark.readStream.format("trionsq")
            .option("nsqd", killable.http)
            .option("startingOffsets", "earliest")
            .load("restart_source")
            .select("body")
            .writeStream.format("trionsq")
            .option("nsqd", killable.http)
            .option("batchSize", "200")
            .option("checkpointLocation", str(tmp_path / "checkpoint"))
            .trigger(availableNow=True)
            .start("restart_sink")
        )
        query.awaitTermination(180)
        assert query.exception() is None

    # more than a partition's tail cache (10,000) is stored before the kill
    kills = killable.kills
    killer = kill_when(killable, lambda: killable.stored("restart_sink") > 24_000)
    run()
    killer.join(60)
    assert killable.kills == kills + 1
    commits = tmp_path / "checkpoint" / "commits"
    assert sorted(p.name for p in commits.iterdir() if p.name.isdigit()) == ["0"]
    (commits / "0").unlink()
    (commits / ".0.crc").unlink(missing_ok=True)
    killable.kill()  # and a clean restart of the broker between the two runs
    killable.start()
    run()
    assert read_bodies(spark, killable, "restart_sink") == Counter(
        b"m%06d" % n for n in range(ROWS)
    )
    assert killable.stored("restart_sink") == ROWS


def test_a_broker_down_at_the_start_of_a_stream_is_one_clear_line(
    spark: SparkSession, tmp_path: Path
) -> None:
    port = free_port()
    query = (
        spark.readStream.format("trionsq")
        .option("nsqd", f"127.0.0.1:{port}")
        .option("brokerRetryTimeout", "1s")
        .load("anything")
        .writeStream.format("noop")
        .option("checkpointLocation", str(tmp_path / "checkpoint"))
        .start()
    )
    with pytest.raises(Exception) as raised:  # noqa: PT011 - the message is what is checked
        query.awaitTermination(60)
    message = str(raised.value)
    assert f"trionsq: broker 127.0.0.1:{port} unreachable, retried for 1 s" in message
    assert "UnboundLocalError" not in message
