"""The data source's side of the broker's HTTP API, blocking, for Spark's Python workers.

Spark runs the planner and each task in plain Python processes, so this uses the
standard library's ``http.client`` (no Trio loop to start per call): the offsets of
each partition (``/partition/offsets``), pages of records (``/partition/read``, one
keep-alive connection per task), reader holds, where partitions live (nsqd
addresses given, or nsqlookupd's ``/lookup``) and which topics there are.

A broker that cannot be reached (restarting, a network blip) is retried with
backoff for ``brokerRetryTimeout`` (:class:`~.options.BrokerAccess`), as Kafka's
source retries fetching offsets; past it the query fails with
:class:`BrokerUnavailableError`, which says it was an outage. With ``authSecret``
each request carries ``Authorization: Bearer <secret>``.
"""

from __future__ import annotations

import http.client
import logging
import time
import urllib.parse
from typing import TYPE_CHECKING, Final, TypeVar

import attrs
import orjson

from ..protocol.record_batch import RecordBatch, decode_record_batch
from .options import BrokerAccess, SparkOptionError

if TYPE_CHECKING:
    from collections.abc import Callable, Mapping, Sequence

__all__ = [
    "BrokerAnswerError",
    "BrokerUnavailableError",
    "PageReader",
    "PartitionOffsets",
    "get_json",
    "list_topics",
    "locate_partitions",
    "partition_offsets",
    "post",
    "retrying",
    "tcp_address",
]

log = logging.getLogger("trionsq.spark")
R = TypeVar("R")

TIMEOUT: Final = 30.0
FIRST_BACKOFF: Final = 0.1
MAX_BACKOFF: Final = 2.0


class BrokerAnswerError(RuntimeError):
    """A broker or lookupd refused a request; ``status`` and its reason kept."""

    def __init__(self, address: str, status: int, reason: str) -> None:
        hint = " (the broker requires AUTH: give the authSecret option)" if status == 401 else ""
        super().__init__(f"{address} answered {status}: {reason}{hint}")
        self.status = status
        self.reason = reason


class BrokerUnavailableError(RuntimeError):
    """A broker stayed unreachable for all of ``brokerRetryTimeout``."""

    def __init__(self, address: str, waited: float, error: BaseException) -> None:
        super().__init__(
            f"trionsq: broker {address} unreachable, retried for {waited:.0f} s"
            f" (brokerRetryTimeout): {error}"
        )
        self.address = address


@attrs.frozen
class PartitionOffsets:
    """One partition's readable range on one broker, from ``/partition/offsets``."""

    partition: int
    address: str
    """The broker's HTTP address that holds it."""
    earliest: int
    latest: int
    at_timestamp: int | None = None
    """With a timestamp asked: the offset of the first message at or after it."""
    limit: int | None = None
    """With ``after_offset``/``max_messages``: where that many messages end."""
    next_id: int = 0
    """The id the next message gets: ``latest`` in messages."""
    after_id: int | None = None
    """With ``after_offset``: the id of the message there (``next_id`` at the end)."""
    ext: bool = False
    """Whether the topic is an ext topic (takes headers)."""


def _reason(body: bytes) -> str:
    try:
        document = orjson.loads(body)
    except orjson.JSONDecodeError:
        return body.decode("utf-8", "replace").strip()
    if isinstance(document, dict) and isinstance(document.get("message"), str):
        return str(document["message"])
    return body.decode("utf-8", "replace").strip()


def _split(address: str) -> tuple[str, int]:
    host, _, port = address.rpartition(":")
    return host.strip("[]"), int(port)


def retrying(access: BrokerAccess, address: str, attempt: Callable[[], R]) -> R:
    """``attempt()`` again, with backoff, while it fails to reach ``address`` (OSError,
    or a connection that broke mid-answer), for up to ``access.retry_timeout``."""
    deadline = time.monotonic() + access.retry_timeout
    backoff = FIRST_BACKOFF
    warned = False
    while True:
        try:
            return attempt()
        except (OSError, http.client.HTTPException) as error:
            left = deadline - time.monotonic()
            if left <= 0:
                raise BrokerUnavailableError(address, access.retry_timeout, error) from None
            if not warned:
                log.warning("trionsq: broker %s unreachable (%s); retrying", address, error)
                warned = True
            time.sleep(min(backoff, left))
            backoff = min(backoff * 2, MAX_BACKOFF)


