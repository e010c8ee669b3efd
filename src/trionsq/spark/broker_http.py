"""The data source's side of the broker's HTTP API, blocking, for Spark's Python workers.

Spark runs the planner and each task in plain Python processes, so this uses the
standard library's ``http.client`` (no Trio loop to start per call): the offsets of
each partition (``/partition/offsets``), pages of records (``/partition/read``, one
keep-alive connection per task), reader holds, and where partitions live (nsqd
addresses given, or nsqlookupd's ``/lookup``).
"""

from __future__ import annotations

import http.client
import urllib.parse
from typing import TYPE_CHECKING, Final

import attrs
import orjson

from ..protocol.record_batch import RecordBatch, decode_record_batch
from .options import SparkOptionError

if TYPE_CHECKING:
    from collections.abc import Mapping, Sequence

__all__ = [
    "BrokerAnswerError",
    "PageReader",
    "PartitionOffsets",
    "get_json",
    "locate_partitions",
    "partition_offsets",
    "post",
    "tcp_address",
]

TIMEOUT: Final = 30.0


class BrokerAnswerError(RuntimeError):
    """A broker or lookupd refused a request; ``status`` and its reason kept."""

    def __init__(self, address: str, status: int, reason: str) -> None:
        super().__init__(f"{address} answered {status}: {reason}")
        self.status = status
        self.reason = reason


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


def _request(
    address: str,
    method: str,
    path: str,
    params: Mapping[str, object],
    *,
    option: str,
    connection: http.client.HTTPConnection | None = None,
) -> bytes:
    query = urllib.parse.urlencode({k: str(v) for k, v in params.items() if v is not None})
    target = f"{path}?{query}" if query else path
    own = connection is None
    if connection is None:
        connection = http.client.HTTPConnection(*_split(address), timeout=TIMEOUT)
    try:
        connection.request(method, target, body=b"" if method == "POST" else None)
        response = connection.getresponse()
        body = response.read()
    except OSError as error:
        connection.close()
        raise SparkOptionError(option, f"cannot reach {address}: {error}") from error
    except http.client.HTTPException as error:
        connection.close()
        raise SparkOptionError(option, f"{address} does not answer HTTP: {error!r}") from error
    finally:
        if own:
            connection.close()
    if response.status != 200:
        raise BrokerAnswerError(address, response.status, _reason(body))
    return body


def get_json(address: str, path: str, params: Mapping[str, object], *, option: str) -> object:
    """GET ``path`` as JSON, unwrapping Youzan's/nsqd V1's ``{"data": ...}`` envelope."""
    document = orjson.loads(_request(address, "GET", path, params, option=option))
    if isinstance(document, dict) and "data" in document and "status_code" in document:
        return document["data"]
    return document


def post(address: str, path: str, params: Mapping[str, object], *, option: str) -> None:
    """POST with the arguments in the query, as nsqd's HTTP API takes them."""
    _request(address, "POST", path, params, option=option)


def partition_offsets(
    address: str,
    topic: str,
    *,
    option: str,
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
        document = get_json(address, "/partition/offsets", params, option=option)
    except BrokerAnswerError as error:
        if error.status == 404:
            return []
        raise
    if not isinstance(document, dict) or not isinstance(document.get("partitions"), list):
        raise SparkOptionError(option, f"{address} is not a trionsq broker (no partition offsets)")
    return [
        PartitionOffsets(
            partition=int(entry["partition"]),
            address=address,
            earliest=int(entry["earliest_offset"]),
            latest=int(entry["latest_offset"]),
            at_timestamp=_optional_int(entry.get("timestamp_offset")),
            limit=_optional_int(entry.get("limit_offset")),
        )
        for entry in document["partitions"]
    ]


def _optional_int(value: object) -> int | None:
    return int(value) if isinstance(value, int) else None


def locate_partitions(
    topic: str, nsqd: Sequence[str], lookupd: Sequence[str]
) -> dict[int, PartitionOffsets]:
    """Every partition of ``topic`` with the broker that holds it (the first broker
    listing a partition wins; nsqlookupd's leaders are asked first)."""
    option = "nsqd" if nsqd else "lookupd"
    candidates = list(nsqd) if nsqd else _from_lookupd(topic, lookupd)
    found: dict[int, PartitionOffsets] = {}
    for address in candidates:
        for entry in partition_offsets(address, topic, option=option):
            found.setdefault(entry.partition, entry)
    if not found:
        where = ", ".join(candidates) or ", ".join(lookupd)
        raise SparkOptionError("topic", f"no broker ({where}) has topic {topic!r}")
    return found


def _from_lookupd(topic: str, lookupd: Sequence[str]) -> list[str]:
    """Broker HTTP addresses nsqlookupd lists for ``topic`` (Youzan's partition leaders
    first, then upstream's producers)."""
    addresses: list[str] = []
    failures = []
    for lookup in lookupd:
        params = {"topic": topic, "access": "r", "metainfo": "true"}
        try:
            document = get_json(lookup, "/lookup", params, option="lookupd")
        except BrokerAnswerError as error:
            if error.status == 404:
                continue
            failures.append(str(error))
            continue
        except SparkOptionError as error:
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


def tcp_address(http_address: str) -> str:
    """The TCP address of the broker whose HTTP address is given (from ``/info``)."""
    document = get_json(http_address, "/info", {}, option="nsqd")
    if not isinstance(document, dict) or not isinstance(document.get("tcp_port"), int):
        raise SparkOptionError("nsqd", f"{http_address} /info names no tcp_port")
    host, _ = _split(http_address)
    return f"{host}:{document['tcp_port']}"


class PageReader:
    """Pages of one partition's records over one keep-alive connection."""

    def __init__(self, address: str, topic: str, partition: int) -> None:
        self.address = address
        self.topic = topic
        self.partition = partition
        self._connection = http.client.HTTPConnection(*_split(address), timeout=TIMEOUT)

    def read(self, offset: int, max_records: int, max_bytes: int) -> RecordBatch:
        """The records from ``offset`` on (at least one if any is there).

        Raises:
            BrokerAnswerError: the broker refused (e.g. an offset no longer held).
        """
        params = {
            "topic": self.topic,
            "partition": self.partition,
            "offset": offset,
            "max_records": max_records,
            "max_bytes": max_bytes,
        }
        body = _request(
            self.address,
            "GET",
            "/partition/read",
            params,
            option="nsqd",
            connection=self._connection,
        )
        return decode_record_batch(body)

    def close(self) -> None:
        self._connection.close()

    def __enter__(self) -> PageReader:
        return self

    def __exit__(self, *_: object) -> None:
        self.close()
