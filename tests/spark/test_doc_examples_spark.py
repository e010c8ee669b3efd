"""docs/spark.md's Python examples run as is (issue 31, item 7), in the suite's one
SparkSession (a JVM per example would cost seconds each): each block is executed
with ``spark`` given, as pyspark's shell gives it, against the Spark tests' broker
(nsqd's addresses in the code replaced by its own, ``/data/`` by a temporary
folder). The block that installs packages is marked as not run (tests/doc_examples.py
and test_doc_examples.py check every block is one or the other)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Final

import pytest

from ..doc_examples import Example, examples, with_addresses
from .conftest import http_address, tcp_address

if TYPE_CHECKING:
    from pathlib import Path

    from pyspark.sql import SparkSession

    from trionsq.nursery_tree import BoundAddresses

SPARK: Final = [example for example in examples("docs/spark.md") if "spark" in example.needs]


def test_spark_md_has_examples() -> None:
    assert len(SPARK) >= 4


@pytest.mark.parametrize("example", SPARK, ids=[example.name for example in SPARK])
def test_the_spark_example_runs_as_is(
    example: Example,
    spark: SparkSession,
    broker: BoundAddresses,
    tmp_path: Path,
) -> None:
    places = {
        "127.0.0.1:4151": http_address(broker),
        "127.0.0.1:4150": tcp_address(broker),
        "/data/": f"{tmp_path}/",
    }
    code = with_addresses(example.code, places)
    exec(compile(code, example.name, "exec"), {"spark": spark, "__name__": "__main__"})  # noqa: S102 - the docs' own code
