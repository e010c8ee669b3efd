"""The ``trionsq`` data source's options, checked once on the driver.

Spark hands a data source its options as a case-insensitive map of strings. Every
mistake is reported here, before a job starts, as one :class:`SparkOptionError`
whose message names the option, so a typo in ``startingOffsets`` is not a
stack trace from an executor. Names follow Spark's Kafka source where the idea is
the same (``startingOffsets``, ``endingOffsets``, ``startingTimestamp``,
``failOnDataLoss``); ``maxMessagesPerTrigger`` is ``maxOffsetsPerTrigger`` in
messages, because an offset here is a byte position.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Final

import attrs
import orjson

from ..protocol.names import is_ephemeral, is_valid_name

__all__ = [
    "EARLIEST",
    "LATEST",
    "Bound",
    "ReadOptions",
    "SparkOptionError",
    "WriteOptions",
    "parse_read_options",
    "parse_write_options",
]

EARLIEST: Final = -2
"""In an offsets JSON, as in Spark's Kafka source: the oldest offset still held."""
LATEST: Final = -1
"""In an offsets JSON: the end of the partition when the query plans."""

DEFAULT_PAGE_RECORDS: Final = 10_000
DEFAULT_PAGE_BYTES: Final = 4 << 20
DEFAULT_WRITE_BATCH: Final = 500


class SparkOptionError(ValueError):
    """An option the data source cannot use; the message names it."""

    def __init__(self, option: str, problem: str) -> None:
        super().__init__(f"trionsq option '{option}': {problem}")
        self.option = option


@attrs.frozen
class Bound:
    """Where a read starts or ends in each partition.

    ``default`` applies to partitions ``by_partition`` does not name; each value is
    a byte offset, :data:`EARLIEST` or :data:`LATEST`. With ``timestamps``, values
    are times in milliseconds instead and mean "the first message at or after".
    """

    default: int
    by_partition: Mapping[int, int] = attrs.field(factory=dict)
    timestamps: bool = False

    def for_partition(self, partition: int) -> int:
        return self.by_partition.get(partition, self.default)


@attrs.frozen
class ReadOptions:
    """What ``spark.read`` / ``spark.readStream`` asked for."""

    topic: str
    nsqd: tuple[str, ...]
    """Broker HTTP addresses (``host:4151``); empty when ``lookupd`` is used."""
    lookupd: tuple[str, ...]
    partitions: tuple[int, ...] | None
    starting: Bound
    ending: Bound
    max_messages_per_trigger: int | None
    fail_on_data_loss: bool
    reader_name: str | None
    """With ``retainUnread``: the name of this stream's hold on each partition."""
    page_records: int
    page_bytes: int


@attrs.frozen
class WriteOptions:
    """What ``df.write`` / ``writeStream`` asked for."""

    topic: str
    nsqd: tuple[str, ...]
    lookupd: tuple[str, ...]
    exactly_once: bool
    batch_size: int


_ADDRESSES: Final = ("nsqd", "lookupd")
_READ_OPTIONS: Final = frozenset(
    {
        "topic",
        *_ADDRESSES,
        "partitions",
        "startingoffsets",
        "endingoffsets",
        "startingtimestamp",
        "endingtimestamp",
        "startingoffsetsbytimestamp",
        "endingoffsetsbytimestamp",
        "maxmessagespertrigger",
        "failondataloss",
        "retainunread",
        "readername",
        "maxrecordsperrequest",
        "maxbytesperrequest",
    }
)
_WRITE_OPTIONS: Final = frozenset({"topic", *_ADDRESSES, "exactlyonce", "batchsize"})
_SPELLING: Final = {
    name.lower(): name
    for name in (
        "startingOffsets",
        "endingOffsets",
        "startingTimestamp",
        "endingTimestamp",
        "startingOffsetsByTimestamp",
        "endingOffsetsByTimestamp",
        "maxMessagesPerTrigger",
        "failOnDataLoss",
        "retainUnread",
        "readerName",
        "maxRecordsPerRequest",
        "maxBytesPerRequest",
        "exactlyOnce",
        "batchSize",
    )
}


def _spelled(name: str) -> str:
    return _SPELLING.get(name.lower(), name)


_SPARKS_OWN: Final = frozenset({"checkpointlocation"})
"""Options Spark itself adds to a streaming sink's (``writeStream``'s checkpoint)."""


