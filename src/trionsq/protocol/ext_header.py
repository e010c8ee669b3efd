"""Youzan's JSON ext header rules (spec tcp-protocol §8.3), in one place for every path.

TCP ``PUB_EXT``/``MPUB_EXT`` and HTTP ``/pub_ext`` store the same kind of header, so
they must agree on what a header is and what its reserved ``##`` keys mean. Both call
:func:`check_ext_header`; the errors it returns carry the TCP wire text (the HTTP
answer uses only their code). Pure: no I/O, no trio.
"""

from __future__ import annotations

import re
from typing import TYPE_CHECKING, Final

import attrs
import orjson

from .errors import ProtocolError
from .strconv import go_parse_uint64

if TYPE_CHECKING:
    from collections.abc import Iterable, Mapping

__all__ = [
    "DISPATCH_TAG_KEY",
    "IDEMPOTENCY_KEY",
    "MAX_EXT_HEADER_DEPTH",
    "MAX_IDEMPOTENCY_KEY_BYTES",
    "TRACE_ID_KEY",
    "ExtHeader",
    "check_ext_header",
    "idempotency_key_of",
    "stored_fields",
    "ttl_seconds_of",
]

TRACE_ID_KEY: Final = "##trace_id"
"""Decimal uint64 as a JSON string: the message's trace id, and a traced reply."""
DISPATCH_TAG_KEY: Final = "##client_dispatch_tag"
"""A string: the tag queue the message is dispatched to (spec §8.7)."""
IDEMPOTENCY_KEY: Final = "##idempotency_key"
"""trionsq's own: a non-empty string of at most :data:`MAX_IDEMPOTENCY_KEY_BYTES`
UTF-8 bytes; the partition stores a message with a key it already holds only once
(``trionsq.broker.idempotence``)."""
MAX_IDEMPOTENCY_KEY_BYTES: Final = 256
BAD_IDEMPOTENCY_KEY: Final = (
    f"{IDEMPOTENCY_KEY} must be a non-empty string of at most {MAX_IDEMPOTENCY_KEY_BYTES} bytes"
)
TTL_KEY: Final = "##ttl"
"""trionsq's own: the message's time to live in seconds, a JSON string of a positive
decimal number (``"30"``, ``"0.5"``); past it the message is skipped at delivery."""
MAX_TTL_SECONDS: Final = 10 * 365 * 86400
BAD_TTL: Final = (
    f"{TTL_KEY} must be a string of a positive number of seconds up to {MAX_TTL_SECONDS}"
)
MAX_EXT_HEADER_DEPTH: Final = 254
"""Most levels of objects and arrays in a header: what orjson can write back (HTTP
stores the header re-serialized), so TCP and HTTP refuse the same headers."""


@attrs.frozen
class ExtHeader:
    """A header that passed the rules, with what its reserved keys say."""

    fields: dict[str, object]
    """The JSON object, ``overrides`` applied (HTTP stores it re-serialized)."""
    trace_id: int | None
    """``##trace_id`` when present; ``None`` when absent (or JSON ``null``)."""
    tag: str | None
    """``##client_dispatch_tag`` when it is a string."""
    idempotency_key: str | None = None
    """``##idempotency_key`` when present (it is then a valid key)."""
    ttl: float | None = None
    """``##ttl`` in seconds when present (it is then valid)."""


_DECIMAL: Final = re.compile(r"[0-9]{1,12}(\.[0-9]{1,9})?")


def _soft(code: str, description: str) -> ProtocolError:
    """Youzan answers a bad header and keeps the connection (non-fatal)."""
    return ProtocolError(code, description, fatal=False)


