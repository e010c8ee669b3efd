"""A Spark pipeline on trionsq: clicks per tag per minute, to a topic and to Parquet.

    make example-spark                  # starts its own broker in a temporary folder
    python examples/spark_tag_counts.py --nsqd 127.0.0.1:4151   # or use a running one

1. publishes 20,000 sample clicks to the ext topic ``clicks`` (2 partitions), each
   with a dispatch tag (its region) and an ``event_time`` header spread over ten
   minutes;
2. reads the topic with ``spark.read.format("trionsq")``, counts clicks per region
   per minute of ``event_time``;
3. writes each count as a JSON message to the ext topic ``click_counts`` (tagged
   with its region, exactly once) and the same table to Parquet;
4. reads ``click_counts`` back and prints it.
"""

from __future__ import annotations

import argparse
import os
import random
import shutil
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
from contextlib import contextmanager
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import TYPE_CHECKING

import orjson

from trionsq.client.blocking import connect_producer
from trionsq.protocol.commands import ExtMessage

if TYPE_CHECKING:
    from collections.abc import Iterator

REGIONS = ("eu", "us", "asia")
CLICKS = 20_000


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port: int = probe.getsockname()[1]
        return port


@contextmanager
def own_broker(folder: Path) -> Iterator[str]:
    """A durable broker in a child process; yields its HTTP address."""
    tcp, http = free_port(), free_port()
    command = [
        str(Path(sys.executable).with_name("trionsq")),
        "serve",
        f"--data-path={folder}",
        f"--tcp-address=127.0.0.1:{tcp}",
        f"--http-address=127.0.0.1:{http}",
    ]
    broker = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        address = f"127.0.0.1:{http}"
        for _ in range(100):
            try:
                with urllib.request.urlopen(f"http://{address}/ping", timeout=1):
                    break
            except OSError:
                time.sleep(0.1)
        yield address
    finally:
        broker.terminate()
        broker.wait(10)


def post(address: str, path: str) -> None:
    request = urllib.request.Request(f"http://{address}{path}", data=b"", method="POST")
    with urllib.request.urlopen(request, timeout=10):
        pass


def tcp_address(http_address: str) -> str:
    with urllib.request.urlopen(f"http://{http_address}/info", timeout=10) as answer:
        info = orjson.loads(answer.read())
    return f"{http_address.rpartition(':')[0]}:{info['tcp_port']}"


def publish_clicks(http_address: str) -> None:
    post(http_address, "/topic/create?topic=clicks&partition_num=2&ext=true")
    post(http_address, "/topic/create?topic=click_counts&partition_num=1&ext=true")
    start = datetime.now(UTC).replace(second=0, microsecond=0) - timedelta(minutes=10)
    chance = random.Random(17)
    with connect_producer(tcp_address(http_address)) as producer:
        for partition in (0, 1):
            messages = []
            for n in range(CLICKS // 2):
                at = start + timedelta(seconds=chance.uniform(0, 600))
                header = {
                    "##client_dispatch_tag": chance.choice(REGIONS),
                    "event_time": at.isoformat(),
                }
                body = orjson.dumps({"user": chance.randrange(1000), "click": n})
                messages.append(ExtMessage(orjson.dumps(header), body))
            for first in range(0, len(messages), 500):
                producer.publish_many_ext(
                    "clicks", messages[first : first + 500], partition=partition
                )


def run_pipeline(http_address: str, output: Path) -> None:
    from pyspark.sql import SparkSession
    from pyspark.sql import functions as F

    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    spark = (
        SparkSession.builder.master("local[2]")
        .appName("trionsq-tag-counts")
        .config("spark.driver.extraJavaOptions", "-XX:TieredStopAtLevel=1 -XX:+UseSerialGC")
        .config("spark.ui.enabled", "false")
        .config("spark.ui.showConsoleProgress", "false")
        .config("spark.sql.shuffle.partitions", "2")
        .config("spark.sql.session.timeZone", "UTC")
        .getOrCreate()
    )
    spark.sparkContext.setLogLevel("ERROR")
    clicks = spark.read.format("trionsq").option("nsqd", http_address).load("clicks")
    counts = (
        clicks.withColumn("event_time", F.to_timestamp(F.col("headers")["event_time"]))
        .groupBy(F.window("event_time", "1 minute").alias("minute"), "tag")
        .count()
        .select(F.col("minute.start").alias("minute"), "tag", "count")
    )
    counts.write.mode("overwrite").parquet(str(output))
    messages = counts.select(
        F.to_json(F.struct("minute", "tag", "count")).alias("body"),
        "tag",
        F.col("tag").alias("key"),
    )
    messages.write.format("trionsq").mode("append").option("nsqd", http_address).save(
        "click_counts"
    )

    back = spark.read.format("trionsq").option("nsqd", http_address).load("click_counts")
    schema = "minute string, tag string, count long"
    table = back.select(F.from_json(F.col("body").cast("string"), schema).alias("c")).select("c.*")
    table.orderBy("minute", "tag").show(40, truncate=False)
    total = table.agg(F.sum("count")).first()
    clicks_in_all = total[0] if total else 0
    print(
        f"{back.count()} counts on click_counts, {clicks_in_all} clicks in all; Parquet: {output}"
    )
    spark.stop()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--nsqd", help="a running broker's HTTP address (default: start one)")
    parser.add_argument("--output", type=Path, help="Parquet folder (default: a temporary one)")
    arguments = parser.parse_args()
    folder = Path(tempfile.mkdtemp(prefix="trionsq-example-"))
    output = arguments.output or folder / "tag_counts.parquet"
    try:
        if arguments.nsqd:
            publish_clicks(arguments.nsqd)
            run_pipeline(arguments.nsqd, output)
        else:
            with own_broker(folder / "broker") as address:
                publish_clicks(address)
                run_pipeline(address, output)
    finally:
        shutil.rmtree(folder / "broker", ignore_errors=True)


if __name__ == "__main__":
    main()
