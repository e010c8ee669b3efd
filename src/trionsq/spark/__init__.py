"""PySpark data source and sink ``format("trionsq")`` (extra ``trionsq[spark]``).

Installed with the package, Spark finds it by itself (the top-level module
``pyspark_trionsq`` is what Spark's data source lookup imports), so
``spark.read.format("trionsq")`` needs no call first; :func:`register` does the same
by hand, e.g. for a session started before the package was installed. See
docs/spark.md.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from .options import SparkOptionError
from .source import TrionsqDataSource

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

__all__ = ["SparkOptionError", "TrionsqDataSource", "register"]


def register(spark: SparkSession) -> None:
    """Make ``format("trionsq")`` known to ``spark``."""
    spark.dataSource.register(TrionsqDataSource)
