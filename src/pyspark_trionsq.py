"""Spark's data source lookup imports every top-level ``pyspark_*`` module and
registers its ``DefaultSource``: this makes ``format("trionsq")`` work out of the box."""

from __future__ import annotations

from trionsq.spark import TrionsqDataSource as DefaultSource

__all__ = ["DefaultSource"]
