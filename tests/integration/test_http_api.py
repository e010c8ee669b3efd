"""nsqd's HTTP API over real sockets (spec http-api.md §1 and §2).

Every endpoint's answers (status, exact body, ``Content-Type`` and
``X-NSQ-Content-Type``), what publishes and admin calls do to TCP consumers, and the
connection loop: keep-alive, pipelining, body limits, malformed input, timeouts, TLS.
Normal requests go through httpx; requests whose exact bytes matter (bad escapes,
chunked bodies, lying Content-Length, pipelining, HTTP/1.0) through :class:`RawHttp`.
"""

from __future__ import annotations

import json
import logging
import socket
import ssl
import struct
import time
from pathlib import Path
from typing import TYPE_CHECKING, Final

import attrs
import httpx
import pytest
import trio
import trio.testing
import trustme

from trionsq import NsqdConfig, __version__
from trionsq.config import TlsRequired
from trionsq.protocol import IdentifyRequest, Pub, Rdy
from trionsq.version import NSQD_RELEASE

from .raw import bodies, next_message, publish, quiet, start

if TYPE_CHECKING:
    from collections.abc import AsyncIterator, Sequence

    from trionsq.nursery_tree import BoundAddresses
    from trionsq.testing import ProtocolClient

    from .raw import Clients

MAX_MSG: Final = 64
MAX_BODY: Final = 256
CONFIG: Final = NsqdConfig.loopback(
    max_msg_size=MAX_MSG, max_body_size=MAX_BODY, max_req_timeout=10.0
)
JSON_TYPE: Final = "application/json; charset=utf-8"
TEXT_TYPE: Final = "text/plain; charset=utf-8"
V1: Final = "nsq; version=1.0"
LEGACY_ACCEPT: Final = {"Accept": "application/vnd.nsq; version=0.3"}
GUARD: Final = 10.0
"""Longest wait for an answer or a close, unless a test says otherwise."""
UNBUFFERED: Final = IdentifyRequest(output_buffer_size=-1)
"""Consumers that get each message as the broker sends it (exact arrival times)."""


@pytest.fixture
def nsqd_config() -> NsqdConfig:
    """Small limits so the size checks need only small bodies."""
    return CONFIG


@pytest.fixture
async def http(nsqd: BoundAddresses) -> AsyncIterator[httpx.AsyncClient]:
    assert nsqd.http is not None
    async with httpx.AsyncClient(base_url=url(nsqd.http)) as client:
        yield client


def url(address: tuple[str, int], scheme: str = "http") -> str:
    return f"{scheme}://{address[0]}:{address[1]}"


# ---------------------------------------------------------------------- answers


@attrs.frozen
class Answer:
    """One HTTP answer, header names lower-cased."""

    status: int
    headers: dict[str, str]
    body: bytes
    reason: str = ""

    @classmethod
    def of(cls, response: httpx.Response) -> Answer:
        headers = {name.lower(): value for name, value in response.headers.items()}
        return cls(response.status_code, headers, response.content, response.reason_phrase)


def expect_error(answer: Answer, status: int, message: str) -> None:
    """nsqd 1.x's error: ``{"message":"<TEXT>"}`` as JSON, with the V1 header."""
    assert shape(answer) == v1_error(status, message)


def expect_text(answer: Answer, body: bytes = b"OK") -> None:
    """A handler's string result: verbatim, sniffed as text, with the V1 header."""
    assert (answer.status, answer.body) == (200, body)
    assert answer.headers["content-type"] == TEXT_TYPE
    assert answer.headers["x-nsq-content-type"] == V1


def expect_empty(answer: Answer) -> None:
    """A handler's nil result: 200, no body, no Content-Type, the V1 header."""
    assert (answer.status, answer.body) == (200, b"")
    assert "content-type" not in answer.headers
    assert answer.headers["x-nsq-content-type"] == V1


def expect_json(answer: Answer) -> None:
    """A handler's object result (parse ``answer.body`` at the call site)."""
    assert answer.status == 200, answer
    assert answer.headers["content-type"] == JSON_TYPE
    assert answer.headers["x-nsq-content-type"] == V1


def expect_plain(answer: Answer, body: bytes = b"OK") -> None:
    """/ping's PlainText: no X-NSQ header."""
    assert (answer.status, answer.body) == (200, body)
    assert answer.headers["content-type"] == TEXT_TYPE
    assert "x-nsq-content-type" not in answer.headers


def expect_legacy_error(answer: Answer, message: str) -> None:
    """The pre-1.0 envelope: every error is a 500, no V1 header."""
    assert answer.status == 500
    assert answer.body == b'{"status_code":500,"status_txt":"%s","data":null}' % message.encode()
    assert answer.headers["content-type"] == JSON_TYPE
    assert "x-nsq-content-type" not in answer.headers


# ---------------------------------------------------------------------- raw HTTP


class RawHttp:
    """HTTP/1.1 on a bare socket: exact request bytes out, answers parsed here."""

    def __init__(self, stream: trio.SocketStream) -> None:
        self.stream = stream
        self.buffer = b""

    @classmethod
    async def connect(cls, address: tuple[str, int] | None) -> RawHttp:
        assert address is not None
        return cls(await trio.open_tcp_stream(*address))

    async def send(self, data: bytes) -> None:
        await self.stream.send_all(data)

    async def _fill(self) -> bool:
        """Read more into the buffer; False at EOF (or a reset)."""
        try:
            data = await self.stream.receive_some(65536)
        except trio.BrokenResourceError:
            return False
        self.buffer += data
        return bool(data)

    async def answer(self, *, head: bool = False) -> Answer:
        """The next answer (its body is Content-Length long, none for HEAD)."""
        with trio.fail_after(GUARD):
            while b"\r\n\r\n" not in self.buffer:
                assert await self._fill(), f"closed before an answer: {self.buffer!r}"
            top, _, self.buffer = self.buffer.partition(b"\r\n\r\n")
            status_line, *lines = top.decode("latin-1").split("\r\n")
            version, status, reason = status_line.split(" ", 2)
            assert version == "HTTP/1.1", status_line
            headers: dict[str, str] = {}
            for line in lines:
                name, _, value = line.partition(":")
                headers[name.lower()] = value.strip()
            length = 0 if head else int(headers.get("content-length", "0"))
            while len(self.buffer) < length:
                assert await self._fill(), f"closed inside a body: {self.buffer!r}"
            body, self.buffer = self.buffer[:length], self.buffer[length:]
        return Answer(int(status), headers, body, reason)

    async def closed(self, guard: float = GUARD) -> float:
        """Wait for the server to close; returns when (trio time). Nothing else may come."""
        with trio.fail_after(guard):
            while await self._fill():
                pass
        assert self.buffer == b""
        return trio.current_time()

    async def aclose(self) -> None:
        await trio.aclose_forcefully(self.stream)


class RawClients:
    """Opens raw connections and closes them all when the test ends."""

    def __init__(self) -> None:
        self.opened: list[RawHttp] = []

    async def connect(self, address: tuple[str, int] | None) -> RawHttp:
        connection = await RawHttp.connect(address)
        self.opened.append(connection)
        return connection

    async def close_all(self) -> None:
        for connection in self.opened:
            await connection.aclose()


@pytest.fixture
async def raw() -> AsyncIterator[RawClients]:
    opened = RawClients()
    try:
        yield opened
    finally:
        await opened.close_all()


