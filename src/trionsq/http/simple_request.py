"""The common request read without h11: a whole ``GET`` or ``POST`` in one buffer.

h11 parsed, validated and state-tracked every request, which cost HTTP ``/pub`` more
than the publish itself (issue 19: 9.5k req/s against nsqd's 70k). Most requests are
plain: an origin-form target, HTTP/1.1, a Host, a Content-Length body that arrived
with its head. :func:`parse_simple_request` takes exactly those and answers None for
anything else (another method or version, Transfer-Encoding, Expect, Upgrade, a
``Connection`` other than keep-alive, a character h11 might judge otherwise, a body
not all here yet), which then goes through h11 as before, from the same bytes: h11
stays the authority on every error and every unusual request. Pure code over bytes.
"""

from __future__ import annotations

import re
from typing import Final

import attrs

__all__ = ["SimpleRequest", "parse_simple_request"]

_REQUEST_LINE: Final = re.compile(rb"(GET|POST) (/[\x21-\x7e]*) HTTP/1\.1")
_HEADER: Final = re.compile(rb"([!#$%&'*+\-.^_`|~0-9A-Za-z]+):[ \t]*([\x20-\x7e\t]*?)[ \t]*")
_DIGITS: Final = re.compile(rb"[0-9]{1,18}")
_REFUSED: Final = frozenset({"transfer-encoding", "expect", "upgrade", "te", "trailer"})
"""Headers that change how the request is read: left to h11."""


@attrs.frozen
class SimpleRequest:
    """A request read whole from the front of a buffer."""

    method: str
    target: str
    headers: dict[str, str]
    """Lower-cased names, the last value of a repeated one (as the h11 path keeps them)."""
    body: bytes
    size: int
    """Bytes of the buffer it took: what follows is the next request."""


def parse_simple_request(data: bytes, max_head: int) -> SimpleRequest | None:
    """The request at the start of ``data`` if it is plain and all here, else None."""
    head_end = data.find(b"\r\n\r\n", 0, max_head)
    if head_end < 0:
        return None
    lines = data[:head_end].split(b"\r\n")
    line = _REQUEST_LINE.fullmatch(lines[0])
    if line is None:
        return None
    headers: dict[str, str] = {}
    hosts = lengths = 0
    for raw in lines[1:]:
        header = _HEADER.fullmatch(raw)
        if header is None:
            return None
        name = header[1].decode("ascii").lower()
        value = header[2].decode("ascii")
        if name in _REFUSED:
            return None
        if name == "host":
            hosts += 1
        elif name == "content-length":
            lengths += 1
            if _DIGITS.fullmatch(header[2]) is None:
                return None
        elif name == "connection" and value.lower() != "keep-alive":
            return None
        headers[name] = value
    if hosts != 1 or lengths > 1:
        return None
    length = int(headers["content-length"]) if lengths else 0
    body_start = head_end + 4
    end = body_start + length
    if len(data) < end:
        return None  # the body is still coming: h11 reads it
    return SimpleRequest(
        line[1].decode("ascii"), line[2].decode("ascii"), headers, data[body_start:end], end
    )