def _request(
    access: BrokerAccess,
    address: str,
    method: str,
    path: str,
    params: Mapping[str, object],
    *,
    connection: http.client.HTTPConnection | None = None,
) -> bytes:
    query = urllib.parse.urlencode({k: str(v) for k, v in params.items() if v is not None})
    target = f"{path}?{query}" if query else path
    headers = {}
    if access.auth_secret is not None:
        headers["Authorization"] = f"Bearer {access.auth_secret}"

    def attempt() -> tuple[int, bytes]:
        client = connection or http.client.HTTPConnection(*_split(address), timeout=TIMEOUT)
        try:
            client.request(method, target, body=b"" if method == "POST" else None, headers=headers)
            response = client.getresponse()
            return response.status, response.read()
        except BaseException:
            client.close()  # a kept connection reconnects at its next request
            raise
        finally:
            if connection is None:
                client.close()

    status, body = retrying(access, address, attempt)
    if status != 200:
        raise BrokerAnswerError(address, status, _reason(body))
    return body


def get_json(access: BrokerAccess, address: str, path: str, params: Mapping[str, object]) -> object:
    """GET ``path`` as JSON, unwrapping Youzan's/nsqd V1's ``{"data": ...}`` envelope."""
    document = orjson.loads(_request(access, address, "GET", path, params))
    if isinstance(document, dict) and "data" in document and "status_code" in document:
        return document["data"]
    return document


def post(access: BrokerAccess, address: str, path: str, params: Mapping[str, object]) -> None:
    """POST with the arguments in the query, as nsqd's HTTP API takes them."""
    _request(access, address, "POST", path, params)


def partition_offsets(
    access: BrokerAccess,
    address: str,
    topic: str,
    *,
    partition: int | None = None,
    timestamp_ms: int | None = None,
    after_offset: int | None = None,
    max_messages: int | None = None,
) -> list[PartitionOffsets]:
    """The topic's partitions on the broker at ``address`` and their offsets; [] if it
    does not have the topic."""
    params: dict[str, object] = {"topic": topic, "partition": partition}
    params["timestamp_ms"] = timestamp_ms
    params["after_offset"] = after_offset
    params["max_messages"] = max_messages
    try:
        document = get_json(access, address, "/partition/offsets", params)
    except BrokerAnswerError as error:
        if error.status == 404:
            return []
        raise
    if not isinstance(document, dict) or not isinstance(document.get("partitions"), list):
        raise SparkOptionError("nsqd", f"{address} is not a trionsq broker (no partition offsets)")
    ext = document.get("ext") is True
    return [
        PartitionOffsets(
            partition=int(entry["partition"]),
            address=address,
            earliest=int(entry["earliest_offset"]),
            latest=int(entry["latest_offset"]),
            at_timestamp=_optional_int(entry.get("timestamp_offset")),
            limit=_optional_int(entry.get("limit_offset")),
            next_id=int(entry.get("next_id", 0)),
            after_id=_optional_int(entry.get("after_id")),
            ext=ext,
        )
        for entry in document["partitions"]
    ]


def _optional_int(value: object) -> int | None:
    return int(value) if isinstance(value, int) else None


def locate_partitions(
    access: BrokerAccess,
    topic: str,
    nsqd: Sequence[str],
    lookupd: Sequence[str],
    *,
    required: bool = True,
) -> dict[int, PartitionOffsets]:
    """Every partition of ``topic`` with the broker that holds it (the first broker
    listing a partition wins; nsqlookupd's leaders are asked first). Without the
    topic: an error naming it, or {} when not ``required``."""
    candidates = list(nsqd) if nsqd else _from_lookupd(access, topic, lookupd)
    found: dict[int, PartitionOffsets] = {}
    for address in candidates:
        for entry in partition_offsets(access, address, topic):
            found.setdefault(entry.partition, entry)
    if not found and required:
        where = ", ".join(candidates) or ", ".join(lookupd)
        raise SparkOptionError("topic", f"no broker ({where}) has topic {topic!r}")
    return found


