"""Youzan's JSON ext header rules (spec tcp-protocol §8.3), in one place for every path.

TCP ``PUB_EXT``/``MPUB_EXT`` and HTTP ``/pub_ext`` store the same kind of header, so
they must agree on what a header is and what its reserved ``##`` keys mean. Both call
:func:`check_ext_header`; the errors it returns carry the TCP wire text (the HTTP
answer uses only their code). Pure: no I/O, no trio.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Final

import attrs
import orjson

from .errors import ProtocolError
from .strconv import go_parse_uint64

if TYPE_CHECKING:
    from collections.abc import Iterable, Mapping

__all__ = [
    "DISPATCH_TAG_KEY",
    "MAX_EXT_HEADER_DEPTH",
    "TRACE_ID_KEY",
    "ExtHeader",
    "check_ext_header",
]

TRACE_ID_KEY: Final = "##trace_id"
"""Decimal uint64 as a JSON string: the message's trace id, and a traced reply."""
DISPATCH_TAG_KEY: Final = "##client_dispatch_tag"
"""A string: the tag queue the message is dispatched to (spec §8.7)."""
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
    :data:`MAX_EXT_HEADER_DEPTH`) and ``INVALID_TRACE_ID`` (``##trace_id`` not a
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
    return ExtHeader(fields, trace_id, tag)


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