def check_ext_header(
    header: bytes | str, overrides: Mapping[str, str] | None = None
) -> ExtHeader | ProtocolError:
    """Parse ``header`` as a JSON object, apply ``overrides`` (HTTP's ``X-Nsqext-*``
    request headers), then check the reserved keys.

    Errors are returned, not raised, because none of them ends a TCP connection:
    ``E_INVALID_JSON_HEADER`` (not JSON, not an object, or nested deeper than
    :data:`MAX_EXT_HEADER_DEPTH`, or a ``##idempotency_key`` that is not a non-empty
    string of at most 256 bytes) and ``INVALID_TRACE_ID`` (``##trace_id`` not a
    string, or not a decimal uint64).
    """
    try:
        parsed = orjson.loads(header)
    except orjson.JSONDecodeError as exc:
        return _soft("E_INVALID_JSON_HEADER", f"fail to parse json header:{exc}")
    if not isinstance(parsed, dict):
        return _soft("E_INVALID_JSON_HEADER", "fail to parse json header:not a JSON object")
    fields: dict[str, object] = parsed
    if _deeper_than(fields, MAX_EXT_HEADER_DEPTH):
        return _soft(
            "E_INVALID_JSON_HEADER",
            f"fail to parse json header:nested deeper than {MAX_EXT_HEADER_DEPTH} levels",
        )
    if overrides:
        fields.update(overrides)
    trace_id: int | None = None
    raw_trace = fields.get(TRACE_ID_KEY)
    if raw_trace is not None:
        if not isinstance(raw_trace, str):
            return _soft("INVALID_TRACE_ID", "passin trace id should be string")
        trace_id = go_parse_uint64(raw_trace.encode("utf-8", "surrogateescape"))
        if trace_id is None:
            return _soft("INVALID_TRACE_ID", "invalid trace id")
    raw_tag = fields.get(DISPATCH_TAG_KEY)
    tag = raw_tag if isinstance(raw_tag, str) else None
    key: str | None = None
    if IDEMPOTENCY_KEY in fields:  # one dict lookup: the header is parsed already
        key = idempotency_key_of(fields)
        if key is None:
            return _soft(
                "E_INVALID_JSON_HEADER", f"fail to parse json header:{BAD_IDEMPOTENCY_KEY}"
            )
    ttl: float | None = None
    if TTL_KEY in fields:
        ttl = ttl_seconds_of(fields)
        if ttl is None:
            return _soft("E_INVALID_JSON_HEADER", f"fail to parse json header:{BAD_TTL}")
    return ExtHeader(fields, trace_id, tag, key, ttl)


def stored_fields(header: bytes) -> dict[str, object] | None:
    """A stored JSON header's object, or None if it is not one (a record written
    before a rule, or an ext version other than JSON): for reading reserved keys back
    from the log, where the header was checked when it was published."""
    try:
        fields = orjson.loads(header)
    except orjson.JSONDecodeError:
        return None
    return fields if isinstance(fields, dict) else None


def ttl_seconds_of(fields: Mapping[str, object]) -> float | None:
    """The header's ``##ttl`` in seconds if it is a valid one, else None."""
    raw = fields.get(TTL_KEY)
    if not isinstance(raw, str) or not _DECIMAL.fullmatch(raw):
        return None
    seconds = float(raw)
    return seconds if 0 < seconds <= MAX_TTL_SECONDS else None


def idempotency_key_of(fields: Mapping[str, object]) -> str | None:
    """The header's ``##idempotency_key`` if it is a valid one (a non-empty string of at
    most :data:`MAX_IDEMPOTENCY_KEY_BYTES` UTF-8 bytes), else None."""
    key = fields.get(IDEMPOTENCY_KEY)
    if not isinstance(key, str) or not key:
        return None
    if len(key) * 4 > MAX_IDEMPOTENCY_KEY_BYTES and (
        len(key.encode("utf-8", "surrogatepass")) > MAX_IDEMPOTENCY_KEY_BYTES
    ):
        return None
    return key


def _deeper_than(root: dict[str, object], limit: int) -> bool:
    """Whether objects and arrays nest more than ``limit`` levels (``root`` is level 1);
    an explicit stack, and a flat header costs one pass over its values."""
    stack: list[tuple[object, int]] = [(root, 1)]
    while stack:
        node, level = stack.pop()
        items: Iterable[object] = node.values() if isinstance(node, dict) else node  # type: ignore[assignment]
        for item in items:
            if isinstance(item, (dict, list)):
                if level >= limit:
                    return True
                stack.append((item, level + 1))
    return False
