"""What the HTTP path keeps from one request to the next (issue 37) changes no answer.

Request heads, targets and response heads are read or encoded once per distinct
value and reused; each cache is bounded and starts over when full.
"""

from __future__ import annotations

import re
from urllib.parse import parse_qs

from hypothesis import given
from hypothesis import strategies as st

from trionsq.http import connection, messages, simple_request
from trionsq.http.connection import encode_response
from trionsq.http.messages import Request, Response, go_query_valid
from trionsq.http.simple_request import parse_simple_request

LIMIT = 64 * 1024


def publish(body: bytes, target: bytes = b"/pub?topic=t") -> bytes:
    head = b"POST %s HTTP/1.1\r\nHost: h\r\nContent-Length: %d\r\n\r\n" % (target, len(body))
    return head + body


def test_one_head_many_bodies_each_request_reads_its_own() -> None:
    first = parse_simple_request(publish(b"aaa") + b"GET /p", LIMIT)
    second = parse_simple_request(publish(b"bbb"), LIMIT)
    assert first is not None
    assert second is not None
    assert (first.body, second.body) == (b"aaa", b"bbb")
    assert first.size == second.size  # the request, without what followed it
    assert parse_simple_request(publish(b"ccc")[:-1], LIMIT) is None  # body not all here
    assert parse_simple_request(publish(b"ccc"), LIMIT) is not None


def test_a_head_that_is_not_plain_stays_so() -> None:
    data = b"POST /pub HTTP/1.1\r\nHost: h\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n"
    assert parse_simple_request(data, LIMIT) is None
    assert parse_simple_request(data, LIMIT) is None


def test_the_head_cache_is_bounded() -> None:
    for n in range(simple_request._HEADS_KEPT * 2 + 3):
        assert parse_simple_request(publish(b"x", b"/pub?topic=t%d" % n), LIMIT) is not None
        assert len(simple_request._heads) <= simple_request._HEADS_KEPT
    long_head = publish(b"y", b"/pub?topic=t&pad=" + b"p" * simple_request._HEAD_KEPT_BYTES)
    simple = parse_simple_request(long_head, LIMIT)
    assert simple is not None
    assert simple.body == b"y"
    assert all(len(head) <= simple_request._HEAD_KEPT_BYTES for head in simple_request._heads)


@given(st.text(alphabet="abc=&;%41?/", max_size=16))
def test_a_target_parses_the_same_each_time(query: str) -> None:
    target = "/pub?" + query
    for _ in range(2):
        request = Request.from_target("POST", target, {})
        path, _, rest = target.partition("?")
        assert request.path == path
        assert request.query == (parse_qs(rest, keep_blank_values=True) if rest else {})
        assert request.query_valid == go_query_valid(rest)


def test_the_target_cache_is_bounded() -> None:
    for n in range(messages._TARGETS_KEPT * 2 + 3):
        assert Request.from_target("GET", f"/stats?topic=t{n}", {}).arg("topic") == f"t{n}"
        assert len(messages._targets) <= messages._TARGETS_KEPT
    long_target = "/stats?topic=long&pad=" + "p" * messages._TARGET_KEPT_CHARS
    assert Request.from_target("GET", long_target, {}).arg("topic") == "long"
    assert long_target not in messages._targets


def spelled_out(response: Response, *, close: bool, head: bool) -> bytes:
    """The answer as encode_response wrote it before it kept response heads."""
    parts = [b"HTTP/1.1 %d %s\r\n" % (response.status, connection._reason(response.status))]
    parts.extend(name + b": " + value + b"\r\n" for name, value in response.headers)
    parts.append(
        b"Date: %s\r\nContent-Length: %d\r\n" % (connection._DATE.value(), len(response.body))
    )
    if close:
        parts.append(b"Connection: close\r\n")
    parts.append(b"\r\n")
    if not head:
        parts.append(response.body)
    return b"".join(parts)


def undated(answer: bytes) -> bytes:
    """The answer without its Date value (a second may turn between two encodings)."""
    return re.sub(rb"\r\nDate: [^\r]*\r\n", b"\r\nDate: -\r\n", answer, count=1)


@given(
    st.sampled_from([200, 404, 429, 500, 599]),
    st.binary(max_size=8),
    st.lists(st.tuples(st.sampled_from([b"A", b"Retry-After"]), st.binary(max_size=3)), max_size=2),
    st.booleans(),
    st.booleans(),
)
def test_response_heads_reused_encode_as_spelled_out(
    status: int, body: bytes, headers: list[tuple[bytes, bytes]], close: bool, head: bool
) -> None:
    response = Response(status, body, tuple(headers))
    for _ in range(2):
        encoded = encode_response(response, close=close, head=head)
        assert undated(encoded) == undated(spelled_out(response, close=close, head=head))
    assert len(connection._response_heads) <= connection._RESPONSE_HEADS_KEPT
