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


_HEADS_KEPT: Final = 256
"""Distinct request heads remembered (:func:`_read_head`); beyond that it starts over."""
_HEAD_KEPT_BYTES: Final = 1024
"""Longer heads are read every time, never kept: the memory stays under 256 KiB however
many distinct 64 KiB heads a client makes up."""


@attrs.frozen
class _Head:
    """What a plain head says, kept per distinct head bytes."""

    method: str
    target: str
    headers: dict[str, str]
    length: int


_heads: dict[bytes, _Head | None] = {}
"""Head bytes -> what they say (None: not plain). A keep-alive client sends the same
head again and again (same target, same headers, same Content-Length), so each
distinct one is read once: reading it cost ~5 µs of each HTTP ``/pub`` (issue 37).
Its ``headers`` dict is shared by every request with that head: handlers only read it."""


def parse_simple_request(data: bytes, max_head: int) -> SimpleRequest | None:
    """The request at the start of ``data`` if it is plain and all here, else None."""
    head_end = data.find(b"\r\n\r\n", 0, max_head)
    if head_end < 0:
        return None
    raw = data[:head_end]
    try:
        head = _heads[raw]
    except KeyError:
        head = _read_head(raw)
        if len(raw) <= _HEAD_KEPT_BYTES:
            if len(_heads) >= _HEADS_KEPT:
                _heads.clear()
            _heads[raw] = head
    if head is None:
        return None
    body_start = head_end + 4
    end = body_start + head.length
    if len(data) < end:
        return None  # the body is still coming: h11 reads it
    return SimpleRequest(head.method, head.target, head.headers, data[body_start:end], end)


def _read_head(raw: bytes) -> _Head | None:
    """A head (without its blank line) if it is plain, else None."""
    lines = raw.split(b"\r\n")
    line = _REQUEST_LINE.fullmatch(lines[0])
    if line is None:
        return None
    headers: dict[str, str] = {}
    hosts = lengths = 0
    for raw_line in lines[1:]:
        header = _HEADER.fullmatch(raw_line)
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
    return _Head(line[1].decode("ascii"), line[2].decode("ascii"), headers, length)
