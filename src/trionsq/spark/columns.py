"""The rows the ``trionsq`` source produces: its schema (Spark DDL), and the header
field that keeps the sink's ``key``. A page of records as Arrow is arrow_page.py's:
this module imports no pyarrow, so the driver's Python workers that only plan or
commit a query do not load it (issue 32)."""

from __future__ import annotations

from typing import Final

__all__ = ["KEY_HEADER", "schema"]

KEY_HEADER: Final = "##key"
"""The ext header field that keeps a message's key (the sink's ``key`` column)."""
_FIELDS: Final = (
    ("topic", "string"),
    ("partition", "int"),
    ("offset", "long"),
    ("id", "long"),
    ("trace_id", "string"),
    ("timestamp", "timestamp"),
    ("attempts", "int"),
    ("tag", "string"),
    ("headers", "map<string,string>"),
    ("body", "binary"),
    ("key", "binary"),
)


def schema(*, include_headers: bool = True) -> str:
    """The source's columns (Spark DDL): Spark's Kafka source's, with NSQ's fields;
    ``headers`` only with ``includeHeaders`` (the default)."""
    return ", ".join(
        f"{name} {kind}" for name, kind in _FIELDS if include_headers or name != "headers"
    )
