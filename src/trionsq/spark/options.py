"""The ``trionsq`` data source's options, checked once on the driver.

Spark hands a data source its options as a case-insensitive map of strings. Every
mistake is reported here, before a job starts, as one :class:`SparkOptionError`
whose message names the option (and, for a misspelt one, the nearest known name),
so a typo in ``startingOffsets`` is not a stack trace from an executor. Names follow
Spark's Kafka source where the idea is the same (``startingOffsets``,
``endingOffsets``, ``startingTimestamp``, ``failOnDataLoss``, ``subscribe``,
``subscribePattern``, ``assign``, ``minPartitions``, ``maxTriggerDelay``,
``includeHeaders``); where trionsq's name differs, Kafka's is an alias
(``maxOffsetsPerTrigger`` for ``maxMessagesPerTrigger``: an offset here is a byte
position, so the limits count messages).
"""

from __future__ import annotations

import difflib
import re
from collections.abc import Callable, Mapping
from typing import Final

import attrs
import orjson

from ..durations import parse_duration
from ..protocol.names import is_ephemeral, is_valid_name

__all__ = [
    "EARLIEST",
    "LATEST",
    "Bound",
    "BrokerAccess",
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
DEFAULT_RETRY_TIMEOUT: Final = 60.0
"""Seconds a broker may be unreachable before a query gives up (``brokerRetryTimeout``)."""
DEFAULT_TRIGGER_DELAY: Final = 15 * 60.0
"""``maxTriggerDelay``'s default, as Kafka's source: 15 minutes."""


class SparkOptionError(ValueError):
    """An option the data source cannot use; the message names it."""

    def __init__(self, option: str, problem: str) -> None:
        super().__init__(f"trionsq option '{option}': {problem}")
        self.option = option


@attrs.frozen
class BrokerAccess:
    """How the driver and the tasks talk to brokers: how long to retry an outage,
    and the AUTH secret (picklable: it travels with each task)."""

    retry_timeout: float = DEFAULT_RETRY_TIMEOUT
    auth_secret: str | None = attrs.field(default=None, repr=False)


@attrs.frozen
class Bound:
    """Where a read starts or ends in each partition.

    ``default`` applies to partitions neither map names; ``by_partition`` (trionsq's
    ``{"0": n}``) to that partition of every topic, ``by_topic`` (Kafka's
    ``{"topic": {"0": n}}``) to one topic's. Each value is a byte offset,
    :data:`EARLIEST` or :data:`LATEST`. With ``timestamps``, values are times in
    milliseconds instead and mean "the first message at or after".
    """

    default: int
    by_partition: Mapping[int, int] = attrs.field(factory=dict)
    timestamps: bool = False
    by_topic: Mapping[str, Mapping[int, int]] = attrs.field(factory=dict)

    def for_partition(self, partition: int, topic: str | None = None) -> int:
        named = self.by_topic.get(topic, {}) if topic is not None else {}
        return named.get(partition, self.by_partition.get(partition, self.default))


@attrs.frozen
class ReadOptions:
    """What ``spark.read`` / ``spark.readStream`` asked for."""

    topics: tuple[str, ...]
    """The topics named (``topic``, the path, ``subscribe`` or ``assign``); empty
    with ``pattern``."""
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
    pattern: str | None = None
    """``subscribePattern``: every topic whose whole name matches."""
    assigned: Mapping[str, tuple[int, ...]] = attrs.field(factory=dict)
    """``assign``: the partitions to read of each topic."""
    min_messages_per_trigger: int | None = None
    max_trigger_delay: float = DEFAULT_TRIGGER_DELAY
    min_partitions: int | None = None
    include_headers: bool = True
    access: BrokerAccess = BrokerAccess()

    @property
    def topic(self) -> str:
        """The first topic named (messages about a single-topic read)."""
        return self.topics[0] if self.topics else ""

    @property
    def nested(self) -> bool:
        """Whether stream offsets are Kafka's ``{"topic": {"0": n}}`` (several
        topics or a pattern) rather than ``{"0": n}`` (one topic)."""
        return self.pattern is not None or len(self.topics) > 1


@attrs.frozen
class WriteOptions:
    """What ``df.write`` / ``writeStream`` asked for."""

    topic: str | None
    """Every row's topic; None: each row's ``topic`` column says (as Kafka's sink)."""
    nsqd: tuple[str, ...]
    lookupd: tuple[str, ...]
    exactly_once: bool
    batch_size: int
    access: BrokerAccess = BrokerAccess()


_ADDRESSES: Final = ("nsqd", "lookupd")
_COMMON: Final = frozenset({"topic", *_ADDRESSES, "brokerretrytimeout", "authsecret"})
_READ_OPTIONS: Final = _COMMON | {
    "subscribe",
    "subscribepattern",
    "assign",
    "partitions",
    "startingoffsets",
    "endingoffsets",
    "startingtimestamp",
    "endingtimestamp",
    "startingoffsetsbytimestamp",
    "endingoffsetsbytimestamp",
    "maxmessagespertrigger",
    "minmessagespertrigger",
    "maxtriggerdelay",
    "minpartitions",
    "failondataloss",
    "retainunread",
    "readername",
    "maxrecordsperrequest",
    "maxbytesperrequest",
    "includeheaders",
}
_WRITE_OPTIONS: Final = _COMMON | {"exactlyonce", "batchsize"}
ALIASES: Final = {
    "maxoffsetspertrigger": "maxmessagespertrigger",
    "minoffsetspertrigger": "minmessagespertrigger",
    "kafka.bootstrap.servers": "nsqd",
}
"""Spark Kafka integration's names for trionsq's options."""
_SPELLING: Final = {
    name.lower(): name
    for name in (
        "subscribePattern",
        "startingOffsets",
        "endingOffsets",
        "startingTimestamp",
        "endingTimestamp",
        "startingOffsetsByTimestamp",
        "endingOffsetsByTimestamp",
        "maxMessagesPerTrigger",
        "minMessagesPerTrigger",
        "maxOffsetsPerTrigger",
        "minOffsetsPerTrigger",
        "maxTriggerDelay",
        "minPartitions",
        "failOnDataLoss",
        "retainUnread",
        "readerName",
        "maxRecordsPerRequest",
        "maxBytesPerRequest",
        "includeHeaders",
        "brokerRetryTimeout",
        "authSecret",
        "exactlyOnce",
        "batchSize",
    )
}

_SPARKS_OWN: Final = frozenset({"checkpointlocation", "queryname", "paths"})
"""Options Spark itself adds (a streaming sink's checkpoint and query name, the
paths of ``load(a, b)``); ``path`` is the topic."""


def _spelled(name: str) -> str:
    return _SPELLING.get(name.lower(), name)


def _lowered(options: Mapping[str, str], known: frozenset[str]) -> dict[str, str]:
    values: dict[str, str] = {}
    names = {name.lower() for name in options}
    for name, value in options.items():
        key = ALIASES.get(name.lower(), name.lower())
        if key in _SPARKS_OWN:
            continue
        if key == "path":
            if names & {"topic", "subscribe", "subscribepattern", "assign"}:
                raise SparkOptionError(
                    "path", "give the topic once: as load()/save()'s path or as an option"
                )
            key = "topic"  # .load("orders") / .save("orders")
        if key not in known:
            raise SparkOptionError(name, _unknown(name, known))
        if key in values:
            raise SparkOptionError(name, f"given twice (as {_spelled(key)} and an alias)")
        values[key] = value
    return values


def _unknown(name: str, known: frozenset[str]) -> str:
    """'unknown option', with the nearest known name when one is near."""
    candidates = {*known, *(alias for alias, to in ALIASES.items() if to in known)}
    near = difflib.get_close_matches(name.lower(), candidates, n=1, cutoff=0.6)
    if near:
        return f"unknown option; did you mean {_spelled(near[0])}?"
    return f"unknown option; known: {', '.join(sorted(_spelled(n) for n in known))}"


def _name(option: str, text: str) -> str:
    topic = text.strip()
    if not is_valid_name(topic.encode()) or is_ephemeral(topic):
        raise SparkOptionError(option, f"{topic!r} is not a valid topic name (nor ephemeral)")
    return topic


def _topic(values: Mapping[str, str]) -> str:
    topic = values.get("topic", "").strip()
    if not topic:
        raise SparkOptionError("topic", "required: the topic to read or write")
    return _name("topic", topic)


def _read_topics(
    values: Mapping[str, str],
) -> tuple[tuple[str, ...], str | None, dict[str, tuple[int, ...]]]:
    """(topics, pattern, assigned) from exactly one of topic/path, ``subscribe``,
    ``subscribePattern`` and ``assign``."""
    given = [n for n in ("topic", "subscribe", "subscribepattern", "assign") if n in values]
    if len(given) != 1:
        raise SparkOptionError(
            "topic",
            "give exactly one of load()'s path, topic, subscribe, subscribePattern or assign",
        )
    option = given[0]
    text = values[option]
    if option == "topic":
        return (_topic(values),), None, {}
    if option == "subscribe":
        topics = tuple(dict.fromkeys(_name("subscribe", t) for t in text.split(",") if t.strip()))
        if not topics:
            raise SparkOptionError("subscribe", "name at least one topic")
        return topics, None, {}
    if option == "subscribepattern":
        try:
            re.compile(text)
        except re.error as error:
            raise SparkOptionError("subscribePattern", f"{text!r}: {error}") from None
        return (), text, {}
    return _assigned(text)


def _assigned(text: str) -> tuple[tuple[str, ...], None, dict[str, tuple[int, ...]]]:
    """Kafka's ``assign``: ``{"topicA": [0, 1], "topicB": [2]}``."""
    try:
        document = orjson.loads(text)
    except orjson.JSONDecodeError:
        document = None
    if not isinstance(document, dict) or not document:
        raise SparkOptionError("assign", f'{text!r} is not JSON like {{"topic": [0, 1]}}')
    assigned: dict[str, tuple[int, ...]] = {}
    for topic, partitions in document.items():
        numbers = partitions if isinstance(partitions, list) else None
        if not numbers or not all(type(n) is int and n >= 0 for n in numbers):
            raise SparkOptionError("assign", f"{topic!r}: give a list of partition numbers")
        assigned[_name("assign", topic)] = tuple(sorted(set(numbers)))
    return tuple(assigned), None, assigned


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


def _duration(option: str, text: str) -> float:
    """Seconds from ``"60s"``, ``"15m"``, ``"500ms"`` or a number of seconds."""
    try:
        seconds = float(text)
    except ValueError:
        try:
            seconds = parse_duration(text)
        except ValueError:
            seconds = -1.0
    if not seconds >= 0:
        raise SparkOptionError(
            _spelled(option), f"{text!r} is not a duration (e.g. 60s, 15m, 500ms)"
        )
    return seconds


def _access(values: Mapping[str, str]) -> BrokerAccess:
    timeout = DEFAULT_RETRY_TIMEOUT
    if "brokerretrytimeout" in values:
        timeout = _duration("brokerretrytimeout", values["brokerretrytimeout"])
    secret = values.get("authsecret")
    if secret is not None and not secret:
        raise SparkOptionError("authSecret", "empty")
    return BrokerAccess(timeout, secret)


def _partitions(text: str) -> tuple[int, ...]:
    numbers = [_integer("partitions", part, low=0) for part in text.split(",")]
    if not numbers:
        raise SparkOptionError("partitions", "name at least one partition")
    return tuple(sorted(set(numbers)))


def _offsets(option: str, text: str, *, allow_earliest: bool, allow_latest: bool) -> Bound:
    """``earliest``, ``latest`` or JSON: ``{"partition": offset}`` or Kafka's
    ``{"topic": {"partition": offset}}``."""
    name = _spelled(option)
    word = text.strip().lower()
    if word == "earliest" and allow_earliest:
        return Bound(EARLIEST)
    if word == "latest" and allow_latest:
        return Bound(LATEST)
    if word in ("earliest", "latest"):
        raise SparkOptionError(name, f"'{word}' makes no sense here")
    words = " or ".join(
        w for w, ok in (("earliest", allow_earliest), ("latest", allow_latest)) if ok
    )

    def problem(value: int) -> str | None:
        if value < EARLIEST or (value == EARLIEST and not allow_earliest):
            return f"{value} is not an offset"
        if value == LATEST and not allow_latest:
            return "latest (-1) makes no sense here"
        return None

    unreadable = f"is neither {words} nor a JSON object of partition to offset"
    return _json_bound(option, text, unreadable, problem)


def _json_bound(
    option: str,
    text: str,
    unreadable: str,
    problem: Callable[[int], str | None],
    *,
    timestamps: bool = False,
) -> Bound:
    """A bound given as JSON, ``{"partition": n}`` or Kafka's ``{"topic": {"partition":
    n}}``, each ``n`` checked by ``problem`` (why it is refused, None if not)."""
    name = _spelled(option)
    try:
        document = orjson.loads(text)
    except orjson.JSONDecodeError:
        raise SparkOptionError(name, f"{text!r} {unreadable}") from None
    by_partition, by_topic = _partition_maps(name, document)
    for partitions in (by_partition, *by_topic.values()):
        for partition, value in partitions.items():
            refused = problem(value)
            if refused is not None:
                raise SparkOptionError(name, f"partition {partition}: {refused}")
    default = LATEST if option.startswith("ending") else EARLIEST
    return Bound(default, by_partition, timestamps=timestamps, by_topic=by_topic)


def _partition_maps(
    name: str, document: object
) -> tuple[dict[int, int], dict[str, dict[int, int]]]:
    """``{"0": n}`` (every topic's partition 0) or ``{"topic": {"0": n}}``."""
    if not isinstance(document, dict):
        raise SparkOptionError(name, "the JSON must be an object of partition to number")
    if document and all(isinstance(value, dict) for value in document.values()):
        return {}, {_name(name, t): _partition_map(name, v) for t, v in document.items()}
    return _partition_map(name, document), {}


def _partition_map(name: str, document: dict[object, object]) -> dict[int, int]:
    by_partition: dict[int, int] = {}
    for key, value in document.items():
        if not (isinstance(key, str) and key.isdigit()):
            raise SparkOptionError(name, f"{key!r} is not a partition number")
        if not isinstance(value, int) or isinstance(value, bool):
            raise SparkOptionError(name, f"partition {key}: {value!r} is not an integer")
        by_partition[int(key)] = value
    return by_partition


def _timestamps(option: str, text: str) -> Bound:
    if option.endswith("bytimestamp"):
        return _json_bound(
            option,
            text,
            "is not a JSON object of partition to milliseconds",
            lambda value: f"{value} is not a time" if value < 0 else None,
            timestamps=True,
        )
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


_STREAM_ONLY: Final = ("maxmessagespertrigger", "minmessagespertrigger", "maxtriggerdelay")


def _trigger_limits(
    values: Mapping[str, str], *, streaming: bool
) -> tuple[int | None, int | None, float]:
    """(maxMessagesPerTrigger, minMessagesPerTrigger, maxTriggerDelay)."""
    for option in _STREAM_ONLY:
        if option in values and not streaming:
            raise SparkOptionError(_spelled(option), "only for spark.readStream")
    most = least = None
    if "maxmessagespertrigger" in values:
        most = _integer("maxmessagespertrigger", values["maxmessagespertrigger"], low=1)
    if "minmessagespertrigger" in values:
        least = _integer("minmessagespertrigger", values["minmessagespertrigger"], low=1)
    if most is not None and least is not None and least > most:
        raise SparkOptionError(
            "minMessagesPerTrigger", f"{least} is more than maxMessagesPerTrigger ({most})"
        )
    delay = DEFAULT_TRIGGER_DELAY
    if "maxtriggerdelay" in values:
        if least is None:
            raise SparkOptionError("maxTriggerDelay", "only meaningful with minMessagesPerTrigger")
        delay = _duration("maxtriggerdelay", values["maxtriggerdelay"])
    return most, least, delay


def _reader_name(values: Mapping[str, str], *, streaming: bool) -> str | None:
    """``readerName`` with ``retainUnread``: the name of the stream's holds."""
    if not _boolean("retainunread", values.get("retainunread", "false")):
        if "readername" in values:
            raise SparkOptionError("readerName", "only meaningful with retainUnread=true")
        return None
    if not streaming:
        raise SparkOptionError("retainUnread", "only for spark.readStream")
    name = values.get("readername", "").strip()
    if not name:
        raise SparkOptionError("readerName", "required with retainUnread: the hold's name")
    if not is_valid_name(name.encode()) or is_ephemeral(name):
        raise SparkOptionError("readerName", f"{name!r} is not a valid reader name")
    return name


def parse_read_options(options: Mapping[str, str], *, streaming: bool) -> ReadOptions:
    """Check ``spark.read``'s or ``spark.readStream``'s options.

    Raises:
        SparkOptionError: the first problem found, naming its option.
    """
    values = _lowered(options, _READ_OPTIONS)
    topics, pattern, assigned = _read_topics(values)
    nsqd, lookupd = _addresses(values)
    partitions = _partitions(values["partitions"]) if "partitions" in values else None
    if partitions is not None and assigned:
        raise SparkOptionError("partitions", "assign names the partitions already")
    most, least, delay = _trigger_limits(values, streaming=streaming)
    min_partitions = None
    if "minpartitions" in values:
        min_partitions = _integer("minpartitions", values["minpartitions"], low=1, high=10_000)
    return ReadOptions(
        topics=topics,
        nsqd=nsqd,
        lookupd=lookupd,
        partitions=partitions,
        starting=_bound(values, "starting", streaming=streaming),
        ending=_bound(values, "ending", streaming=streaming),
        max_messages_per_trigger=most,
        fail_on_data_loss=_boolean("failondataloss", values.get("failondataloss", "true")),
        reader_name=_reader_name(values, streaming=streaming),
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
        pattern=pattern,
        assigned=assigned,
        min_messages_per_trigger=least,
        max_trigger_delay=delay,
        min_partitions=min_partitions,
        include_headers=_boolean("includeheaders", values.get("includeheaders", "true")),
        access=_access(values),
    )


def parse_write_options(options: Mapping[str, str]) -> WriteOptions:
    """Check ``df.write``'s or ``writeStream``'s options. Without a topic (option or
    path) each row's ``topic`` column names its topic.

    Raises:
        SparkOptionError: the first problem found, naming its option.
    """
    values = _lowered(options, _WRITE_OPTIONS)
    nsqd, lookupd = _addresses(values)
    return WriteOptions(
        topic=_topic(values) if "topic" in values else None,
        nsqd=nsqd,
        lookupd=lookupd,
        exactly_once=_boolean("exactlyonce", values.get("exactlyonce", "true")),
        batch_size=_integer(
            "batchsize", values.get("batchsize", str(DEFAULT_WRITE_BATCH)), low=1, high=10_000
        ),
        access=_access(values),
    )
