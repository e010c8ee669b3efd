"""The plain-request reader against h11: whatever it takes, h11 reads the same way."""

from __future__ import annotations

import h11
from hypothesis import given, settings
from hypothesis import strategies as st

from trionsq.http.simple_request import parse_simple_request

LIMIT = 64 * 1024

PLAIN_NAMES = [b"Content-Type", b"Accept", b"User-Agent", b"X-Trace", b"accept-encoding"]
header_names = st.one_of(
    st.sampled_from(PLAIN_NAMES),
    st.sampled_from([b"Host", b"Content-Length", b"Connection", b"Transfer-Encoding",
                     b"Expect", b"Upgrade", b"Bad Name", b"X:Y"]),
)  # fmt: skip
header_values = st.one_of(
    st.sampled_from([b"text/plain", b"*/*", b"curl/8", b" padded\t", b"", b"a\tb"]),
    st.sampled_from([b"keep-alive", b"close", b"chunked", b"100-continue", b"5", b"05",
                     b"-1", b"1 2", b"websocket", b"\x80", b"a\x7fb"]),
    st.binary(max_size=12),
)  # fmt: skip


@st.composite
def requests(draw: st.DrawFn) -> bytes:
    """Mostly plain requests (so the fast path is exercised), some anything but."""
    plain = draw(st.booleans())
    method = draw(st.sampled_from([b"GET", b"POST"] if plain else [b"PUT", b"HEAD", b"get"]))
    target = draw(st.sampled_from([b"/pub?topic=t", b"/ping", b"/stats?format=json&x=%41"]))
    if not plain and draw(st.booleans()):
        target = draw(st.sampled_from([b"*", b"http://h/pub", b"/a b", b"/\xff"]))
    version = b"HTTP/1.1" if plain else draw(st.sampled_from([b"HTTP/1.0", b"HTTP/1.1 "]))
    headers = draw(st.lists(st.tuples(header_names, header_values), max_size=4))
    if plain or draw(st.booleans()):
        headers.insert(draw(st.integers(0, len(headers))), (b"Host", b"localhost"))
    body = draw(st.binary(max_size=20))
    if draw(st.booleans()):
        headers.append((b"Content-Length", b"%d" % len(body)))
    head = b"%s %s %s\r\n" % (method, target, version)
    head += b"".join(name + b": " + value + b"\r\n" for name, value in headers)
    cut = draw(st.sampled_from([0, 0, 0, 1, len(body)]))  # the body may not be all here yet
    return head + b"\r\n" + body[: len(body) - cut] + draw(st.sampled_from([b"", b"GET /p"]))


def read_with_h11(data: bytes) -> tuple[str, str, dict[str, str], bytes, int] | None:
    conn = h11.Connection(h11.SERVER, max_incomplete_event_size=LIMIT)
    conn.receive_data(data)
    try:
        request = conn.next_event()
        if not isinstance(request, h11.Request):
            return None
        body = b""
        while True:
            event = conn.next_event()
            if isinstance(event, h11.Data):
                body += event.data
            elif isinstance(event, h11.EndOfMessage):
                break
            else:
                return None
    except h11.RemoteProtocolError:
        return None
    headers = {n.decode("latin-1"): v.decode("latin-1") for n, v in request.headers}
    left, _ = conn.trailing_data
    return (
        request.method.decode(),
        request.target.decode("utf-8", "surrogateescape"),
        headers,
        body,
        len(data) - len(left),
    )


@settings(max_examples=1000)
@given(requests())
def test_what_it_reads_h11_reads_the_same(data: bytes) -> None:
    simple = parse_simple_request(data, LIMIT)
    if simple is None:
        return  # h11 takes it, as before
    assert read_with_h11(data) == (
        simple.method,
        simple.target,
        simple.headers,
        simple.body,
        simple.size,
    )


def test_a_plain_publish_is_read_and_the_next_request_left() -> None:
    data = (
        b"POST /pub?topic=t HTTP/1.1\r\nHost: h\r\nContent-Length: 3\r\n"
        b"Connection: keep-alive\r\n\r\nabcGET /ping HTTP/1.1\r\n"
    )
    simple = parse_simple_request(data, LIMIT)
    assert simple is not None
    assert (simple.method, simple.target, simple.body) == ("POST", "/pub?topic=t", b"abc")
    assert simple.headers == {"host": "h", "content-length": "3", "connection": "keep-alive"}
    assert data[simple.size :] == b"GET /ping HTTP/1.1\r\n"


def test_what_it_leaves_to_h11() -> None:
    head = b"POST /pub?topic=t HTTP/1.1\r\nHost: h\r\n"
    for unusual in (
        head + b"Content-Length: 5\r\n\r\nab",  # body still coming
        head + b"Transfer-Encoding: chunked\r\n\r\n3\r\nabc\r\n0\r\n\r\n",
        head + b"Expect: 100-continue\r\nContent-Length: 1\r\n\r\nx",
        head + b"Connection: close\r\n\r\n",
        head + b"Content-Length: 1\r\nContent-Length: 1\r\n\r\nx",
        b"POST /pub HTTP/1.1\r\n\r\n",  # no Host
        b"PUT /pub HTTP/1.1\r\nHost: h\r\n\r\n",
        b"GET /pub HTTP/1.0\r\nHost: h\r\n\r\n",
        b"GET /pub HTTP/1.1\r\nHost: h\r\nX: \x80\r\n\r\n",
        b"GET /pub HTTP/1.1\r\nHost: h\r\n",  # head not complete
    ):
        assert parse_simple_request(unusual, LIMIT) is None, unusual