def request(
    method: str,
    target: str,
    body: bytes = b"",
    headers: Sequence[tuple[str, str]] = (),
    *,
    version: str = "HTTP/1.1",
    length: bool = True,
) -> bytes:
    """A request's bytes; Content-Length is added for a body or a POST/PUT unless not ``length``."""
    lines = [f"{method} {target} {version}", "Host: nsqd"]
    lines += [f"{name}: {value}" for name, value in headers]
    if length and (body or method in ("POST", "PUT")):
        lines.append(f"Content-Length: {len(body)}")
    return ("\r\n".join(lines) + "\r\n\r\n").encode() + body


async def ask(
    address: tuple[str, int] | None,
    method: str,
    target: str,
    body: bytes = b"",
    headers: Sequence[tuple[str, str]] = (),
) -> Answer:
    """One request on a fresh connection."""
    connection = await RawHttp.connect(address)
    try:
        await connection.send(request(method, target, body, headers))
        return await connection.answer()
    finally:
        await connection.aclose()


def chunked(*chunks: bytes) -> bytes:
    return b"".join(b"%x\r\n%s\r\n" % (len(chunk), chunk) for chunk in chunks) + b"0\r\n\r\n"


def mpub_body(*messages: bytes) -> bytes:
    """Binary /mpub: ``[int32 count]([int32 size][bytes])*``."""
    parts = (struct.pack(">i", len(message)) + message for message in messages)
    return struct.pack(">i", len(messages)) + b"".join(parts)


Shape = tuple[int, bytes, str | None, str | None]


def shape(answer: Answer) -> Shape:
    """Status, body and the two content-type headers: what a table of cases compares."""
    headers = answer.headers
    return (
        answer.status,
        answer.body,
        headers.get("content-type"),
        headers.get("x-nsq-content-type"),
    )


def v1_error(status: int, message: str) -> Shape:
    return (status, b'{"message":"%s"}' % message.encode(), JSON_TYPE, V1)


async def consumer(
    clients: Clients, nsqd: BoundAddresses, topic: str, channel: str = "c"
) -> ProtocolClient:
    """A TCP consumer, identified unbuffered, subscribed with RDY 10."""
    return await clients.subscribe(nsqd.tcp, topic, channel, rdy=10, identify=UNBUFFERED)


async def received(client: ProtocolClient, count: int) -> list[bytes]:
    return [(await next_message(client)).body for _ in range(count)]


# ---------------------------------------------------------------------- /ping, /info


async def test_ping_is_plain_text(http: httpx.AsyncClient) -> None:
    expect_plain(Answer.of(await http.get("/ping")))
    expect_plain(Answer.of(await http.get("/ping", headers=LEGACY_ACCEPT)))  # never negotiated


async def test_info_reports_the_bound_ports_and_options(
    nsqd: BoundAddresses, http: httpx.AsyncClient
) -> None:
    before = int(time.time())
    for headers in ({}, {"Accept": "application/vnd.nsq; version=1.0"}):
        answer = Answer.of(await http.get("/info", headers=headers))
        expect_json(answer)
        info = json.loads(answer.body)
        assert list(info) == [
            "version",
            "broadcast_address",
            "hostname",
            "http_port",
            "tcp_port",
            "start_time",
            "max_heartbeat_interval",
            "max_output_buffer_size",
            "max_output_buffer_timeout",
            "max_deflate_level",
            "topology_zone",
            "topology_region",
            "trionsq_version",
        ]
        assert nsqd.http is not None
        assert (info["tcp_port"], info["http_port"]) == (nsqd.tcp[1], nsqd.http[1])
        assert (info["version"], info["trionsq_version"]) == (NSQD_RELEASE, __version__)
        assert info["hostname"] == socket.gethostname()
        assert info["broadcast_address"] == CONFIG.broadcast_address
        assert isinstance(info["start_time"], int)
        assert before - 60 <= info["start_time"] <= before + 1
        assert info["max_heartbeat_interval"] == 60_000_000_000  # durations in ns
        assert info["max_output_buffer_timeout"] == 30_000_000_000
        assert info["max_output_buffer_size"] == 65536
        assert info["max_deflate_level"] == 6
        assert (info["topology_zone"], info["topology_region"]) == ("", "")


# ---------------------------------------------------------------------- envelopes


async def test_legacy_envelope_only_when_asked_and_only_on_its_endpoints(
    nsqd: BoundAddresses, http: httpx.AsyncClient
) -> None:
    info = Answer.of(await http.get("/info", headers=LEGACY_ACCEPT))
    assert info.status == 200
    assert info.headers["content-type"] == JSON_TYPE
    assert "x-nsq-content-type" not in info.headers
    envelope = json.loads(info.body)
    assert list(envelope) == ["status_code", "status_txt", "data"]
    assert envelope["status_code"] == 200
    assert envelope["status_txt"] == "OK"
    assert envelope["data"]["tcp_port"] == nsqd.tcp[1]
    # a string result stays bare
    pub = Answer.of(await http.post("/pub?topic=t", content=b"m", headers=LEGACY_ACCEPT))
    assert (pub.status, pub.body, pub.headers["content-type"]) == (200, b"OK", TEXT_TYPE)
    assert "x-nsq-content-type" not in pub.headers
    mpub = Answer.of(await http.post("/mpub?topic=t", content=b"a\nb", headers=LEGACY_ACCEPT))
    assert (mpub.status, mpub.body) == (200, b"OK")
    assert "x-nsq-content-type" not in mpub.headers
    # every error is a 500 whatever its own status
    expect_legacy_error(
        Answer.of(await http.post("/pub", content=b"m", headers=LEGACY_ACCEPT)),
        "MISSING_ARG_TOPIC",
    )
    expect_legacy_error(
        Answer.of(await http.post("/pub?topic=t", content=b"", headers=LEGACY_ACCEPT)),
        "MSG_EMPTY",
    )
    expect_legacy_error(
        Answer.of(await http.post("/mpub?topic=t&binary=true", content=b"", headers=LEGACY_ACCEPT)),
        "BAD_BODY",
    )
    # also when refused on Content-Length alone, before the body is read
    too_big = b"x" * (MAX_MSG + 1)
    expect_legacy_error(
        Answer.of(await http.post("/pub?topic=t", content=too_big, headers=LEGACY_ACCEPT)),
        "MSG_TOO_BIG",
    )
    # endpoints nsqd 0.3 answered in 1.x form, and router errors, stay V1
    expect_error(
        Answer.of(await http.post("/topic/create", headers=LEGACY_ACCEPT)),
        400,
        "MISSING_ARG_TOPIC",
    )
    expect_error(Answer.of(await http.get("/nope", headers=LEGACY_ACCEPT)), 404, "NOT_FOUND")
    # the 1.0 Accept values clients send get 1.x answers (gnsq omits the semicolon)
    for accept in ("application/vnd.nsq; version=1.0", "application/vnd.nsq version=1.0"):
        expect_error(
            Answer.of(await http.post("/pub", content=b"m", headers={"Accept": accept})),
            400,
            "MISSING_ARG_TOPIC",
        )


