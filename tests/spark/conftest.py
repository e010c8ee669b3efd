"""One SparkSession for every Spark test (a JVM start costs seconds), and a durable
broker in a thread that its executors reach over loopback.

Spark runs on ``local[2, 2]``: two cores, and a failed task is tried once more,
as on a cluster, so that the exactly-once tests can make a first attempt fail.
"""

from __future__ import annotations

import os
import sys
import urllib.parse
import urllib.request
from typing import TYPE_CHECKING

import pytest
from pyspark.sql import SparkSession

from trionsq.config import NsqdConfig
from trionsq.testing import ThreadedNsqd

if TYPE_CHECKING:
    from collections.abc import Iterator
    from pathlib import Path

    from trionsq.nursery_tree import BoundAddresses

# Spark's Python workers must run this interpreter, which has trionsq installed.
os.environ["PYSPARK_PYTHON"] = sys.executable
os.environ["PYSPARK_DRIVER_PYTHON"] = sys.executable

_FAST_JVM = "-XX:TieredStopAtLevel=1 -XX:+UseSerialGC -Xss4m"


@pytest.fixture(scope="session")
def spark(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SparkSession]:
    """The suite's SparkSession: quiet, no UI, few shuffle partitions."""
    warehouse = tmp_path_factory.mktemp("spark-warehouse")
    session = (
        SparkSession.builder.master("local[2, 2]")
        .appName("trionsq-tests")
        .config("spark.driver.extraJavaOptions", _FAST_JVM)
        .config("spark.ui.enabled", "false")
        .config("spark.ui.showConsoleProgress", "false")
        .config("spark.sql.shuffle.partitions", "2")
        .config("spark.sql.warehouse.dir", str(warehouse))
        .config("spark.sql.session.timeZone", "UTC")
        .config("spark.python.worker.reuse", "true")
        .getOrCreate()
    )
    session.sparkContext.setLogLevel("ERROR")
    try:
        yield session
    finally:
        session.stop()


@pytest.fixture(scope="session")
def broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BoundAddresses]:
    """A durable broker for the Spark tests (each test uses its own topics)."""
    data = tmp_path_factory.mktemp("spark-broker")
    threaded = ThreadedNsqd(NsqdConfig.loopback(data_path=str(data)))
    addresses = threaded.start()
    try:
        yield addresses
    finally:
        threaded.stop()


def http_address(broker: BoundAddresses) -> str:
    assert broker.http is not None
    return f"{broker.http[0]}:{broker.http[1]}"


def tcp_address(broker: BoundAddresses) -> str:
    return f"{broker.tcp[0]}:{broker.tcp[1]}"


def http_post(broker: BoundAddresses, path: str, body: bytes = b"", **params: object) -> bytes:
    query = urllib.parse.urlencode({k: str(v) for k, v in params.items()})
    request = urllib.request.Request(
        f"http://{http_address(broker)}{path}?{query}", data=body, method="POST"
    )
    with urllib.request.urlopen(request, timeout=30) as response:  # noqa: S310 (http only)
        answer: bytes = response.read()
        return answer


def create_topic(
    broker: BoundAddresses, topic: str, *, partitions: int = 1, ext: bool = False
) -> None:
    http_post(broker, "/topic/create", topic=topic, partition_num=partitions, ext=str(ext).lower())


def checkpoint(tmp_path: Path, name: str = "checkpoint") -> str:
    return str(tmp_path / name)
