"""One message, as each side sees it: TubeMQ's data and flag, NSQ's body and header.

A TubeMQ message is a payload plus, when its flag has bit 1, an attribute section
``k=v,k=v`` before it; ``msgType`` (the stream id consumers filter on) travels as
the ``$msgType$`` attribute. trionsq stores the payload as the NSQ body, so every
NSQ client reads it unchanged; on an ext topic the attributes become the JSON
header (each attribute a string field, and ``msgType`` also the dispatch tag
``##client_dispatch_tag``), which NSQ ext consumers read and a TubeMQ consumer gets
back as attributes. On a plain topic there is no header, so attributes are not kept
(docs/tubemq.md, "Interop").
"""

from __future__ import annotations

import orjson

from ..protocol.ext_header import DISPATCH_TAG_KEY
from ..protocol.tubemq_formats import MSG_TYPE_KEY, format_attributes, parse_attributes

__all__ = ["attributes_of", "header_of"]


def header_of(attributes: str, msg_type: str) -> bytes | None:
    """The JSON header an ext topic stores for these attributes (None: no header)."""
    fields: dict[str, object] = dict(parse_attributes(attributes))
    if msg_type:
        fields.setdefault(MSG_TYPE_KEY, msg_type)
    tag = fields.get(MSG_TYPE_KEY)
    if isinstance(tag, str) and tag:
        fields.setdefault(DISPATCH_TAG_KEY, tag)
    return orjson.dumps(fields) if fields else None


def attributes_of(header: bytes) -> str:
    """A stored message's JSON header as TubeMQ attributes: its string and number
    fields (not trionsq's ``##`` keys); the dispatch tag becomes ``$msgType$`` when
    that is missing."""
    if not header:
        return ""
    try:
        fields = orjson.loads(header)
    except orjson.JSONDecodeError:
        return ""
    if not isinstance(fields, dict):
        return ""
    kept = {
        key: value if isinstance(value, str) else orjson.dumps(value).decode()
        for key, value in fields.items()
        if not key.startswith("##") and isinstance(value, str | int | float | bool)
    }
    tag = fields.get(DISPATCH_TAG_KEY)
    if isinstance(tag, str) and tag and MSG_TYPE_KEY not in kept:
        kept[MSG_TYPE_KEY] = tag
    return format_attributes(kept)