async def test_router_errors_are_v1_json(nsqd: BoundAddresses) -> None:
    not_found = [
        ("GET", "/"),
        ("GET", "/nope"),
        ("POST", "/PUB?topic=t"),
        ("GET", "/config"),
        ("GET", "/config/"),
        ("GET", "/config/log_level/x"),
        ("POST", "/topic"),
        ("POST", "/channel/create/x?topic=t&channel=c"),
    ]
    not_allowed = [
        ("POST", "/ping"),
        ("PUT", "/info"),
        ("GET", "/pub?topic=t"),
        ("PUT", "/mpub?topic=t"),
        ("POST", "/stats"),
        ("GET", "/topic/create?topic=t"),
        ("DELETE", "/topic/delete?topic=t"),
        ("GET", "/channel/pause?topic=t&channel=c"),
        ("POST", "/config/log_level"),
        ("DELETE", "/config/log_level"),
    ]
    for method, target in not_found:
        expect_error(await ask(nsqd.http, method, target), 404, "NOT_FOUND")
    for method, target in not_allowed:
        expect_error(await ask(nsqd.http, method, target), 405, "METHOD_NOT_ALLOWED")
    assert nsqd.broker.topics == {}  # none of them did anything


# ---------------------------------------------------------------------- /pub


async def test_pub_delivers_the_exact_body_to_a_tcp_consumer(
    clients: Clients, nsqd: BoundAddresses, http: httpx.AsyncClient
) -> None:
    reader = await consumer(clients, nsqd, "pub.t-1_x")
    body = bytes(range(MAX_MSG))  # NUL, newlines, every byte; exactly the limit
    expect_text(Answer.of(await http.post("/pub", params={"topic": "pub.t-1_x"}, content=body)))
    expect_text(Answer.of(await http.post("/pub?topic=pub%2Et-1_x", content=b"escaped name")))
    expect_text(Answer.of(await http.post("/pub?topic=pub.t-1_x&topic=other", content=b"first")))
    assert await received(reader, 3) == [body, b"escaped name", b"first"]
    assert "other" not in nsqd.broker.topics  # the first topic value counts, as Go's Get


async def test_pub_errors_in_nsqd_check_order(clients: Clients, nsqd: BoundAddresses) -> None:
    """Body size, then empty body, then the query, the topic, then defer."""
    reader = await consumer(clients, nsqd, "t")
    cases = [
        ("/pub?topic=t", b"", 400, "MSG_EMPTY"),
        ("/pub", b"", 400, "MSG_EMPTY"),  # the body is checked before the topic
        ("/pub?x=%zz", b"", 400, "MSG_EMPTY"),
        ("/pub", b"m", 400, "MISSING_ARG_TOPIC"),
        ("/pub?channel=t", b"m", 400, "MISSING_ARG_TOPIC"),
        ("/pub?topic=", b"m", 400, "INVALID_TOPIC"),
        ("/pub?topic", b"m", 400, "INVALID_TOPIC"),
        ("/pub?topic=bad!&defer=-1", b"m", 400, "INVALID_TOPIC"),  # topic before defer
        ("/pub?topic=" + "a" * 65, b"m", 400, "INVALID_TOPIC"),
        ("/pub?topic=t%23ephemeralx", b"m", 400, "INVALID_TOPIC"),
        ("/pub?topic=t&x=%zz", b"m", 400, "INVALID_REQUEST"),  # Go's ParseQuery fails
        ("/pub?topic=t&x=%4", b"m", 400, "INVALID_REQUEST"),
        ("/pub?topic=t;x=1", b"m", 400, "INVALID_REQUEST"),
        ("/pub?topic=bad!&x=%zz", b"m", 400, "INVALID_REQUEST"),  # query before topic
        ("/pub?topic=t&defer=", b"m", 400, "INVALID_DEFER"),
        ("/pub?topic=t&defer=abc", b"m", 400, "INVALID_DEFER"),
        ("/pub?topic=t&defer=1.5", b"m", 400, "INVALID_DEFER"),
        ("/pub?topic=t&defer=1e3", b"m", 400, "INVALID_DEFER"),
        ("/pub?topic=t&defer=-1", b"m", 400, "INVALID_DEFER"),
        ("/pub?topic=t&defer=10001", b"m", 400, "INVALID_DEFER"),  # > max-req-timeout 10 s
        ("/pub?topic=t&defer=99999999999999999999", b"m", 400, "INVALID_DEFER"),  # > int64
        ("/pub?topic=t", b"x" * (MAX_MSG + 1), 413, "MSG_TOO_BIG"),
    ]
    wrong = []
    for target, body, status, message in cases:
        answer = await ask(nsqd.http, "POST", target, body)
        if shape(answer) != v1_error(status, message):
            wrong.append((target, shape(answer)))
    assert wrong == []
    await publish(await clients.connect(nsqd.tcp), Pub("t", b"marker"))
    assert (await next_message(reader)).body == b"marker"  # no failed /pub got through


async def test_pub_creates_its_topic_once_the_body_is_accepted(nsqd: BoundAddresses) -> None:
    """nsqd's getTopicFromQuery creates the topic before ``defer`` is checked."""
    await ask(nsqd.http, "POST", "/pub?topic=empty", b"")
    assert "empty" not in nsqd.broker.topics  # MSG_EMPTY: refused before the topic
    answer = await ask(nsqd.http, "POST", "/pub?topic=deferred&defer=-1", b"m")
    expect_error(answer, 400, "INVALID_DEFER")
    assert "deferred" in nsqd.broker.topics


async def test_pub_defer_holds_the_message_until_its_time(
    clients: Clients,
    nsqd: BoundAddresses,
    http: httpx.AsyncClient,
    autojump_clock: trio.testing.MockClock,
) -> None:
    autojump_clock.autojump_threshold = 0.1  # real sockets: never jump while bytes are in flight
    reader = await consumer(clients, nsqd, "d")
    for target, body in [
        ("/pub?topic=d&defer=3000", b"later"),
        ("/pub?topic=d&defer=10000", b"at the limit"),  # max-req-timeout itself is allowed
        ("/pub?topic=d&defer=0", b"now"),
        ("/pub?topic=d&defer=%2B1500", b"plus sign"),  # Go's ParseInt takes "+1500"
        ("/pub?topic=d", b"plain"),
    ]:
        expect_text(Answer.of(await http.post(target, content=body)))
    t0 = trio.current_time()
    arrivals = []
    for _ in range(5):
        message = await next_message(reader)
        arrivals.append((message.body, round(trio.current_time() - t0, 1)))
        assert message.attempts == 1
    assert arrivals == [
        (b"now", 0.0),
        (b"plain", 0.0),
        (b"plus sign", 1.5),
        (b"later", 3.0),
        (b"at the limit", 10.0),
    ]


async def test_pub_size_limits_by_content_length_and_by_chunked_body(
    raw: RawClients, clients: Clients, nsqd: BoundAddresses
) -> None:
    reader = await consumer(clients, nsqd, "big")
    # a Content-Length over the limit is refused before any body byte is sent
    refused = await raw.connect(nsqd.http)
    await refused.send(
        b"POST /pub HTTP/1.1\r\nHost: nsqd\r\nContent-Length: %d\r\n\r\n" % (10 * MAX_MSG)
    )
    answer = await refused.answer()
    expect_error(answer, 413, "MSG_TOO_BIG")  # before the topic is even looked at
    assert answer.headers["connection"] == "close"
    await refused.closed()  # the unread body makes the connection unusable
    # chunked: no Content-Length, so the body is read up to the limit + 1
    head = [("Transfer-Encoding", "chunked")]
    too_big = await raw.connect(nsqd.http)
    await too_big.send(
        request("POST", "/pub?topic=big", headers=head, length=False)
        + chunked(b"x" * 40, b"y" * 40)
    )
    expect_error(await too_big.answer(), 413, "MSG_TOO_BIG")
    await too_big.closed()  # the rest of the body was not read
    one_over = await raw.connect(nsqd.http)
    await one_over.send(
        request("POST", "/pub?topic=big", headers=head, length=False)
        + chunked(b"x" * 40, b"y" * (MAX_MSG - 40 + 1))
    )
    expect_error(await one_over.answer(), 413, "MSG_TOO_BIG")
    await one_over.send(request("GET", "/ping"))  # read whole: the connection goes on
    expect_plain(await one_over.answer())
    await one_over.aclose()
    fits = await raw.connect(nsqd.http)
    body = b"x" * 40 + b"y" * (MAX_MSG - 40)
    await fits.send(
        request("POST", "/pub?topic=big", headers=head, length=False)
        + chunked(body[:40], body[40:])
    )
    expect_text(await fits.answer())
    await fits.send(request("POST", "/pub?topic=big", headers=head, length=False) + chunked(b""))
    expect_error(await fits.answer(), 400, "MSG_EMPTY")  # and keep-alive after a whole body
    await fits.aclose()
    assert await received(reader, 1) == [body]


