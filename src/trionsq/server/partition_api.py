"""The broker's endpoints for readers by offset (issue 17): ``/partition/...``.

``GET /partition/read`` answers a page of one partition's records as a record batch
(:mod:`trionsq.protocol.record_batch`), ``GET /partition/offsets`` where each
partition's readable records begin and end (and where a time falls), and ``POST
/partition/hold`` / ``/partition/unhold`` keep a reader's unread records from
retention (:mod:`trionsq.broker.reader_holds`). Reading changes nothing: no channel,
no file. docs/extensions.md, "Reading a partition by offset", is the reference.

Errors are nsqd's JSON ``{"message": ...}``: 400 ``MISSING_ARG_<NAME>`` /
``INVALID_ARG_<NAME>`` for arguments, 404 ``TOPIC_NOT_FOUND`` / ``PARTITION_NOT_FOUND``
/ ``HOLD_NOT_FOUND``, 400 with the reason for an offset the log cannot serve, 500
``READ_FAILED``/``STORE_FAILED <file>: <reason>`` when the file system refuses.
With ``--auth-http-address`` the secret is checked as ``/pub`` checks it, for a
subscribe to the topic with ``reader`` as the channel (``partition_read`` when the
endpoint has no ``reader``).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from functools import partial
from typing import TYPE_CHECKING, Final

import attrs
import trio

from ..broker.broker import Broker
from ..broker.health import PERSIST, READ
from ..broker.log_reads import (
    ReadError,
    earliest_offset,
    id_at_offset,
    offset_after,
    offsets,
    read_from_offset,
    replayable_log,
)
from ..broker.reader_holds import move_hold, release_hold
from ..http.messages import Request, Response
from ..protocol.record_batch import CONTENT_TYPE, encode_record_batch
from ..protocol.strconv import go_atoi
from .api_args import HttpError, Routes, name_arg, parsed_query

if TYPE_CHECKING:
    from ..broker.log_reads import ReplayableLog
    from ..broker.topic import Partition, Topic

__all__ = ["DEFAULT_READER", "PartitionApi"]

DEFAULT_MAX_RECORDS: Final = 10_000
MAX_RECORDS: Final = 100_000
DEFAULT_MAX_BYTES: Final = 4 << 20
MAX_BYTES: Final = 64 << 20
THREAD_ENCODE: Final = 2000
"""Pages of more records than this are encoded in a worker thread."""
DEFAULT_READER: Final = "partition_read"
"""The channel name AUTH checks a read against when the request names no reader."""
_INT64_MAX: Final = 2**63 - 1
_NS_PER_MS: Final = 1_000_000
_BATCH_HEADERS: Final = ((b"Content-Type", CONTENT_TYPE.encode()),)


@attrs.define(eq=False)
class PartitionApi:
    """The ``/partition/...`` handlers of one listener's :class:`NsqdHttpApi`."""

    broker: Broker
    _authorize: Callable[[Request, str, str], Awaitable[None]] = attrs.field(alias="authorize")
    """``authorize(request, verb, channel)``: the listener's AUTH check (raises
    :class:`HttpError`), a no-op without ``--auth-http-address``."""
    routes: Routes = attrs.field(init=False)

    @routes.default
    def _routes(self) -> Routes:
        return {
            "/partition/read": {"GET": self._read},
            "/partition/offsets": {"GET": self._offsets},
            "/partition/hold": {"POST": self._hold},
            "/partition/unhold": {"POST": self._unhold},
        }

    # ------------------------------------------------------------- endpoints

    async def _read(self, request: Request) -> Response:
        """A page of records from ``offset``: a record batch."""
        name = name_arg(parsed_query(request), "topic", invalid="INVALID_ARG_TOPIC")
        index = _int_arg(request, "partition", 0, 0xFFFF)
        offset = _int_arg(request, "offset", 0, _INT64_MAX)
        max_records = _int_arg(request, "max_records", 1, MAX_RECORDS, DEFAULT_MAX_RECORDS)
        max_bytes = _int_arg(request, "max_bytes", 1, MAX_BYTES, DEFAULT_MAX_BYTES)
        reader = self._reader_arg(request, required=False)
        await self._authorize(request, "READ", reader)
        log = _replayable(self._partition(name, index))
        try:
            records, next_offset = await read_from_offset(
                log, offset, max_records=max_records, max_bytes=max_bytes
            )
            earliest = await earliest_offset(log)
        except ReadError as error:
            raise HttpError(400, str(error)) from None
        except OSError as error:
            raise self._fault(READ, "READ", error) from error
        self._worked(READ)
        encode = partial(
            encode_record_batch,
            records,
            next_offset=next_offset,
            latest_offset=max(log.next_offset, next_offset),
            earliest_offset=earliest,
        )
        # about 1 µs a record: a large page is encoded beside the event loop
        body = encode() if len(records) <= THREAD_ENCODE else await trio.to_thread.run_sync(encode)
        return Response(200, body, _BATCH_HEADERS)

    async def _offsets(self, request: Request) -> Response:
        """Each partition's earliest and latest offsets, ids and holds, and whether
        the topic is ext; with ``timestamp_ms``, where that time falls; with
        ``after_offset`` (one partition), the id of the record there and, with
        ``max_messages``, where that many records from there end."""
        name = name_arg(parsed_query(request), "topic", invalid="INVALID_ARG_TOPIC")
        index = None
        if "partition" in request.query:
            index = _int_arg(request, "partition", 0, 0xFFFF)
        timestamp_ms = None
        if "timestamp_ms" in request.query:
            limit = _INT64_MAX // _NS_PER_MS
            timestamp_ms = _int_arg(request, "timestamp_ms", -limit, limit)
        after = None
        count = None
        if "after_offset" in request.query or "max_messages" in request.query:
            if index is None:
                raise HttpError(400, "MISSING_ARG_PARTITION")
            after = _int_arg(request, "after_offset", 0, _INT64_MAX)
            if "max_messages" in request.query:
                count = _int_arg(request, "max_messages", 1, _INT64_MAX)
        reader = self._reader_arg(request, required=False)
        await self._authorize(request, "READ", reader)
        topic = self._topic(name)
        chosen = topic.partitions if index is None else [self._partition(name, index)]
        answers = []
        for partition in chosen:
            log = _replayable(partition)
            try:
                found = await offsets(
                    log, None if timestamp_ms is None else timestamp_ms * _NS_PER_MS
                )
                after_id = None if after is None else await id_at_offset(log, after)
                ends = (
                    None
                    if after is None or count is None
                    else await offset_after(log, after, count)
                )
            except ReadError as error:
                raise HttpError(400, str(error)) from None
            except OSError as error:
                raise self._fault(READ, "READ", error) from error
            answer: dict[str, object] = {
                "partition": partition.index,
                "earliest_offset": found.earliest_offset,
                "latest_offset": found.latest_offset,
                "earliest_id": found.earliest_id,
                "next_id": found.next_id,
                "holds": {hold.reader: hold.offset for hold in partition.holds},
            }
            if found.timestamp_offset is not None:
                answer["timestamp_offset"] = found.timestamp_offset
            if after_id is not None:
                answer["after_id"] = after_id
            if ends is not None:
                answer["limit_offset"] = ends
            answers.append(answer)
        self._worked(READ)
        return Response.json({"topic": name, "ext": topic.ext, "partitions": answers})

    async def _hold(self, request: Request) -> Response:
        """Create or move ``reader``'s hold to ``offset``; saved before the answer."""
        name = name_arg(parsed_query(request), "topic", invalid="INVALID_ARG_TOPIC")
        index = _int_arg(request, "partition", 0, 0xFFFF)
        reader = self._reader_arg(request, required=True)
        offset = _int_arg(request, "offset", 0, _INT64_MAX)
        await self._authorize(request, "HOLD", reader)
        partition = self._partition(name, index)
        try:
            hold = await move_hold(partition, reader, offset, save=self._saver(name, partition))
        except ReadError as error:
            raise HttpError(400, str(error)) from None
        except OSError as error:
            raise self._fault(PERSIST, "STORE", error) from error
        return Response.json({"reader": hold.reader, "offset": hold.offset, "id": hold.internal_id})

    async def _unhold(self, request: Request) -> Response:
        """Remove ``reader``'s hold: 404 ``HOLD_NOT_FOUND`` if it has none."""
        name = name_arg(parsed_query(request), "topic", invalid="INVALID_ARG_TOPIC")
        index = _int_arg(request, "partition", 0, 0xFFFF)
        reader = self._reader_arg(request, required=True)
        await self._authorize(request, "HOLD", reader)
        partition = self._partition(name, index)
        try:
            removed = await release_hold(partition, reader, save=self._saver(name, partition))
        except OSError as error:
            raise self._fault(PERSIST, "STORE", error) from error
        if removed is None:
            raise HttpError(404, "HOLD_NOT_FOUND")
        return Response.empty()

    # ------------------------------------------------------------- helpers

    @staticmethod
    def _reader_arg(request: Request, *, required: bool) -> str:
        if not required and "reader" not in request.query:
            return DEFAULT_READER
        return name_arg(request, "reader", invalid="INVALID_ARG_READER")

    def _topic(self, name: str) -> Topic:
        topic = self.broker.topics.get(name)
        if topic is None:
            raise HttpError(404, "TOPIC_NOT_FOUND")
        return topic

    def _partition(self, name: str, index: int) -> Partition:
        partitions = self._topic(name).partitions
        if index >= len(partitions):
            raise HttpError(404, "PARTITION_NOT_FOUND")
        return partitions[index]

    def _saver(self, name: str, partition: Partition) -> Callable[[], Awaitable[None]]:
        storage = self.broker.storage

        async def save() -> None:
            if storage is not None:
                await storage.save_holds(name, partition)
                self._worked(PERSIST)

        return save

    def _fault(self, area: str, verb: str, error: OSError) -> HttpError:
        """A refused file operation: the broker's health, and a 500 naming the file."""
        storage = self.broker.storage
        if storage is None:  # memory logs do no file I/O: a real bug
            raise error
        return HttpError(500, f"{verb}_FAILED {storage.health.failed(area, error).reason}")

    def _worked(self, area: str) -> None:
        storage = self.broker.storage
        if storage is not None and not storage.health.healthy:
            storage.health.succeeded(area)


def _replayable(partition: Partition) -> ReplayableLog:
    try:
        return replayable_log(partition)
    except ReadError as error:
        raise HttpError(400, str(error)) from None


def _int_arg(request: Request, key: str, low: int, high: int, default: int | None = None) -> int:
    """A decimal integer argument in [low, high]: ``MISSING_ARG_<KEY>`` when absent
    (unless it has a default), ``INVALID_ARG_<KEY>`` when not such an integer."""
    raw = request.arg(key)
    if raw is None:
        if default is None:
            raise HttpError(400, f"MISSING_ARG_{key.upper()}")
        return default
    value = go_atoi(raw.encode("utf-8", "surrogateescape"))
    if isinstance(value, str) or not low <= value <= high:
        raise HttpError(400, f"INVALID_ARG_{key.upper()}")
    return value
