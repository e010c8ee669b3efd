"""Spark's Python workers load PySpark compiled: ``make`` ran ``python -m
trionsq.spark.precompile`` on the installed pyspark.zip, which workers import it from."""

from __future__ import annotations

import sys
from typing import TYPE_CHECKING

from trionsq.spark.precompile import compiled_here, installed_pyspark_zip

if TYPE_CHECKING:
    from collections.abc import Iterable, Iterator

    from pyspark.sql import SparkSession


def _modules_files(_: Iterable[int]) -> Iterator[str]:
    yield sys.modules["pyspark.worker"].__file__ or ""
    yield sys.modules["pyspark.serializers"].__file__ or ""


def test_the_workers_import_pyspark_compiled_from_its_zip(spark: SparkSession) -> None:
    zip_path = installed_pyspark_zip()
    assert compiled_here(zip_path), "make runs python -m trionsq.spark.precompile after installing"
    files = set(spark.sparkContext.parallelize(range(2), 2).mapPartitions(_modules_files).collect())
    assert files == {
        f"{zip_path}/pyspark/worker.pyc",
        f"{zip_path}/pyspark/serializers.pyc",
    }