# ---------------------------------------------------------------------- /mpub


async def test_mpub_text_mode_one_message_per_line_in_order(
    clients: Clients, nsqd: BoundAddresses, http: httpx.AsyncClient
) -> None:
    reader = await consumer(clients, nsqd, "m")
    for params, body in [
        ("", b"one\n\ntwo\r\n\n\nthree"),  # empty lines skipped, \r kept
        ("", b"four\n"),  # a trailing newline ends the last line
        ("", b""),  # no lines: an empty batch, still OK
        ("", b"\n\n"),
        ("&binary=false", b"five\nsix"),
        ("&binary=0", b"x" * MAX_MSG),  # a line may be max-msg-size long
    ]:
        expect_text(Answer.of(await http.post(f"/mpub?topic=m{params}", content=body)))
    expect_text(Answer.of(await http.post("/pub?topic=m", content=b"end")))
    expected = [b"one", b"two\r", b"three", b"four", b"five", b"six", b"x" * MAX_MSG, b"end"]
    assert await received(reader, 8) == expected


async def test_mpub_binary_mode_keeps_newlines_and_order(
    clients: Clients, nsqd: BoundAddresses, http: httpx.AsyncClient
) -> None:
    reader = await consumer(clients, nsqd, "b")
    for binary, body in [
        ("true", mpub_body(b"a\nb", b"\r\n", b"c" * MAX_MSG)),
        ("1", mpub_body(b"d")),
        ("yes", mpub_body(b"e\n")),  # a value that is not a boolean counts as true
        ("", mpub_body(b"f")),
        ("true", mpub_body(b"g") + b"ignored trailing bytes"),
    ]:
        answer = await http.post(f"/mpub?topic=b&binary={binary}", content=body)
        expect_text(Answer.of(answer))
    expected = [b"a\nb", b"\r\n", b"c" * MAX_MSG, b"d", b"e\n", b"f", b"g"]
    assert await received(reader, len(expected)) == expected


