"""Topic and channel names, and Go's ``%q`` quoting used in the error texts."""

from __future__ import annotations

import re
from typing import Final

__all__ = ["EPHEMERAL_SUFFIX", "MAX_PARTITION_NUM", "go_quote", "is_ephemeral", "is_valid_name"]

EPHEMERAL_SUFFIX: Final = "#ephemeral"
MAX_NAME_LENGTH: Final = 64
MAX_PARTITION_NUM: Final = 255
"""Youzan's MAX_PARTITION_NUM: a topic has at most 255 partitions, ids 0..254."""
_NAME = re.compile(rb"[.a-zA-Z0-9_-]+(?:#ephemeral)?")


def is_valid_name(name: bytes) -> bool:
    """True for a valid topic or channel name (1..64 bytes, nsqd's character set)."""
    return 0 < len(name) <= MAX_NAME_LENGTH and _NAME.fullmatch(name) is not None


def is_ephemeral(name: str) -> bool:
    """True when the name carries the ``#ephemeral`` suffix."""
    return name.endswith(EPHEMERAL_SUFFIX)


_GO_ESCAPES: Final = {
    0x07: "\\a",
    0x08: "\\b",
    0x0C: "\\f",
    0x0A: "\\n",
    0x0D: "\\r",
    0x09: "\\t",
    0x0B: "\\v",
    0x5C: "\\\\",
    0x22: '\\"',
}


def go_quote(raw: bytes) -> str:
    """Quote bytes the way Go's ``fmt.Sprintf("%q", string(b))`` does.

    Printable UTF-8 passes through; control characters use Go's escapes; bytes that
    are not valid UTF-8 become ``\\xNN``. nsqd quotes bad names this way in its errors.
    """
    out = ['"']
    text = raw.decode("utf-8", "surrogateescape")
    for ch in text:
        code = ord(ch)
        if 0xDC80 <= code <= 0xDCFF:  # an undecodable byte
            out.append(f"\\x{code - 0xDC00:02x}")
        elif code in _GO_ESCAPES:
            out.append(_GO_ESCAPES[code])
        elif ch.isprintable():
            out.append(ch)
        elif code < 0x10000:
            out.append(f"\\x{code:02x}" if code < 0x80 else f"\\u{code:04x}")
        else:
            out.append(f"\\U{code:08x}")
    out.append('"')
    return "".join(out)
