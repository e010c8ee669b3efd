"""HTTP requests and responses as nsqd's handlers see them, and nsqd's envelopes.

Pure data (no trio): the connection loop turns h11 events into a :class:`Request`
and a :class:`Response` into bytes. Envelopes follow spec http-api.md §1 with the
decided choice of design.md §6: answers are in nsqd 1.x form (bare text, plain JSON,
``{"message": ...}`` errors, ``X-NSQ-Content-Type``) unless the request's Accept
header asks for the pre-1.0 ``status_code/status_txt/data`` envelope by naming the
``application/vnd.nsq`` type with a version other than 1.0. The exact 1.0 Accept
value that go-nsq's and nsqadmin's clients send gets 1.x answers, which their
``GETV1`` parses as bare JSON.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Final
from urllib.parse import parse_qs

import attrs
import orjson

__all__ = [
    "JSON_CONTENT_TYPE",
    "Request",
    "Response",
    "parse_bool",
    "wants_legacy_envelope",
]

JSON_CONTENT_TYPE: Final = b"application/json; charset=utf-8"
TEXT_CONTENT_TYPE: Final = b"text/plain; charset=utf-8"
V1_HEADER: Final = (b"X-NSQ-Content-Type", b"nsq; version=1.0")
V1_ACCEPT: Final = "application/vnd.nsq; version=1.0"


_TARGETS_KEPT: Final = 256
_TARGET_KEPT_CHARS: Final = 512
"""Longer targets are parsed every time, never kept (the memory stays bounded)."""
_targets: dict[str, tuple[str, dict[str, list[str]], bool]] = {}
"""Target -> (path, query, whether Go accepts the query), each distinct one parsed once:
clients send the same target again and again (``/pub?topic=t``), and ``parse_qs`` cost
~2 µs of each HTTP publish (issue 37). The query is shared: handlers only read it."""


@attrs.frozen
class Request:
    """One complete request: what a handler needs, body included."""

    method: str
    path: str
    query: Mapping[str, list[str]]
    headers: Mapping[str, str]
    """Lower-cased names; a repeated header keeps its last value."""
    body: bytes = b""
    query_valid: bool = True
    """False where Go's ``url.ParseQuery`` fails (a ``;``, a bad ``%`` escape): nsqd
    answers 400 INVALID_REQUEST on the endpoints that parse the query that way."""
    remote_address: str = ""
    """The client as ``host:port`` (the trace log names it)."""

    @classmethod
    def from_target(
        cls,
        method: str,
        target: str,
        headers: Mapping[str, str],
        body: bytes = b"",
        *,
        remote_address: str = "",
    ) -> Request:
        """Split ``target`` into path and query the way Go's ``url.ParseQuery`` does."""
        try:
            path, parsed, valid = _targets[target]
        except KeyError:
            path, _, query = target.partition("?")
            parsed = parse_qs(query, keep_blank_values=True) if query else {}
            valid = go_query_valid(query)
            if len(target) <= _TARGET_KEPT_CHARS:
                if len(_targets) >= _TARGETS_KEPT:
                    _targets.clear()
                _targets[target] = path, parsed, valid
        return cls(method, path, parsed, headers, body, valid, remote_address)

    def arg(self, name: str) -> str | None:
        """The first value of a query parameter (Go's ``Query().Get`` returns the first)."""
        values = self.query.get(name)
        return values[0] if values else None

    @property
    def legacy(self) -> bool:
        """Whether this request asked for the pre-1.0 envelope."""
        return wants_legacy_envelope(self.headers.get("accept"))


@attrs.frozen
class Response:
    """Status, extra headers and body; the connection adds Content-Length and Date."""

    status: int
    body: bytes = b""
    headers: tuple[tuple[bytes, bytes], ...] = ()

    # ------------------------------------------------------------ nsqd 1.x (V1) forms

    @classmethod
    def text(cls, body: bytes | str, status: int = 200) -> Response:
        """A handler's string result: the body verbatim (Go sniffs it as plain text)."""
        data = body.encode() if isinstance(body, str) else body
        return cls(status, data, ((b"Content-Type", TEXT_CONTENT_TYPE), V1_HEADER))

    @classmethod
    def empty(cls) -> Response:
        """A handler's nil result: 200 with no body."""
        return cls(200, b"", (V1_HEADER,))

    @classmethod
    def json(cls, value: object, status: int = 200) -> Response:
        """A handler's object result."""
        return cls(status, orjson.dumps(value), ((b"Content-Type", JSON_CONTENT_TYPE), V1_HEADER))

    @classmethod
    def error(cls, status: int, message: str) -> Response:
        """nsqd's V1 error: ``{"message":"<TEXT>"}`` with the error's status."""
        return cls.json({"message": message}, status)

    @classmethod
    def plain(cls, body: bytes | str, status: int = 200) -> Response:
        """/ping's PlainText decorator: no X-NSQ header."""
        data = body.encode() if isinstance(body, str) else body
        return cls(status, data, ((b"Content-Type", TEXT_CONTENT_TYPE),))

    # ------------------------------------------------------------ pre-1.0 envelope

    @classmethod
    def legacy_ok(cls, value: object) -> Response:
        """``{"status_code":200,"status_txt":"OK","data":...}``; strings stay bare."""
        if isinstance(value, str | bytes):
            data = value.encode() if isinstance(value, str) else value
            return cls(200, data, ((b"Content-Type", TEXT_CONTENT_TYPE),))
        envelope = {"status_code": 200, "status_txt": "OK", "data": value}
        return cls(200, orjson.dumps(envelope), ((b"Content-Type", JSON_CONTENT_TYPE),))

    @classmethod
    def legacy_error(cls, message: str) -> Response:
        """Every pre-1.0 error is a 500 whatever its own code."""
        envelope = {"status_code": 500, "status_txt": message, "data": None}
        return cls(500, orjson.dumps(envelope), ((b"Content-Type", JSON_CONTENT_TYPE),))


def wants_legacy_envelope(accept: str | None) -> bool:
    """True when Accept names ``application/vnd.nsq`` with a version other than 1.0."""
    if accept is None or "application/vnd.nsq" not in accept:
        return False
    normalized = accept.replace(" ", "")
    return "version=1.0" not in normalized


_BAD_ESCAPE: Final = re.compile(r"%(?![0-9A-Fa-f]{2})")


def go_query_valid(query: str) -> bool:
    """Whether Go's ``url.ParseQuery`` accepts ``query`` (no ``;``, escapes well formed)."""
    return ";" not in query and _BAD_ESCAPE.search(query) is None


def parse_bool(value: str | None, *, default: bool) -> bool | None:
    """nsqd's boolean query values: true/1, false/0; None for anything else."""
    if value is None:
        return default
    if value in ("true", "1"):
        return True
    if value in ("false", "0"):
        return False
    return None