async def test_mpub_errors(clients: Clients, nsqd: BoundAddresses) -> None:
    """Binary errors are TCP MPUB's codes minus ``E_``; a refused batch publishes nothing."""
    reader = await consumer(clients, nsqd, "m")
    size = struct.Struct(">i").pack
    binary = "/mpub?topic=m&binary=true"
    cases = [
        ("/mpub", b"a", 400, "MISSING_ARG_TOPIC"),
        ("/mpub?topic=bad!", b"a", 400, "INVALID_TOPIC"),
        ("/mpub?topic=bad!&binary=true", b"", 400, "INVALID_TOPIC"),  # topic before body
        ("/mpub?topic=m&x=%zz", b"a", 400, "INVALID_REQUEST"),
        (binary, b"", 413, "BAD_BODY"),
        (binary, b"\x00\x00\x01", 413, "BAD_BODY"),
        (binary, size(0), 413, "BAD_BODY"),
        (binary, size(-1), 413, "BAD_BODY"),
        # more messages than max-body-size could hold (4 + 5 bytes each at least)
        (binary, size((MAX_BODY - 4) // 5 + 1) + mpub_body(b"a")[4:], 413, "BAD_BODY"),
        (binary, size(2) + mpub_body(b"a")[4:], 413, "BAD_MESSAGE"),  # size 2 missing
        (binary, size(2) + mpub_body(b"a")[4:] + b"\x00\x00", 413, "BAD_MESSAGE"),
        (binary, size(1) + size(0), 413, "BAD_MESSAGE"),
        (binary, size(1) + size(-5) + b"x", 413, "BAD_MESSAGE"),
        (binary, size(1) + size(MAX_MSG + 1) + b"x" * (MAX_MSG + 1), 413, "BAD_MESSAGE"),
        (binary, size(1) + size(5) + b"abc", 413, "BAD_MESSAGE"),  # body shorter than said
        ("/mpub?topic=m", b"ok\n" + b"x" * (MAX_MSG + 1) + b"\nok", 413, "MSG_TOO_BIG"),
        ("/mpub?topic=m", b"ok\n" * (MAX_BODY // 3 + 1), 413, "BODY_TOO_BIG"),
    ]
    wrong = []
    for target, body, status, message in cases:
        answer = await ask(nsqd.http, "POST", target, body)
        if shape(answer) != v1_error(status, message):
            wrong.append((target, body[:12], shape(answer)))
    assert wrong == []
    await publish(await clients.connect(nsqd.tcp), Pub("m", b"marker"))
    assert (await next_message(reader)).body == b"marker"  # all or nothing


async def test_mpub_body_limits_by_content_length_and_by_chunked_body(
    raw: RawClients, clients: Clients, nsqd: BoundAddresses
) -> None:
    reader = await consumer(clients, nsqd, "m")
    refused = await raw.connect(nsqd.http)
    await refused.send(  # no topic either: Content-Length is checked first
        b"POST /mpub HTTP/1.1\r\nHost: nsqd\r\nContent-Length: %d\r\n\r\n" % (MAX_BODY + 1)
    )
    answer = await refused.answer()
    expect_error(answer, 413, "BODY_TOO_BIG")
    assert answer.headers["connection"] == "close"
    await refused.closed()
    head = [("Transfer-Encoding", "chunked")]
    for params in ("", "&binary=true"):
        too_big = await raw.connect(nsqd.http)
        await too_big.send(
            request("POST", f"/mpub?topic=m{params}", headers=head, length=False)
            + chunked(b"a\n" * 100, b"b\n" * 29)  # 258 bytes
        )
        expect_error(await too_big.answer(), 413, "BODY_TOO_BIG")
        await too_big.closed()
    fits = await raw.connect(nsqd.http)
    await fits.send(
        request("POST", "/mpub?topic=m", headers=head, length=False)
        + chunked(b"fir", b"st\nsec", b"ond\n")
    )
    expect_text(await fits.answer())
    await fits.aclose()
    assert await received(reader, 2) == [b"first", b"second"]


async def test_mpub_creates_its_topic_before_reading_the_body(nsqd: BoundAddresses) -> None:
    expect_error(await ask(nsqd.http, "POST", "/mpub?topic=made&binary=1"), 413, "BAD_BODY")
    expect_text(await ask(nsqd.http, "POST", "/mpub?topic=also"))  # an empty batch
    assert set(nsqd.broker.topics) == {"made", "also"}


# ---------------------------------------------------------------------- admin


ADMIN_ARG_ERRORS: Final = {
    "/topic/create": [
        ("", 400, "MISSING_ARG_TOPIC"),
        ("topic=", 400, "INVALID_TOPIC"),
        ("topic=bad!", 400, "INVALID_TOPIC"),
    ],
    "/topic/delete": [
        ("", 400, "MISSING_ARG_TOPIC"),
        ("channel=t", 400, "MISSING_ARG_TOPIC"),
        ("topic=bad!", 404, "TOPIC_NOT_FOUND"),  # the name is not validated
        ("topic=missing", 404, "TOPIC_NOT_FOUND"),
    ],
    "/topic/empty": [
        ("", 400, "MISSING_ARG_TOPIC"),
        ("topic=bad!", 400, "INVALID_TOPIC"),
        ("topic=missing", 404, "TOPIC_NOT_FOUND"),
    ],
    "/topic/pause": [
        ("", 400, "MISSING_ARG_TOPIC"),
        ("topic=bad!", 404, "TOPIC_NOT_FOUND"),
        ("topic=missing", 404, "TOPIC_NOT_FOUND"),
    ],
    "/topic/unpause": [
        ("", 400, "MISSING_ARG_TOPIC"),
        ("topic=bad!", 404, "TOPIC_NOT_FOUND"),
        ("topic=missing", 404, "TOPIC_NOT_FOUND"),
    ],
}
CHANNEL_ARG_ERRORS: Final = [
    ("", 400, "MISSING_ARG_TOPIC"),
    ("channel=c", 400, "MISSING_ARG_TOPIC"),
    ("topic=bad!&channel=c", 400, "INVALID_ARG_TOPIC"),
    ("topic=t", 400, "MISSING_ARG_CHANNEL"),
    ("topic=t&channel=", 400, "INVALID_ARG_CHANNEL"),
    ("topic=t&channel=bad!", 400, "INVALID_ARG_CHANNEL"),
    ("topic=missing&channel=bad!", 400, "INVALID_ARG_CHANNEL"),  # arguments before lookup
    ("topic=missing&channel=c", 404, "TOPIC_NOT_FOUND"),
]
CHANNEL_ENDPOINTS: Final = (
    "/channel/create",
    "/channel/delete",
    "/channel/empty",
    "/channel/pause",
    "/channel/unpause",
)


async def test_admin_argument_errors(nsqd: BoundAddresses, http: httpx.AsyncClient) -> None:
    expect_empty(Answer.of(await http.post("/topic/create?topic=t")))
    expect_empty(Answer.of(await http.post("/channel/create?topic=t&channel=c")))
    cases = [
        (path, query, status, message)
        for path, errors in ADMIN_ARG_ERRORS.items()
        for query, status, message in errors
    ]
    for path in CHANNEL_ENDPOINTS:
        cases += [(path, query, status, message) for query, status, message in CHANNEL_ARG_ERRORS]
        if path != "/channel/create":
            cases.append((path, "topic=t&channel=missing", 404, "CHANNEL_NOT_FOUND"))
    for path in (*ADMIN_ARG_ERRORS, *CHANNEL_ENDPOINTS):  # Go's ParseQuery fails first
        cases.append((path, "topic=t&channel=c&x=%zz", 400, "INVALID_REQUEST"))
    wrong = []
    for path, query, status, message in cases:
        answer = await ask(nsqd.http, "POST", f"{path}?{query}" if query else path)
        if shape(answer) != v1_error(status, message):
            wrong.append((path, query, shape(answer)))
    assert wrong == []
    assert list(nsqd.broker.topics) == ["t"]  # nothing created, nothing deleted
    assert [c.name for c in nsqd.broker.find_channel("t", "c")] == ["c"]
    assert nsqd.broker.find_channel("t", "missing") == []


async def test_admin_success_answers_are_empty_and_idempotent_where_nsqd_is(
    nsqd: BoundAddresses, http: httpx.AsyncClient
) -> None:
    broker = nsqd.broker
    steps = [
        "/topic/create?topic=a",
        "/topic/create?topic=a",  # idempotent
        "/topic/create?topic=a.b-c_d%23ephemeral",
        "/channel/create?topic=a&channel=c",
        "/channel/create?topic=a&channel=c",  # idempotent
        "/channel/create?topic=a&channel=e%23ephemeral",
        "/topic/pause?topic=a",
        "/topic/pause?topic=a",
        "/channel/pause?topic=a&channel=c",
        "/channel/empty?topic=a&channel=c",
        "/topic/empty?topic=a",
    ]
    for target in steps:
        expect_empty(Answer.of(await http.post(target, content=b"a body is ignored")))
    assert set(broker.topics) == {"a", "a.b-c_d#ephemeral"}
    assert broker.topics["a"].statistics().paused
    (channel,) = broker.find_channel("a", "c")
    assert channel.paused
    assert broker.find_channel("a", "e#ephemeral") != []
    for target in ["/topic/unpause?topic=a", "/channel/unpause?topic=a&channel=c"]:
        expect_empty(Answer.of(await http.post(target)))
    assert not broker.topics["a"].statistics().paused
    assert not channel.paused
    expect_empty(Answer.of(await http.post("/channel/delete?topic=a&channel=c")))
    assert broker.find_channel("a", "c") == []
    expect_error(
        Answer.of(await http.post("/channel/delete?topic=a&channel=c")), 404, "CHANNEL_NOT_FOUND"
    )
    expect_empty(Answer.of(await http.post("/topic/delete?topic=a")))
    expect_error(Answer.of(await http.post("/topic/delete?topic=a")), 404, "TOPIC_NOT_FOUND")
    assert set(broker.topics) == {"a.b-c_d#ephemeral"}


async def test_channel_create_makes_a_channel_that_keeps_later_publishes(
    clients: Clients,
    nsqd: BoundAddresses,
    http: httpx.AsyncClient,
    autojump_clock: trio.testing.MockClock,
) -> None:
    autojump_clock.autojump_threshold = 0.1
    expect_empty(Answer.of(await http.post("/topic/create?topic=t")))
    expect_empty(Answer.of(await http.post("/channel/create?topic=t&channel=made")))
    expect_text(Answer.of(await http.post("/mpub?topic=t", content=b"one\ntwo")))
    latecomer = await consumer(clients, nsqd, "t", "late")  # a channel made after them
    assert bodies(await quiet(latecomer, 2)) == []
    made = await consumer(clients, nsqd, "t", "made")
    assert await received(made, 2) == [b"one", b"two"]


async def test_topic_pause_holds_delivery_until_unpause(
    clients: Clients,
    nsqd: BoundAddresses,
    http: httpx.AsyncClient,
    autojump_clock: trio.testing.MockClock,
) -> None:
    autojump_clock.autojump_threshold = 0.1
    readers = [await consumer(clients, nsqd, "p", name) for name in ("one", "two")]
    expect_empty(Answer.of(await http.post("/topic/pause?topic=p")))
    expect_text(Answer.of(await http.post("/pub?topic=p", content=b"held")))  # still accepted
    for reader in readers:
        assert bodies(await quiet(reader, 5)) == []
    expect_empty(Answer.of(await http.post("/topic/unpause?topic=p")))
    for reader in readers:
        assert await received(reader, 1) == [b"held"]


async def test_channel_pause_holds_only_that_channel(
    clients: Clients,
    nsqd: BoundAddresses,
    http: httpx.AsyncClient,
    autojump_clock: trio.testing.MockClock,
) -> None:
    autojump_clock.autojump_threshold = 0.1
    paused = await consumer(clients, nsqd, "p", "paused")
    running = await consumer(clients, nsqd, "p", "running")
    expect_empty(Answer.of(await http.post("/channel/pause?topic=p&channel=paused")))
    expect_text(Answer.of(await http.post("/mpub?topic=p", content=b"a\nb")))
    assert await received(running, 2) == [b"a", b"b"]
    assert bodies(await quiet(paused, 5)) == []
    expect_empty(Answer.of(await http.post("/channel/unpause?topic=p&channel=paused")))
    assert await received(paused, 2) == [b"a", b"b"]


async def test_topic_and_channel_empty_drop_queued_messages(
    clients: Clients,
    nsqd: BoundAddresses,
    http: httpx.AsyncClient,
    autojump_clock: trio.testing.MockClock,
) -> None:
    autojump_clock.autojump_threshold = 0.1
    expect_text(Answer.of(await http.post("/mpub?topic=e", content=b"old\nolder")))
    expect_empty(Answer.of(await http.post("/topic/empty?topic=e")))  # no channel held them
    reader = await clients.subscribe(nsqd.tcp, "e", "c", identify=UNBUFFERED)  # RDY 0
    expect_text(Answer.of(await http.post("/mpub?topic=e", content=b"queued\nalso")))
    expect_empty(Answer.of(await http.post("/channel/empty?topic=e&channel=c")))
    await reader.send(Rdy(10))
    assert bodies(await quiet(reader, 2)) == []
    expect_text(Answer.of(await http.post("/pub?topic=e", content=b"new")))
    assert await received(reader, 1) == [b"new"]


async def test_delete_closes_subscribed_consumers(
    clients: Clients,
    nsqd: BoundAddresses,
    http: httpx.AsyncClient,
    autojump_clock: trio.testing.MockClock,
) -> None:
    autojump_clock.autojump_threshold = 0.1
    doomed = await consumer(clients, nsqd, "d", "c")
    other = await consumer(clients, nsqd, "d", "other")
    expect_text(Answer.of(await http.post("/pub?topic=d", content=b"m")))
    assert await received(doomed, 1) == [b"m"]
    assert await received(other, 1) == [b"m"]
    expect_empty(Answer.of(await http.post("/channel/delete?topic=d&channel=c")))
    await doomed.wait_closed()
    assert bodies(await quiet(other, 1)) == []  # the other channel's consumer stays
    expect_empty(Answer.of(await http.post("/topic/delete?topic=d")))
    await other.wait_closed()
    assert "d" not in nsqd.broker.topics


# ---------------------------------------------------------------------- /config/:opt


async def test_config_get_reports_options_by_cfg_name(
    nsqd: BoundAddresses, http: httpx.AsyncClient
) -> None:
    expected = {
        "msg_timeout": 60_000_000_000,  # durations in ns
        "max_req_timeout": 10_000_000_000,
        "max_msg_size": MAX_MSG,
        "max_body_size": MAX_BODY,
        "mem_queue_size": 10_000,
        "tls_required": 0,
        "log_level": 2,  # nsqd's lg.INFO
        "nsqlookupd_tcp_addresses": [],
        "id": CONFIG.node_id,
        "tcp_address": "127.0.0.1:0",
        "deflate": True,
    }
    for name, value in expected.items():
        answer = Answer.of(await http.get(f"/config/{name}"))
        expect_json(answer)
        assert (name, json.loads(answer.body)) == (name, value)
    for name in ("nope", "msg-timeout", "MSG_TIMEOUT", "node_id", "lookupd_tcp_addresses"):
        expect_error(Answer.of(await http.get(f"/config/{name}")), 400, "INVALID_OPTION")


async def test_config_put_changes_log_level_and_lookupd_addresses(
    nsqd: BoundAddresses, http: httpx.AsyncClient
) -> None:
    logger = logging.getLogger("trionsq")
    level = logger.level
    try:
        answer = Answer.of(await http.put("/config/log_level", content=b"DEBUG"))
        expect_json(answer)
        assert answer.body == b"1"
        assert logger.level == logging.DEBUG
        assert (await http.get("/config/log_level")).content == b"1"
        expect_error(
            Answer.of(await http.put("/config/log_level", content=b"loud")), 400, "INVALID_VALUE"
        )
        answer = Answer.of(await http.put("/config/log_level", content=b"warn"))
        assert answer.body == b"3"
    finally:
        logger.setLevel(level)
    addresses = b'["127.0.0.1:4160","lookupd:4160"]'
    answer = Answer.of(await http.put("/config/nsqlookupd_tcp_addresses", content=addresses))
    expect_json(answer)
    assert answer.body == addresses
    assert (await http.get("/config/nsqlookupd_tcp_addresses")).content == addresses
    for bad in (b"127.0.0.1:4160", b'"127.0.0.1:4160"', b"[1]", b'{"a":1}'):
        expect_error(
            Answer.of(await http.put("/config/nsqlookupd_tcp_addresses", content=bad)),
            400,
            "INVALID_VALUE",
        )
    assert (await http.get("/config/nsqlookupd_tcp_addresses")).content == addresses
    # the body is checked before the option's name
    for name in ("log_level", "nsqlookupd_tcp_addresses", "nope"):
        expect_error(
            Answer.of(await http.put(f"/config/{name}", content=b"")), 413, "INVALID_VALUE"
        )
        too_big = b"[" + b" " * MAX_MSG + b"]"
        expect_error(
            Answer.of(await http.put(f"/config/{name}", content=too_big)), 413, "INVALID_VALUE"
        )
    for name in ("msg_timeout", "nope"):  # only the two runtime options can change
        expect_error(
            Answer.of(await http.put(f"/config/{name}", content=b"1")), 400, "INVALID_OPTION"
        )
    assert (await http.get("/config/msg_timeout")).content == b"60000000000"


# ---------------------------------------------------------------------- the connection


async def test_pipelined_requests_are_answered_in_order_on_one_connection(
    raw: RawClients, clients: Clients, nsqd: BoundAddresses
) -> None:
    reader = await consumer(clients, nsqd, "pipe")
    connection = await raw.connect(nsqd.http)
    await connection.send(
        request("GET", "/ping")
        + request("POST", "/pub?topic=pipe", b"first")
        + request("GET", "/nope")
        + request("POST", "/mpub?topic=pipe", b"second\nthird")
        + request("POST", "/pub", b"x")
    )
    expect_plain(await connection.answer())
    expect_text(await connection.answer())
    expect_error(await connection.answer(), 404, "NOT_FOUND")
    expect_text(await connection.answer())
    expect_error(await connection.answer(), 400, "MISSING_ARG_TOPIC")
    await connection.send(request("GET", "/info"))  # and still open for more
    info = await connection.answer()
    expect_json(info)
    assert json.loads(info.body)["tcp_port"] == nsqd.tcp[1]
    await connection.aclose()
    assert await received(reader, 3) == [b"first", b"second", b"third"]


async def test_keep_alive_serves_many_requests_on_one_connection(
    raw: RawClients, nsqd: BoundAddresses, http: httpx.AsyncClient
) -> None:
    local_ports = set()
    for _ in range(5):
        response = await http.get("/ping")
        expect_plain(Answer.of(response))
        assert "connection" not in response.headers
        stream = response.extensions["network_stream"]
        local_ports.add(stream.get_extra_info("client_addr")[1])
    assert len(local_ports) == 1
    connection = await raw.connect(nsqd.http)  # a request sent in pieces, then another
    whole = request("POST", "/pub?topic=t", b"body")
    for index in range(0, len(whole), 7):
        await connection.send(whole[index : index + 7])
    expect_text(await connection.answer())
    await connection.send(request("GET", "/ping"))
    expect_plain(await connection.answer())
    await connection.aclose()


async def test_connection_close_and_http_1_0_get_one_answer(
    raw: RawClients, nsqd: BoundAddresses
) -> None:
    for data in (
        request("GET", "/ping", headers=[("Connection", "close")]),
        request("GET", "/ping", version="HTTP/1.0"),
        request("POST", "/pub?topic=t", b"m", version="HTTP/1.0"),
    ):
        connection = await raw.connect(nsqd.http)
        await connection.send(data + request("GET", "/ping"))  # the second is never answered
        answer = await connection.answer()
        assert answer.status == 200
        assert answer.body == b"OK"
        assert answer.headers["connection"] == "close"
        await connection.closed()
        await connection.aclose()


async def test_head_answers_have_no_body(raw: RawClients, nsqd: BoundAddresses) -> None:
    """HEAD has no route in nsqd (405), and its answer must carry no body bytes."""
    connection = await raw.connect(nsqd.http)
    await connection.send(request("HEAD", "/ping") + request("GET", "/ping"))
    head = await connection.answer(head=True)
    assert head.status == 405
    assert head.headers["content-type"] == JSON_TYPE
    expect_plain(await connection.answer())  # the stream is still in step
    await connection.aclose()


async def test_expect_100_continue(raw: RawClients, clients: Clients, nsqd: BoundAddresses) -> None:
    reader = await consumer(clients, nsqd, "c100")
    connection = await raw.connect(nsqd.http)
    await connection.send(
        request(
            "POST",
            "/pub?topic=c100",
            headers=[("Expect", "100-continue"), ("Content-Length", "5")],
            length=False,
        )
    )
    interim = await connection.answer()
    assert (interim.status, interim.reason, interim.body) == (100, "Continue", b"")
    await connection.send(b"hello")
    expect_text(await connection.answer())
    # a Content-Length over the limit is refused at once: no 100, and no body read
    await connection.send(
        request(
            "POST",
            "/pub?topic=c100",
            headers=[("Expect", "100-continue"), ("Content-Length", str(MAX_MSG + 1))],
            length=False,
        )
    )
    expect_error(await connection.answer(), 413, "MSG_TOO_BIG")
    await connection.closed()
    assert await received(reader, 1) == [b"hello"]


async def test_malformed_requests_get_a_4xx_and_the_connection_closes(
    raw: RawClients,
    nsqd: BoundAddresses,
) -> None:
    # headers past 64 KiB, unfinished; one byte over, so the server reads every byte
    # before refusing (unread bytes would make the close a reset that loses the answer)
    big_head = b"GET /ping HTTP/1.1\r\nHost: nsqd\r\nX-Big: "
    big_head += b"a" * (64 * 1024 + 1 - len(big_head))
    cases = [
        (b"GET /ping HTTP/1.1\r\nHost: nsqd\r\nNo colon\r\n\r\n", 400),
        (b"GET /ping HTTP/1.1\r\n\r\n", 400),  # HTTP/1.1 without Host (Go refuses it too)
        (b"GET /ping\r\n\r\n", 400),  # no version
        (b"GET /ping HTTP/1.1\r\nHost: nsqd\r\nContent-Length: x\r\n\r\n", 400),
        (
            b"POST /pub?topic=t HTTP/1.1\r\nHost: nsqd\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n",
            400,
        ),
        (big_head, 431),
        (b"\x00\x01\x02\x03 binary\r\n\r\n", 400),
    ]
    for data, status in cases:
        connection = await raw.connect(nsqd.http)
        await connection.send(data)
        answer = await connection.answer()
        assert (answer.status, answer.headers["connection"]) == (status, "close"), data[:40]
        await connection.closed()
        await connection.aclose()


async def test_a_tcp_client_on_the_http_port_gets_an_http_400(
    raw: RawClients, nsqd: BoundAddresses
) -> None:
    """go-nsq sends its magic and reads ``HTTP/1.1`` back: it was given the HTTP port."""
    connection = await raw.connect(nsqd.http)
    await connection.send(b"  V2")
    assert (await connection.answer()).status == 400
    await connection.closed()
    await connection.aclose()
    connection = await raw.connect(nsqd.http)
    await connection.send(b"  V2IDENTIFY\n\x00\x00\x00\x02{}")
    with trio.fail_after(GUARD):
        while not connection.buffer.startswith(b"HTTP/1.1 400 "):
            assert await connection._fill()
    await connection.aclose()


async def test_idle_and_slow_connections_are_closed(
    raw: RawClients, nsqd: BoundAddresses, autojump_clock: trio.testing.MockClock
) -> None:
    autojump_clock.autojump_threshold = 0.1
    idle = await raw.connect(nsqd.http)
    t0 = trio.current_time()
    assert round(await idle.closed(400) - t0) == 300  # IDLE_TIMEOUT, before any request
    await idle.aclose()
    kept = await raw.connect(nsqd.http)
    await kept.send(request("GET", "/ping"))
    expect_plain(await kept.answer())
    t0 = trio.current_time()
    assert round(await kept.closed(400) - t0) == 300  # and between requests
    await kept.aclose()
    for partial in (
        b"GET /ping HTTP/1.1\r\nHost: ns",  # headers never finished
        request("POST", "/pub?topic=t", b"abc")[:-1],  # a body byte short
    ):
        slow = await raw.connect(nsqd.http)
        await slow.send(partial)
        t0 = trio.current_time()
        assert round(await slow.closed(60) - t0) == 30  # REQUEST_TIMEOUT from the first byte
        await slow.aclose()
    drip = await raw.connect(nsqd.http)  # a byte every 10 s does not keep it open
    t0 = trio.current_time()
    with trio.move_on_after(GUARD):
        for byte in request("GET", "/ping"):
            await drip.send(bytes([byte]))
            await trio.sleep(10)
    assert round(await drip.closed(60) - t0) == 30
    await drip.aclose()


async def test_a_request_after_its_predecessors_deadline_is_served_and_idle_counts_anew(
    raw: RawClients, nsqd: BoundAddresses, autojump_clock: trio.testing.MockClock
) -> None:
    """Between requests the wait keeps the last request's deadline (REQUEST_TIMEOUT):
    when it passes while idle, the connection waits on until IDLE_TIMEOUT after its
    last answer, and a request then is served as any other."""
    autojump_clock.autojump_threshold = 0.1
    kept = await raw.connect(nsqd.http)
    for gap in (0, 40, 5, 250):  # past the request deadline, within it, near the idle one
        await trio.sleep(gap)
        await kept.send(request("GET", "/ping"))
        expect_plain(await kept.answer())
    t0 = trio.current_time()
    assert round(await kept.closed(400) - t0) == 300
    await kept.aclose()


async def test_identical_heads_carry_their_own_bodies_in_order(
    raw: RawClients, clients: Clients, nsqd: BoundAddresses
) -> None:
    """Request heads read once per distinct head (same target, headers and length):
    each request still has its own body, answered and stored in order."""
    reader = await consumer(clients, nsqd, "heads")
    connection = await raw.connect(nsqd.http)
    bodies = [b"%05d" % n for n in range(8)]  # within the consumer's RDY 10
    await connection.send(b"".join(request("POST", "/pub?topic=heads", b) for b in bodies))
    for _ in bodies:
        expect_text(await connection.answer())
    await connection.aclose()
    assert await received(reader, len(bodies)) == bodies


# ---------------------------------------------------------------------- TLS


@attrs.frozen
class Tls:
    cert: Path
    key: Path
    client: ssl.SSLContext


def tls_files(tmp_path: Path) -> Tls:
    ca = trustme.CA()
    issued = ca.issue_cert("127.0.0.1", "localhost")
    cert, key = tmp_path / "cert.pem", tmp_path / "key.pem"
    cert.write_bytes(b"".join(pem.bytes() for pem in issued.cert_chain_pems))
    issued.private_key_pem.write_to_path(str(key))
    client = ssl.create_default_context()
    ca.configure_trust(client)
    return Tls(cert, key, client)


async def test_tls_required_refuses_plain_http_and_https_serves(
    raw: RawClients, clients: Clients, nursery: trio.Nursery, tmp_path: Path
) -> None:
    tls = tls_files(tmp_path)
    config = attrs.evolve(
        CONFIG, tls_cert=str(tls.cert), tls_key=str(tls.key), tls_required=TlsRequired.YES
    )
    addresses = await start(nursery, config)
    assert addresses.https is not None
    refusal = b'{"message": "TLS_REQUIRED", "https_port": %d}' % addresses.https[1]
    for method, target, body in [
        ("GET", "/ping", b""),
        ("GET", "/nope", b""),
        ("POST", "/pub?topic=t", b"m"),
        ("GET", "/pub?topic=t", b""),
        ("PUT", "/config/log_level", b"debug"),
    ]:
        answer = await ask(addresses.http, method, target, body)
        assert (answer.status, answer.body) == (403, refusal), target
        assert answer.headers["content-type"] == JSON_TYPE
        assert answer.headers["x-nsq-content-type"] == V1
    # even a body too big to read: the refusal comes first
    connection = await raw.connect(addresses.http)
    await connection.send(
        b"POST /pub?topic=t HTTP/1.1\r\nHost: nsqd\r\nContent-Length: %d\r\n\r\n" % (MAX_MSG + 1)
    )
    assert (await connection.answer()).body == refusal
    await connection.aclose()
    assert addresses.broker.topics == {}
    async with httpx.AsyncClient(
        base_url=url(addresses.https, "https"), verify=tls.client
    ) as https:
        expect_plain(Answer.of(await https.get("/ping")))
        info = Answer.of(await https.get("/info"))
        expect_json(info)
        assert addresses.http is not None
        assert json.loads(info.body)["http_port"] == addresses.http[1]
        expect_text(Answer.of(await https.post("/pub?topic=t", content=b"over tls")))
        expect_error(Answer.of(await https.post("/pub?topic=t")), 400, "MSG_EMPTY")
        assert (await https.get("/config/tls_required")).content == b"2"
    assert "t" in addresses.broker.topics


async def test_tls_required_for_tcp_only_leaves_plain_http_open(
    nursery: trio.Nursery, tmp_path: Path
) -> None:
    tls = tls_files(tmp_path)
    config = attrs.evolve(
        CONFIG,
        tls_cert=str(tls.cert),
        tls_key=str(tls.key),
        tls_required=TlsRequired.EXCEPT_HTTP,
    )
    addresses = await start(nursery, config)
    expect_plain(await ask(addresses.http, "GET", "/ping"))
    expect_text(await ask(addresses.http, "POST", "/pub?topic=t", b"m"))


# ---------------------------------------------------------------------- /stats


async def stats_setup(clients: Clients, nsqd: BoundAddresses) -> None:
    """Topics s1 (channels a, b; a consumer on a) and s2 (channel a); one TCP producer."""
    await consumer(clients, nsqd, "s1", "a")
    await clients.subscribe(nsqd.tcp, "s1", "b")
    await clients.subscribe(nsqd.tcp, "s2", "a")
    producer = await clients.connect(nsqd.tcp)
    await publish(producer, Pub("s1", b"one"), Pub("s2", b"two"))


async def test_stats_json_and_its_filters(
    clients: Clients, nsqd: BoundAddresses, http: httpx.AsyncClient
) -> None:
    await stats_setup(clients, nsqd)
    answer = Answer.of(await http.get("/stats?format=json"))
    expect_json(answer)
    stats = json.loads(answer.body)
    assert list(stats) == [
        "version",
        "trionsq_version",
        "health",
        "start_time",
        "topics",
        "memory",
        "descriptors",
        "producers",
    ]
    assert (stats["version"], stats["trionsq_version"]) == (NSQD_RELEASE, __version__)
    assert stats["health"] == "OK"
    assert isinstance(stats["start_time"], int)
    assert [t["topic_name"] for t in stats["topics"]] == ["s1", "s2"]
    s1 = stats["topics"][0]
    assert [c["channel_name"] for c in s1["channels"]] == ["a", "b"]
    assert s1["message_count"] == 1
    assert [len(c["clients"]) for c in s1["channels"]] == [1, 1]
    assert isinstance(stats["memory"], dict)
    assert len(stats["memory"]) == 9
    assert len(stats["producers"]) == 1

    async def get(query: str) -> object:
        answer = Answer.of(await http.get(f"/stats?format=json&{query}"))
        expect_json(answer)
        document: object = json.loads(answer.body)
        return document

    one = await get("topic=s2")
    assert isinstance(one, dict)
    assert [t["topic_name"] for t in one["topics"]] == ["s2"]
    unknown = await get("topic=missing")
    assert isinstance(unknown, dict)
    assert unknown["topics"] is None
    by_channel = await get("channel=b")
    assert isinstance(by_channel, dict)
    assert [
        (t["topic_name"], [c["channel_name"] for c in t["channels"]]) for t in by_channel["topics"]
    ] == [("s1", ["b"])]
    for value in ("false", "0"):
        no_clients = await get(f"include_clients={value}")
        assert isinstance(no_clients, dict)
        assert no_clients["producers"] is None
        assert all(c["clients"] is None for t in no_clients["topics"] for c in t["channels"])
        no_memory = await get(f"include_mem={value}")
        assert isinstance(no_memory, dict)
        assert "memory" not in no_memory
        assert list(no_memory) == [
            "version",
            "trionsq_version",
            "health",
            "start_time",
            "topics",
            "producers",
        ]


async def test_stats_text_legacy_and_bad_query(
    clients: Clients, nsqd: BoundAddresses, http: httpx.AsyncClient
) -> None:
    await stats_setup(clients, nsqd)
    for query in ("", "?format=text", "?format=JSON"):
        text = Answer.of(await http.get(f"/stats{query}"))
        expect_text(text, text.body)  # a string result: V1 text
        assert text.body.startswith(
            f"nsqd v{NSQD_RELEASE} (built w/trionsq-{__version__})".encode()
        )
        assert b"[s1" in text.body
        assert b"Memory:" in text.body
    no_memory = await http.get("/stats?include_mem=false")
    assert b"Memory:" not in no_memory.content
    legacy = Answer.of(await http.get("/stats?format=json", headers=LEGACY_ACCEPT))
    assert legacy.status == 200
    assert "x-nsq-content-type" not in legacy.headers
    envelope = json.loads(legacy.body)
    assert (envelope["status_code"], envelope["status_txt"]) == (200, "OK")
    assert [t["topic_name"] for t in envelope["data"]["topics"]] == ["s1", "s2"]
    legacy_text = Answer.of(await http.get("/stats", headers=LEGACY_ACCEPT))
    assert legacy_text.status == 200
    assert legacy_text.body.startswith(b"nsqd v")
    expect_error(await ask(nsqd.http, "GET", "/stats?format=json&x=%zz"), 400, "INVALID_REQUEST")
    expect_legacy_error(
        await ask(nsqd.http, "GET", "/stats?x=%zz", headers=list(LEGACY_ACCEPT.items())),
        "INVALID_REQUEST",
    )