def _lowered(options: Mapping[str, str], known: frozenset[str]) -> dict[str, str]:
    values: dict[str, str] = {}
    for name, value in options.items():
        key = name.lower()
        if key in _SPARKS_OWN:
            continue
        if key == "path" and "topic" not in {n.lower() for n in options}:
            key = "topic"  # .load("orders") / .save("orders")
        elif key == "path":
            raise SparkOptionError(
                "path", "give the topic once: as load()/save()'s path or as 'topic'"
            )
        if key not in known:
            raise SparkOptionError(name, f"unknown option; known: {_known_list(known)}")
        values[key] = value
    return values


def _known_list(known: frozenset[str]) -> str:
    return ", ".join(sorted(_spelled(name) for name in known))


def _topic(values: Mapping[str, str]) -> str:
    topic = values.get("topic", "").strip()
    if not topic:
        raise SparkOptionError("topic", "required: the topic to read or write")
    if not is_valid_name(topic.encode()) or is_ephemeral(topic):
        raise SparkOptionError("topic", f"{topic!r} is not a valid topic name (nor ephemeral)")
    return topic


def _addresses(values: Mapping[str, str]) -> tuple[tuple[str, ...], tuple[str, ...]]:
    found = {name: _address_list(name, values.get(name, "")) for name in _ADDRESSES}
    if bool(found["nsqd"]) == bool(found["lookupd"]):
        raise SparkOptionError(
            "nsqd", "give either 'nsqd' (broker HTTP addresses) or 'lookupd', not both or neither"
        )
    return found["nsqd"], found["lookupd"]


def _address_list(option: str, text: str) -> tuple[str, ...]:
    addresses = tuple(part.strip() for part in text.split(",") if part.strip())
    for address in addresses:
        host, colon, port = address.rpartition(":")
        if not colon or not host or not port.isdigit() or not 0 < int(port) < 65536:
            raise SparkOptionError(option, f"{address!r} is not a host:port HTTP address")
    return addresses


def _integer(option: str, text: str, *, low: int, high: int | None = None) -> int:
    try:
        value = int(text.strip())
    except ValueError:
        raise SparkOptionError(_spelled(option), f"{text!r} is not an integer") from None
    if value < low or (high is not None and value > high):
        span = f"from {low}" + (f" to {high}" if high is not None else "")
        raise SparkOptionError(_spelled(option), f"{value} is out of range ({span})")
    return value


def _boolean(option: str, text: str) -> bool:
    lowered = text.strip().lower()
    if lowered in ("true", "1", "yes"):
        return True
    if lowered in ("false", "0", "no"):
        return False
    raise SparkOptionError(_spelled(option), f"{text!r} is not true or false")


def _partitions(text: str) -> tuple[int, ...]:
    numbers = [_integer("partitions", part, low=0) for part in text.split(",")]
    if not numbers:
        raise SparkOptionError("partitions", "name at least one partition")
    return tuple(sorted(set(numbers)))


def _offsets(option: str, text: str, *, allow_earliest: bool, allow_latest: bool) -> Bound:
    """``earliest``, ``latest`` or a JSON object {"partition": offset}."""
    name = _spelled(option)
    word = text.strip().lower()
    if word == "earliest" and allow_earliest:
        return Bound(EARLIEST)
    if word == "latest" and allow_latest:
        return Bound(LATEST)
    if word in ("earliest", "latest"):
        raise SparkOptionError(name, f"'{word}' makes no sense here")
    try:
        document = orjson.loads(text)
    except orjson.JSONDecodeError:
        words = " or ".join(
            w for w, ok in (("earliest", allow_earliest), ("latest", allow_latest)) if ok
        )
        raise SparkOptionError(
            name, f"{text!r} is neither {words} nor a JSON object of partition to offset"
        ) from None
    by_partition = _partition_map(name, document)
    for partition, value in by_partition.items():
        if value < EARLIEST or (value == EARLIEST and not allow_earliest):
            raise SparkOptionError(name, f"partition {partition}: {value} is not an offset")
        if value == LATEST and not allow_latest:
            raise SparkOptionError(name, f"partition {partition}: latest (-1) makes no sense here")
    default = LATEST if option.startswith("ending") else EARLIEST
    return Bound(default, by_partition)


def _partition_map(name: str, document: object) -> dict[int, int]:
    if not isinstance(document, dict):
        raise SparkOptionError(name, "the JSON must be an object of partition to number")
    by_partition: dict[int, int] = {}
    for key, value in document.items():
        if not (isinstance(key, str) and key.isdigit()):
            raise SparkOptionError(name, f"{key!r} is not a partition number")
        if not isinstance(value, int) or isinstance(value, bool):
            raise SparkOptionError(name, f"partition {key}: {value!r} is not an integer")
        by_partition[int(key)] = value
    return by_partition


