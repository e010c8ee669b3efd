# ruff: noqa: S106, S107 - the "secret" arguments are test values, not credentials
"""The auth client against real HTTP auth servers on 127.0.0.1 (tests/auth_server.py)."""

from __future__ import annotations

import ssl
from typing import TYPE_CHECKING

import orjson
import pytest
import trio
import trio.testing
import trustme

from tests.auth_server import (
    Reply,
    grant,
    refusing_address,
    start_auth_server,
    unanswering_address,
)
from trionsq.auth import PUBLISH, SUBSCRIBE, Authorization
from trionsq.auth.client import (
    MAX_REPLY_BYTES,
    MAX_REQUESTS_AT_ONCE,
    AuthServerError,
    AuthUnavailableError,
    query_auth_server,
    query_one_auth_server,
)

from .test_broker_lookupd_peers import SilentHttp

if TYPE_CHECKING:
    from trionsq.auth import AuthState

GRANT = grant(
    [{"topic": "^orders$", "channels": [".*"], "permissions": [PUBLISH, SUBSCRIBE]}],
    ttl=120,
    identity="alice",
    identity_url="http://id.example/alice",
)
BAD = Reply(status=500, body=b"boom")


async def ask(
    addresses: list[str],
    secret: str = "good",
    *,
    tls: bool = False,
    common_name: str = "",
    method: str = "get",
    request_timeout: float = 5.0,
    ssl_context: ssl.SSLContext | None = None,
    start: int | None = 0,
) -> AuthState:
    """The client with nsqd's defaults, trying servers in list order unless told."""
    return await query_auth_server(
        addresses,
        remote_ip="10.1.2.3",
        tls=tls,
        secret=secret,
        common_name=common_name,
        method=method,
        connect_timeout=2.0,
        request_timeout=request_timeout,
        ssl_context=ssl_context,
        start=start,
    )


def autojump(clock: trio.testing.MockClock) -> None:
    clock.autojump_threshold = 0.1  # real sockets: never jump while bytes are in flight


# --- GET and POST -----------------------------------------------------------------


async def test_get_asks_slash_auth_with_nsqds_query_and_returns_the_grant(
    nursery: trio.Nursery,
) -> None:
    server = await start_auth_server(nursery, {"good": GRANT})
    before = trio.current_time()
    state = await ask([server.address], tls=True, common_name="cn-1")
    assert state.identity == "alice"
    assert state.identity_url == "http://id.example/alice"
    assert state.ttl == 120
    assert state.authorizations == (
        Authorization(topic="^orders$", channels=(".*",), permissions=(PUBLISH, SUBSCRIBE)),
    )
    assert before <= state.fetched_at <= trio.current_time()
    assert state.is_allowed("orders", "ch")
    assert not state.is_allowed("refunds")

    [request] = server.requests
    assert (request.method, request.path) == ("GET", "/auth")
    assert request.query == "common_name=cn-1&remote_ip=10.1.2.3&secret=good&tls=true"
    assert request.header("accept") == "application/vnd.nsq; version=1.0"
    assert request.body == b""


async def test_post_sends_nsqds_json_lists_and_returns_the_grant(nursery: trio.Nursery) -> None:
    server = await start_auth_server(nursery, {"good": GRANT})
    state = await ask([server.address], method="post")
    assert state.identity == "alice"
    [request] = server.requests
    assert (request.method, request.target) == ("POST", "/auth")
    assert request.header("content-type") == "application/json"
    assert orjson.loads(request.body) == {
        "common_name": [""],
        "remote_ip": ["10.1.2.3"],
        "secret": ["good"],
        "tls": ["false"],
    }


async def test_full_url_address_is_asked_at_its_own_path(nursery: trio.Nursery) -> None:
    server = await start_auth_server(nursery, {"good": GRANT})
    await ask([server.url("/v2/authorize")])
    assert [request.path for request in server.requests] == ["/v2/authorize"]


async def test_empty_grant_list_is_returned_for_the_caller_to_refuse(
    nursery: trio.Nursery,
) -> None:
    server = await start_auth_server(nursery, {"good": grant([])})
    state = await ask([server.address])
    assert not state.has_authorizations


# --- fallback ---------------------------------------------------------------------


async def test_refused_connection_falls_back_to_the_next_server(nursery: trio.Nursery) -> None:
    server = await start_auth_server(nursery, {"good": GRANT})
    with refusing_address() as down:
        state = await ask([down, server.address])
    assert state.identity == "alice"


