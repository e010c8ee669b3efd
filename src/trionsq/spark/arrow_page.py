"""A page of records from ``/partition/read`` as an Arrow batch of the source's rows
(columns.py names them).

A page is already column-shaped (little-endian, 8-byte aligned), so offsets, ids,
timestamps and bodies become Arrow arrays over the response's own bytes, without a
copy or a loop per record; only ext headers are parsed one by one, and only on
pages that have any.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Final

import orjson
import pyarrow as pa
import pyarrow.compute as pc

from ..protocol.ext_header import DISPATCH_TAG_KEY
from ..protocol.message import EXT_VERSION_JSON, EXT_VERSION_TAG
from .columns import KEY_HEADER

if TYPE_CHECKING:
    from ..protocol.record_batch import RecordBatch

__all__ = ["to_arrow"]

_HEADERS: Final = pa.map_(pa.string(), pa.string())
_TIMESTAMP: Final = pa.timestamp("us", tz="UTC")


def _fixed(kind: pa.DataType, count: int, column: memoryview) -> pa.Array:
    return pa.Array.from_buffers(kind, count, [None, pa.py_buffer(column)])


def _variable(kind: pa.DataType, count: int, offsets: memoryview, data: memoryview) -> pa.Array:
    return pa.Array.from_buffers(kind, count, [None, pa.py_buffer(offsets), pa.py_buffer(data)])


def _text(value: object) -> str:
    return value if isinstance(value, str) else orjson.dumps(value).decode()


def _ext_columns(page: RecordBatch) -> tuple[pa.Array, pa.Array, pa.Array]:
    """(tag, headers, key): Youzan's JSON header (ext version 4) as a map, its dispatch
    tag as the tag and ``##key`` as the key; a bare tag (ext version 2) as the tag."""
    count = page.count
    versions = page.ext_versions
    if not any(versions):
        return pa.nulls(count, pa.string()), pa.nulls(count, _HEADERS), pa.nulls(count, pa.binary())
    tags: list[str | None] = [None] * count
    headers: list[list[tuple[str, str]] | None] = [None] * count
    keys: list[bytes | None] = [None] * count
    for index, ext in enumerate(page.exts()):
        version = versions[index]
        if version == EXT_VERSION_JSON:
            try:
                document = orjson.loads(ext)
            except orjson.JSONDecodeError:
                continue
            if isinstance(document, dict):
                pairs = [(str(key), _text(value)) for key, value in document.items()]
                headers[index] = pairs
                tag = document.get(DISPATCH_TAG_KEY)
                tags[index] = tag if isinstance(tag, str) and tag else None
                key = document.get(KEY_HEADER)
                keys[index] = key.encode() if isinstance(key, str) else None
        elif version == EXT_VERSION_TAG and ext:
            tags[index] = ext.decode("utf-8", "replace")
    return pa.array(tags, pa.string()), pa.array(headers, _HEADERS), pa.array(keys, pa.binary())


def _trace_ids(page: RecordBatch) -> pa.Array:
    column = page.trace_ids
    if not any(column):
        return pa.nulls(page.count, pa.string())
    return pa.array([str(value) if value else None for value in column], pa.string())


def to_arrow(
    page: RecordBatch, topic: str, partition: int, count: int, *, include_headers: bool = True
) -> pa.RecordBatch:
    """The first ``count`` records of ``page`` as rows of :func:`schema`."""
    total = page.count
    nanoseconds = _fixed(pa.int64(), total, page.timestamps)
    tags, headers, keys = _ext_columns(page)
    columns = {
        "topic": pa.repeat(pa.scalar(topic, pa.string()), total),
        "partition": pa.repeat(pa.scalar(partition, pa.int32()), total),
        "offset": _fixed(pa.int64(), total, page.offsets),
        "id": _fixed(pa.int64(), total, page.ids),
        "trace_id": _trace_ids(page),
        "timestamp": pc.divide(nanoseconds, 1000).cast(_TIMESTAMP),
        "attempts": pa.repeat(pa.scalar(0, pa.int32()), total),
        "tag": tags,
        "headers": headers,
        "body": _variable(pa.binary(), total, page.body_offsets, page.body_data),
        "key": keys,
    }
    if not include_headers:
        del columns["headers"]
    batch = pa.RecordBatch.from_arrays(list(columns.values()), names=list(columns))
    return batch if count >= total else batch.slice(0, count)