def _timestamps(option: str, text: str) -> Bound:
    name = _spelled(option)
    if option.endswith("bytimestamp"):
        try:
            document = orjson.loads(text)
        except orjson.JSONDecodeError:
            raise SparkOptionError(
                name, f"{text!r} is not a JSON object of partition to milliseconds"
            ) from None
        by_partition = _partition_map(name, document)
        for partition, value in by_partition.items():
            if value < 0:
                raise SparkOptionError(name, f"partition {partition}: {value} is not a time")
        default = LATEST if option.startswith("ending") else EARLIEST
        return Bound(default, by_partition, timestamps=True)
    return Bound(_integer(option, text, low=0), timestamps=True)


def _bound(values: Mapping[str, str], side: str, *, streaming: bool) -> Bound:
    """The one of ``<side>Offsets``, ``<side>Timestamp``, ``<side>OffsetsByTimestamp`` given."""
    names = [f"{side}offsets", f"{side}timestamp", f"{side}offsetsbytimestamp"]
    given = [name for name in names if name in values]
    if len(given) > 1:
        raise SparkOptionError(
            _spelled(given[1]), f"give only one of {', '.join(_spelled(n) for n in given)}"
        )
    if side == "ending" and streaming and given:
        raise SparkOptionError(_spelled(given[0]), "a stream has no end; use it with spark.read")
    if not given:
        if side == "starting":
            return Bound(LATEST if streaming else EARLIEST)
        return Bound(LATEST)
    option = given[0]
    if option.endswith("offsets"):
        return _offsets(
            option, values[option], allow_earliest=side == "starting", allow_latest=True
        )
    return _timestamps(option, values[option])


def parse_read_options(options: Mapping[str, str], *, streaming: bool) -> ReadOptions:
    """Check ``spark.read``'s or ``spark.readStream``'s options.

    Raises:
        SparkOptionError: the first problem found, naming its option.
    """
    values = _lowered(options, _READ_OPTIONS)
    topic = _topic(values)
    nsqd, lookupd = _addresses(values)
    partitions = _partitions(values["partitions"]) if "partitions" in values else None
    starting = _bound(values, "starting", streaming=streaming)
    ending = _bound(values, "ending", streaming=streaming)
    limit = None
    if "maxmessagespertrigger" in values:
        if not streaming:
            raise SparkOptionError("maxMessagesPerTrigger", "only for spark.readStream")
        limit = _integer("maxmessagespertrigger", values["maxmessagespertrigger"], low=1)
    reader_name = None
    if _boolean("retainunread", values.get("retainunread", "false")):
        if not streaming:
            raise SparkOptionError("retainUnread", "only for spark.readStream")
        reader_name = values.get("readername", "").strip()
        if not reader_name:
            raise SparkOptionError("readerName", "required with retainUnread: the hold's name")
        if not is_valid_name(reader_name.encode()) or is_ephemeral(reader_name):
            raise SparkOptionError("readerName", f"{reader_name!r} is not a valid reader name")
    elif "readername" in values:
        raise SparkOptionError("readerName", "only meaningful with retainUnread=true")
    return ReadOptions(
        topic=topic,
        nsqd=nsqd,
        lookupd=lookupd,
        partitions=partitions,
        starting=starting,
        ending=ending,
        max_messages_per_trigger=limit,
        fail_on_data_loss=_boolean("failondataloss", values.get("failondataloss", "true")),
        reader_name=reader_name,
        page_records=_integer(
            "maxrecordsperrequest",
            values.get("maxrecordsperrequest", str(DEFAULT_PAGE_RECORDS)),
            low=1,
            high=100_000,
        ),
        page_bytes=_integer(
            "maxbytesperrequest",
            values.get("maxbytesperrequest", str(DEFAULT_PAGE_BYTES)),
            low=1,
            high=64 << 20,
        ),
    )


def parse_write_options(options: Mapping[str, str]) -> WriteOptions:
    """Check ``df.write``'s or ``writeStream``'s options.

    Raises:
        SparkOptionError: the first problem found, naming its option.
    """
    values = _lowered(options, _WRITE_OPTIONS)
    nsqd, lookupd = _addresses(values)
    return WriteOptions(
        topic=_topic(values),
        nsqd=nsqd,
        lookupd=lookupd,
        exactly_once=_boolean("exactlyonce", values.get("exactlyonce", "true")),
        batch_size=_integer(
            "batchsize", values.get("batchsize", str(DEFAULT_WRITE_BATCH)), low=1, high=10_000
        ),
    )
