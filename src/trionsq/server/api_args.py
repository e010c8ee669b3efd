"""What the broker's HTTP handlers share: how routes are kept, the refusal they raise,
and nsqd's checks of the query and of name arguments (server/nsqd_api.py, server/partition_api.py)."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import TypeAlias

from ..http.messages import Request, Response
from ..protocol.names import is_valid_name
from ..protocol.strconv import go_atoi

__all__ = ["HttpError", "Routes", "name_arg", "parsed_query", "partition_arg"]

Routes: TypeAlias = dict[str, dict[str, Callable[[Request], Awaitable[Response]]]]
"""A listener's handlers by path, then method (how the HTTP APIs keep them)."""


class HttpError(Exception):
    """A handler's refusal: status and nsqd's text (and headers to send with it, such
    as a 429's ``Retry-After``)."""

    def __init__(
        self, status: int, message: str, headers: tuple[tuple[bytes, bytes], ...] = ()
    ) -> None:
        super().__init__(message)
        self.status = status
        self.message = message
        self.headers = headers


def parsed_query(request: Request) -> Request:
    """The request, if Go's ``url.ParseQuery`` would accept its query (else 400)."""
    if not request.query_valid:
        raise HttpError(400, "INVALID_REQUEST")
    return request


def name_arg(request: Request, key: str, *, invalid: str | None) -> str:
    """A required topic or channel name, with nsqd's checks in nsqd's order:
    ``MISSING_ARG_<KEY>``, then ``invalid`` (None: the name is not validated)."""
    if key not in request.query:
        raise HttpError(400, f"MISSING_ARG_{key.upper()}")
    name = request.query[key][0]
    if invalid is not None and not is_valid_name(name.encode()):
        raise HttpError(400, invalid)
    return name


def partition_arg(request: Request) -> int | None:
    """Youzan's optional ``partition``: None for the default (absent, empty, -1), else
    the int, which may name no partition (negative ones never do). Not an int: 400
    with Go's strconv.Atoi text, as Youzan's GetTopicPartitionArgs answers."""
    raw = request.arg("partition")
    if not raw:
        return None
    value = go_atoi(raw.encode("utf-8", "surrogateescape"))
    if isinstance(value, str):
        raise HttpError(400, value)
    return None if value == -1 else value
