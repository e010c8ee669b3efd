"""etcd v3's JSON gateway, both ways, without I/O.

The gateway speaks gRPC messages as JSON: keys and values in base64, 64-bit
integers as decimal strings, and fields at their zero value left out. These
functions build the request bodies and read the replies into typed values, so the
client (``etcd.py``) only moves bytes and the shapes are tested here alone.
"""

from __future__ import annotations

import base64
from typing import TYPE_CHECKING, Final, Literal

import attrs
import orjson

if TYPE_CHECKING:
    from collections.abc import Sequence

__all__ = [
    "Compare",
    "EtcdReplyError",
    "KeyValue",
    "Op",
    "TxnReply",
    "WatchBatch",
    "WatchEvent",
    "as_int",
    "b64",
    "compare_json",
    "decode_reply",
    "header_revision",
    "op_json",
    "parse_kvs",
    "parse_txn",
    "parse_watch",
    "prefix_end",
    "range_json",
    "txn_json",
]

Json = dict[str, object]

PUT: Final = "PUT"
DELETE: Final = "DELETE"


class EtcdReplyError(ValueError):
    """etcd answered with an error or with JSON of an unexpected shape."""

    def __init__(self, message: str, code: int = 0) -> None:
        super().__init__(message)
        self.code = code
        """The gRPC status code etcd gave (0: none, a shape error)."""


@attrs.frozen
class KeyValue:
    """One key as etcd holds it."""

    key: bytes
    value: bytes
    create_revision: int = 0
    mod_revision: int = 0
    version: int = 0
    lease: int = 0


@attrs.frozen
class WatchEvent:
    """A change seen by a watch: ``PUT`` (created or changed) or ``DELETE``."""

    kind: str
    kv: KeyValue


@attrs.frozen
class Compare:
    """One condition of a transaction: ``target`` of ``key`` ``result`` ``value``.

    ``target``: ``VALUE`` (bytes), ``CREATE``/``MOD``/``VERSION`` (revisions, ints) or
    ``LEASE`` (an id); ``CREATE == 0`` means "the key does not exist".
    """

    key: bytes
    target: Literal["VALUE", "CREATE", "MOD", "VERSION", "LEASE"]
    result: Literal["EQUAL", "GREATER", "LESS", "NOT_EQUAL"]
    value: bytes | int


@attrs.frozen
class Op:
    """One request of a transaction's branch: put, delete or range."""

    kind: Literal["put", "delete", "range"]
    key: bytes
    value: bytes = b""
    lease: int = 0
    prefix: bool = False


@attrs.frozen
class TxnReply:
    """Whether the comparisons held, and the keys each range of the branch read."""

    succeeded: bool
    revision: int
    ranges: tuple[tuple[KeyValue, ...], ...] = ()


def b64(data: bytes) -> str:
    """Bytes as the gateway's JSON wants them."""
    return base64.b64encode(data).decode("ascii")


def prefix_end(prefix: bytes) -> bytes:
    """The ``range_end`` that covers every key starting with ``prefix``."""
    end = bytearray(prefix)
    while end:
        if end[-1] < 0xFF:
            end[-1] += 1
            return bytes(end)
        end.pop()
    return b"\x00"  # every key


def as_int(value: object) -> int:
    """An int64 as the gateway writes it (a decimal string) or a JSON number."""
    if isinstance(value, bool):
        raise EtcdReplyError(f"expected an integer, got {value!r}")
    if isinstance(value, int):
        return value
    if isinstance(value, str):
        try:
            return int(value)
        except ValueError:
            pass
    if value is None:
        return 0
    raise EtcdReplyError(f"expected an integer, got {value!r}")


def _bytes(value: object) -> bytes:
    if value is None:
        return b""
    if not isinstance(value, str):
        raise EtcdReplyError(f"expected base64 text, got {value!r}")
    try:
        return base64.b64decode(value, validate=True)
    except ValueError:
        raise EtcdReplyError(f"bad base64 {value[:40]!r}") from None


def _object(value: object, what: str) -> Json:
    if value is None:
        return {}
    if not isinstance(value, dict):
        raise EtcdReplyError(f"{what}: expected an object, got {type(value).__name__}")
    return value


def _list(value: object, what: str) -> list[object]:
    if value is None:
        return []
    if not isinstance(value, list):
        raise EtcdReplyError(f"{what}: expected a list, got {type(value).__name__}")
    return value