async def test_status_500_falls_back_to_the_next_server(nursery: trio.Nursery) -> None:
    failing = await start_auth_server(nursery, {"good": BAD})
    working = await start_auth_server(nursery, {"good": GRANT})
    state = await ask([failing.address, working.address])
    assert state.identity == "alice"
    assert (len(failing.requests), len(working.requests)) == (1, 1)


async def test_non_200_is_a_failure_even_with_a_valid_grant_body(nursery: trio.Nursery) -> None:
    server = await start_auth_server(nursery, {"good": Reply(status=201, body=GRANT.body)})
    with pytest.raises(AuthUnavailableError, match="got response 201"):
        await ask([server.address])


async def test_malformed_200_reply_falls_back_to_the_next_server(nursery: trio.Nursery) -> None:
    broken = await start_auth_server(nursery, {"good": grant(ttl=0)})
    working = await start_auth_server(nursery, {"good": GRANT})
    state = await ask([broken.address, working.address])
    assert state.identity == "alice"


async def test_server_hanging_up_without_a_reply_falls_back(nursery: trio.Nursery) -> None:
    rude = await start_auth_server(nursery, {"good": Reply(hang_up=True)})
    working = await start_auth_server(nursery, {"good": GRANT})
    state = await ask([rude.address, working.address])
    assert state.identity == "alice"


async def test_first_success_stops_the_search(nursery: trio.Nursery) -> None:
    first = await start_auth_server(nursery, {"good": GRANT})
    second = await start_auth_server(nursery, {"good": GRANT})
    await ask([first.address, second.address])
    assert (len(first.requests), len(second.requests)) == (1, 0)


async def test_start_index_rotates_round_the_list(nursery: trio.Nursery) -> None:
    first = await start_auth_server(nursery, {"good": BAD})
    second = await start_auth_server(nursery, {"good": BAD})
    third = await start_auth_server(nursery, {"good": GRANT})
    await ask([third.address, first.address, second.address], start=1)
    assert [len(s.requests) for s in (first, second, third)] == [1, 1, 1]


async def test_random_start_still_reaches_the_one_working_server(nursery: trio.Nursery) -> None:
    working = await start_auth_server(nursery, {"good": GRANT})
    with refusing_address() as down_a, refusing_address() as down_b:
        for _ in range(10):
            state = await ask([down_a, working.address, down_b], start=None)
            assert state.identity == "alice"


async def test_all_servers_failing_is_one_error_naming_each(nursery: trio.Nursery) -> None:
    failing = await start_auth_server(nursery, {"good": BAD})
    with refusing_address() as down, pytest.raises(AuthUnavailableError) as caught:
        await ask([failing.address, down])
    error = caught.value
    assert [failure.address for failure in error.failures] == [failing.address, down]
    assert str(error).startswith(f"failed to auth against {failing.address} - got response 500")
    assert f"; failed to auth against {down} - " in str(error)


async def test_unknown_secret_gets_the_servers_refusal(nursery: trio.Nursery) -> None:
    server = await start_auth_server(nursery, {"good": GRANT})
    with pytest.raises(AuthUnavailableError, match="got response 403"):
        await ask([server.address], secret="wrong")
    assert server.secrets_seen() == ["wrong"]


async def test_no_addresses_is_unavailable() -> None:
    with pytest.raises(AuthUnavailableError, match="no auth servers configured"):
        await ask([])


async def test_unusable_address_is_one_failure_among_others(nursery: trio.Nursery) -> None:
    working = await start_auth_server(nursery, {"good": GRANT})
    state = await ask(["ftp://127.0.0.1:1/auth", working.address])
    assert state.identity == "alice"


async def test_method_other_than_get_or_post_is_a_value_error_not_a_server_failure() -> None:
    with pytest.raises(ValueError, match="get or post"):
        await ask(["127.0.0.1:1"], method="put")


# --- time and size bounds ---------------------------------------------------------


async def test_slow_server_fails_at_request_timeout_and_the_next_answers(
    nursery: trio.Nursery, autojump_clock: trio.testing.MockClock
) -> None:
    autojump(autojump_clock)
    slow = await start_auth_server(nursery, {"good": Reply(delay=60.0, body=GRANT.body)})
    working = await start_auth_server(nursery, {"good": GRANT})
    started = trio.current_time()
    state = await ask([slow.address, working.address], request_timeout=5.0)
    assert state.identity == "alice"
    assert 5.0 <= trio.current_time() - started < 6.0