def list_topics(access: BrokerAccess, nsqd: Sequence[str], lookupd: Sequence[str]) -> list[str]:
    """Every topic the brokers (``/stats``) or nsqlookupd (``/topics``) know, sorted."""
    topics: set[str] = set()
    for address in lookupd:
        document = get_json(access, address, "/topics", {})
        if isinstance(document, dict) and isinstance(document.get("topics"), list):
            topics.update(str(name) for name in document["topics"])
    for address in nsqd:
        params = {"format": "json", "include_clients": "false", "include_mem": "false"}
        document = get_json(access, address, "/stats", params)
        if isinstance(document, dict) and isinstance(document.get("topics"), list):
            topics.update(
                str(entry["topic_name"]) for entry in document["topics"] if isinstance(entry, dict)
            )
    return sorted(topics)


def _from_lookupd(access: BrokerAccess, topic: str, lookupd: Sequence[str]) -> list[str]:
    """Broker HTTP addresses nsqlookupd lists for ``topic`` (Youzan's partition leaders
    first, then upstream's producers)."""
    addresses: list[str] = []
    failures = []
    for lookup in lookupd:
        params = {"topic": topic, "access": "r", "metainfo": "true"}
        try:
            document = get_json(access, lookup, "/lookup", params)
        except BrokerAnswerError as error:
            if error.status == 404:
                continue
            failures.append(str(error))
            continue
        except BrokerUnavailableError as error:
            failures.append(str(error))
            continue
        if not isinstance(document, dict):
            continue
        peers: list[object] = []
        partitions = document.get("partitions")
        if isinstance(partitions, dict):
            peers.extend(partitions.values())
        producers = document.get("producers")
        if isinstance(producers, list):
            peers.extend(producers)
        for peer in peers:
            if isinstance(peer, dict) and "http_port" in peer:
                address = f"{peer.get('broadcast_address')}:{peer['http_port']}"
                if address not in addresses:
                    addresses.append(address)
    if not addresses and failures and len(failures) == len(lookupd):
        raise SparkOptionError("lookupd", "; ".join(failures))
    return addresses


def tcp_address(access: BrokerAccess, http_address: str) -> str:
    """The TCP address of the broker whose HTTP address is given (from ``/info``)."""
    document = get_json(access, http_address, "/info", {})
    if not isinstance(document, dict) or not isinstance(document.get("tcp_port"), int):
        raise SparkOptionError("nsqd", f"{http_address} /info names no tcp_port")
    host, _ = _split(http_address)
    return f"{host}:{document['tcp_port']}"


@attrs.define(eq=False)
class PageReader:
    """Pages of one partition's records over one keep-alive connection."""

    access: BrokerAccess
    address: str
    topic: str
    partition: int
    _connection: http.client.HTTPConnection = attrs.field(init=False)

    @_connection.default
    def _connect(self) -> http.client.HTTPConnection:
        return http.client.HTTPConnection(*_split(self.address), timeout=TIMEOUT)

    def read(self, offset: int, max_records: int, max_bytes: int) -> RecordBatch:
        """The records from ``offset`` on (at least one if any is there).

        Raises:
            BrokerAnswerError: the broker refused (e.g. an offset no longer held).
            BrokerUnavailableError: it stayed unreachable for ``brokerRetryTimeout``.
        """
        params = {
            "topic": self.topic,
            "partition": self.partition,
            "offset": offset,
            "max_records": max_records,
            "max_bytes": max_bytes,
        }
        body = _request(
            self.access,
            self.address,
            "GET",
            "/partition/read",
            params,
            connection=self._connection,
        )
        return decode_record_batch(body)

    def close(self) -> None:
        self._connection.close()

    def __enter__(self) -> PageReader:
        return self

    def __exit__(self, *_: object) -> None:
        self.close()