def decode_reply(body: bytes) -> Json:
    """A gateway reply's JSON object; its ``error`` (a gRPC status) raised."""
    try:
        reply = orjson.loads(body)
    except orjson.JSONDecodeError:
        raise EtcdReplyError(f"not JSON: {body[:80]!r}") from None
    reply = _object(reply, "reply")
    error = reply.get("error")
    if error is not None or ("code" in reply and "message" in reply):
        status = _object(error, "error") if isinstance(error, dict) else reply
        message = status.get("message", error)
        raise EtcdReplyError(f"etcd: {message}", as_int(status.get("code", 0)))
    return reply


def header_revision(reply: Json) -> int:
    """The store revision a reply was made at."""
    return as_int(_object(reply.get("header"), "header").get("revision"))


def _kv(raw: object) -> KeyValue:
    data = _object(raw, "kv")
    return KeyValue(
        key=_bytes(data.get("key")),
        value=_bytes(data.get("value")),
        create_revision=as_int(data.get("create_revision")),
        mod_revision=as_int(data.get("mod_revision")),
        version=as_int(data.get("version")),
        lease=as_int(data.get("lease")),
    )


def parse_kvs(reply: Json) -> tuple[list[KeyValue], int]:
    """A range reply's keys and the revision it was read at."""
    return [_kv(raw) for raw in _list(reply.get("kvs"), "kvs")], header_revision(reply)


def range_json(key: bytes, *, prefix: bool = False) -> Json:
    """A range request of one key, or of every key under ``key`` as a prefix."""
    request: Json = {"key": b64(key)}
    if prefix:
        request["range_end"] = b64(prefix_end(key))
    return request


def compare_json(compare: Compare) -> Json:
    """One comparison as the gateway reads it."""
    field = {
        "VALUE": "value",
        "CREATE": "create_revision",
        "MOD": "mod_revision",
        "VERSION": "version",
        "LEASE": "lease",
    }[compare.target]
    value = compare.value
    encoded: object = b64(value) if isinstance(value, bytes) else str(value)
    return {
        "key": b64(compare.key),
        "target": compare.target,
        "result": compare.result,
        field: encoded,
    }


def op_json(op: Op) -> Json:
    """One transaction request as the gateway reads it."""
    if op.kind == "put":
        put: Json = {"key": b64(op.key), "value": b64(op.value)}
        if op.lease:
            put["lease"] = str(op.lease)
        return {"request_put": put}
    if op.kind == "delete":
        return {"request_delete_range": range_json(op.key, prefix=op.prefix)}
    return {"request_range": range_json(op.key, prefix=op.prefix)}


def txn_json(compare: Sequence[Compare], success: Sequence[Op], failure: Sequence[Op]) -> Json:
    """A whole transaction request."""
    return {
        "compare": [compare_json(c) for c in compare],
        "success": [op_json(o) for o in success],
        "failure": [op_json(o) for o in failure],
    }


def parse_txn(reply: Json) -> TxnReply:
    """A transaction's outcome and what its range requests read."""
    ranges: list[tuple[KeyValue, ...]] = []
    for raw in _list(reply.get("responses"), "responses"):
        response = _object(raw, "response")
        if "response_range" in response:
            kvs, _ = parse_kvs(
                _object(response["response_range"], "response_range") | {"header": {}}
            )
            ranges.append(tuple(kvs))
    return TxnReply(bool(reply.get("succeeded", False)), header_revision(reply), tuple(ranges))


@attrs.frozen
class WatchBatch:
    """One message of a watch stream."""

    events: tuple[WatchEvent, ...]
    revision: int
    created: bool = False
    canceled: bool = False
    compact_revision: int = 0
    cancel_reason: str = ""


def parse_watch(message: Json) -> WatchBatch:
    """One line of a watch stream (``{"result": {...}}``)."""
    result = _object(message.get("result"), "result")
    events = tuple(
        WatchEvent(
            DELETE if _object(raw, "event").get("type") == DELETE else PUT,
            _kv(_object(raw, "event").get("kv")),
        )
        for raw in _list(result.get("events"), "events")
    )
    return WatchBatch(
        events,
        header_revision(result),
        created=bool(result.get("created", False)),
        canceled=bool(result.get("canceled", False)),
        compact_revision=as_int(result.get("compact_revision")),
        cancel_reason=str(result.get("cancel_reason", "")),
    )