async def test_slow_only_server_is_reported_as_a_timeout(
    nursery: trio.Nursery, autojump_clock: trio.testing.MockClock
) -> None:
    autojump(autojump_clock)
    slow = await start_auth_server(nursery, {"good": Reply(delay=60.0, body=GRANT.body)})
    with pytest.raises(AuthServerError, match=r"no reply within 5\.0s"):
        await query_one_auth_server(
            slow.address, remote_ip="", tls=False, secret="good", request_timeout=5.0
        )


async def test_unanswered_connect_fails_at_connect_timeout_and_the_next_answers(
    nursery: trio.Nursery, autojump_clock: trio.testing.MockClock
) -> None:
    autojump(autojump_clock)
    working = await start_auth_server(nursery, {"good": GRANT})
    with unanswering_address() as hanging:
        started = trio.current_time()
        with pytest.raises(AuthServerError, match=r"connect timed out after 2\.0s"):
            await query_one_auth_server(
                hanging, remote_ip="", tls=False, secret="good", connect_timeout=2.0
            )
        assert 2.0 <= trio.current_time() - started < 3.0
        state = await ask([hanging, working.address])
    assert state.identity == "alice"


def padded_grant(size: int) -> bytes:
    body = GRANT.body
    return body + b" " * (size - len(body))


async def test_reply_of_exactly_one_mib_is_accepted(nursery: trio.Nursery) -> None:
    server = await start_auth_server(nursery, {"good": Reply(body=padded_grant(MAX_REPLY_BYTES))})
    state = await ask([server.address])
    assert state.identity == "alice"


async def test_reply_declared_over_one_mib_is_refused(nursery: trio.Nursery) -> None:
    big = Reply(body=padded_grant(MAX_REPLY_BYTES + 1))
    server = await start_auth_server(nursery, {"good": big})
    with pytest.raises(AuthUnavailableError, match="over the limit"):
        await ask([server.address])


async def test_chunked_reply_over_one_mib_is_refused_while_reading(nursery: trio.Nursery) -> None:
    big = Reply(body=padded_grant(MAX_REPLY_BYTES + 1), chunked=True)
    server = await start_auth_server(nursery, {"good": big})
    with pytest.raises(AuthUnavailableError, match=f"over {MAX_REPLY_BYTES} bytes"):
        await ask([server.address])


# --- https ------------------------------------------------------------------------


def tls_contexts() -> tuple[ssl.SSLContext, ssl.SSLContext]:
    authority = trustme.CA()
    server = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    authority.issue_cert("127.0.0.1").configure_cert(server)
    client = ssl.create_default_context()
    authority.configure_trust(client)
    return server, client


async def test_https_address_is_asked_over_tls(nursery: trio.Nursery) -> None:
    server_context, client_context = tls_contexts()
    server = await start_auth_server(nursery, {"good": GRANT}, ssl_context=server_context)
    state = await ask([server.url()], ssl_context=client_context)
    assert state.identity == "alice"
    assert [request.path for request in server.requests] == ["/auth"]


async def test_https_with_an_untrusted_certificate_is_a_failure(nursery: trio.Nursery) -> None:
    server_context, _ = tls_contexts()
    server = await start_auth_server(nursery, {"good": GRANT}, ssl_context=server_context)
    with pytest.raises(AuthUnavailableError, match="TLS failed: CERTIFICATE_VERIFY_FAILED"):
        await ask([server.url()])  # the system trust store does not know trustme's CA


async def test_at_most_sixteen_queries_are_in_flight_at_once(
    nursery: trio.Nursery, autojump_clock: trio.testing.MockClock
) -> None:
    """Each query holds a socket, which the broker's descriptor budget reserves: a
    crowd of clients sending AUTH together waits its turn."""
    autojump_clock.autojump_threshold = 0.1  # real sockets
    stuck = SilentHttp()
    await nursery.start(stuck.serve)
    failed = 0

    async def one() -> None:
        nonlocal failed
        with pytest.raises(AuthUnavailableError):
            await ask([f"127.0.0.1:{stuck.port}"], request_timeout=1.0)
        failed += 1

    async with trio.open_nursery() as crowd:
        for _ in range(3 * MAX_REQUESTS_AT_ONCE):
            crowd.start_soon(one)
    assert failed == stuck.accepted == 3 * MAX_REQUESTS_AT_ONCE
    assert stuck.peak == MAX_REQUESTS_AT_ONCE
