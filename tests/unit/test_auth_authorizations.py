# ruff: noqa: S106 - the "secret" arguments are test values, not credentials
"""The auth server's reply and request, checked against nsqd's internal/auth rules."""

from __future__ import annotations

import base64
import re
import subprocess
import sys
from urllib.parse import parse_qsl

import orjson
import pytest
from hypothesis import given
from hypothesis import strategies as st

from trionsq.auth import (
    PUBLISH,
    SUBSCRIBE,
    AuthAddressError,
    Authorization,
    AuthReplyError,
    AuthState,
    auth_params,
    build_auth_request,
    decode_auth_reply,
    encode_auth_response,
)


def reply(**fields: object) -> bytes:
    body: dict[str, object] = {"ttl": 60, "identity": "me", "authorizations": []}
    body.update(fields)
    return orjson.dumps(body)


def state_of(*grants: dict[str, object], ttl: int = 60) -> AuthState:
    return decode_auth_reply(reply(ttl=ttl, authorizations=list(grants)), fetched_at=100.0)


BOTH = [SUBSCRIBE, PUBLISH]

# --- patterns ---------------------------------------------------------------------


def test_topic_pattern_is_searched_unanchored_as_nsqd_does() -> None:
    state = state_of({"topic": "foo", "channels": [".*"], "permissions": BOTH})
    assert state.is_allowed("foo")
    assert state.is_allowed("xfoox")
    assert state.is_allowed("xfoox", "ch")
    assert not state.is_allowed("fo")


def test_anchored_pattern_from_the_server_grants_only_the_exact_name() -> None:
    state = state_of({"topic": "^foo$", "channels": ["^ch$"], "permissions": [SUBSCRIBE]})
    assert state.is_allowed("foo", "ch")
    assert not state.is_allowed("xfoo", "ch")
    assert not state.is_allowed("foo", "chx")


def test_channel_pattern_is_searched_unanchored() -> None:
    state = state_of({"topic": "^t$", "channels": ["ch"], "permissions": [SUBSCRIBE]})
    assert state.is_allowed("t", "my-ch-1")
    assert not state.is_allowed("t", "other")


def test_empty_topic_pattern_matches_every_topic() -> None:
    state = state_of({"topic": "", "channels": [""], "permissions": BOTH})
    assert state.is_allowed("anything", "any")
    assert state.is_allowed("anything")


@pytest.mark.parametrize("field", ["topic", "channels"])
def test_uncompilable_pattern_refuses_the_whole_reply(field: str) -> None:
    grant: dict[str, object] = {"topic": ".*", "channels": [".*"], "permissions": BOTH}
    grant[field] = "([" if field == "topic" else [".*", "(["]
    with pytest.raises(AuthReplyError, match=f"unable to compile {field.rstrip('s')}"):
        state_of(grant)


def test_go_only_class_syntax_does_not_raise_a_python_warning() -> None:
    # [[:alpha:]] is RE2's; Python warns about a nested set, which -W error would raise
    state = state_of({"topic": "[[:alpha:]]", "channels": [".*"], "permissions": BOTH})
    assert state.has_authorizations


# --- publish vs subscribe ---------------------------------------------------------


def test_publish_needs_publish_permission_and_subscribe_needs_subscribe() -> None:
    pub_only = state_of({"topic": ".*", "channels": [".*"], "permissions": [PUBLISH]})
    sub_only = state_of({"topic": ".*", "channels": [".*"], "permissions": [SUBSCRIBE]})
    assert pub_only.is_allowed("t")
    assert not pub_only.is_allowed("t", "c")
    assert sub_only.is_allowed("t", "c")
    assert not sub_only.is_allowed("t")


def test_publish_is_checked_as_channel_empty_so_a_channel_pattern_must_match_empty() -> None:
    strict = state_of({"topic": ".*", "channels": ["^c$"], "permissions": [PUBLISH]})
    loose = state_of({"topic": ".*", "channels": ["^$"], "permissions": [PUBLISH]})
    none = state_of({"topic": ".*", "channels": [], "permissions": [PUBLISH]})
    assert not strict.is_allowed("t")
    assert loose.is_allowed("t")
    assert not none.is_allowed("t")


def test_any_of_several_authorizations_grants() -> None:
    state = state_of(
        {"topic": "^a$", "channels": [".*"], "permissions": [PUBLISH]},
        {"topic": "^b$", "channels": ["^c1$", "^c2$"], "permissions": [SUBSCRIBE]},
    )
    assert state.is_allowed("a")
    assert not state.is_allowed("a", "c1")
    assert state.is_allowed("b", "c2")
    assert not state.is_allowed("b")
    assert not state.is_allowed("b", "c3")
    assert state.permission_count == 2


def test_empty_authorization_list_is_a_valid_reply_without_authorizations() -> None:
    state = state_of()
    assert not state.has_authorizations
    assert state.permission_count == 0
    assert not state.is_allowed("t")
    assert not state.is_allowed("t", "c")


def test_null_authorization_entry_is_a_zero_grant_that_allows_nothing() -> None:
    state = decode_auth_reply(reply(authorizations=[None]), fetched_at=0.0)
    assert state.authorizations == (Authorization(),)
    assert state.has_authorizations
    assert not state.is_allowed("t")


# --- ttl and expiry ---------------------------------------------------------------


def test_expiry_is_fetched_at_plus_ttl_and_expired_only_strictly_after() -> None:
    state = state_of(ttl=30)
    assert state.expires_at == 130.0
    assert not state.is_expired(129.0)
    assert not state.is_expired(130.0)
    assert state.is_expired(130.001)


@pytest.mark.parametrize("ttl", [0, -1])
def test_ttl_must_be_positive(ttl: int) -> None:
    with pytest.raises(AuthReplyError, match=rf"invalid TTL {ttl} \(must be >0\)"):
        decode_auth_reply(reply(ttl=ttl), fetched_at=0.0)


def test_missing_or_null_ttl_is_zero_and_refused() -> None:
    with pytest.raises(AuthReplyError, match="invalid TTL 0"):
        decode_auth_reply(b'{"authorizations":[]}', fetched_at=0.0)
    with pytest.raises(AuthReplyError, match="invalid TTL 0"):
        decode_auth_reply(reply(ttl=None), fetched_at=0.0)


@pytest.mark.parametrize("ttl", [1.5, 60.0, "60", True, 2**63])
def test_ttl_must_be_a_json_integer_in_int64(ttl: object) -> None:
    with pytest.raises(AuthReplyError, match="ttl"):
        decode_auth_reply(reply(ttl=ttl), fetched_at=0.0)


# --- malformed replies ------------------------------------------------------------


@pytest.mark.parametrize(
    ("body", "why"),
    [
        (b"", "not JSON"),
        (b"<html>", "not JSON"),
        (b"[]", "not a JSON object"),
        (b"null", "not a JSON object"),
        (reply(authorizations={"topic": "t"}), "authorizations"),
        (reply(authorizations=["t"]), "authorizations"),
        (reply(authorizations=[{"topic": 1}]), "topic"),
        (reply(authorizations=[{"topic": "t", "channels": "c"}]), "channels"),
        (reply(authorizations=[{"topic": "t", "channels": [1]}]), "channels"),
        (reply(authorizations=[{"topic": "t", "permissions": ["admin"]}]), "unknown permission"),
        (reply(authorizations=[{"topic": "t", "permissions": [None]}]), "unknown permission"),
        (reply(identity=5), "identity"),
    ],
)
def test_malformed_reply_is_a_typed_error(body: bytes, why: str) -> None:
    with pytest.raises(AuthReplyError, match=why):
        decode_auth_reply(body, fetched_at=0.0)


def test_unknown_keys_are_ignored_and_nulls_are_zero_values() -> None:
    body = reply(extra={"x": 1}, identity=None, identity_url=None)
    state = decode_auth_reply(body, fetched_at=0.0)
    assert (state.identity, state.identity_url) == ("", "")


def test_keys_match_case_insensitively_like_go_json() -> None:
    body = b'{"TTL":5,"Identity":"x","Authorizations":[{"Topic":"t","Permissions":["publish"]}]}'
    state = decode_auth_reply(body, fetched_at=0.0)
    assert state.ttl == 5
    assert state.identity == "x"
    assert state.authorizations == (Authorization(topic="t", permissions=(PUBLISH,)),)


def test_authorization_constructed_directly_is_validated_too() -> None:
    with pytest.raises(AuthReplyError, match="unknown permission"):
        Authorization(topic="t", permissions=("write",))


# --- the AUTH success body --------------------------------------------------------


def test_auth_response_has_identity_url_and_grant_count_in_go_json() -> None:
    state = decode_auth_reply(
        reply(
            identity="a<b",
            identity_url="http://x/?a=1&b=2",
            authorizations=[{"topic": "t", "permissions": [PUBLISH, SUBSCRIBE]}],
        ),
        fetched_at=0.0,
    )
    assert encode_auth_response(state) == (
        b'{"identity":"a\\u003cb","identity_url":"http://x/?a=1\\u0026b=2","permission_count":1}'
    )


# --- the request ------------------------------------------------------------------


def test_params_are_nsqds_four_sorted_and_common_name_is_always_sent() -> None:
    assert auth_params(remote_ip="10.0.0.1", tls=False, secret="s") == (
        ("common_name", ""),
        ("remote_ip", "10.0.0.1"),
        ("secret", "s"),
        ("tls", "false"),
    )
    assert dict(auth_params(remote_ip="", tls=True, secret="s", common_name="cn"))["tls"] == "true"


def test_get_to_host_port_goes_to_slash_auth_with_a_query_string() -> None:
    request = build_auth_request(
        "auth.local:4181", method="get", remote_ip="1.2.3.4", tls=True, secret="a b&c"
    )
    assert (request.method, request.scheme, request.host, request.port) == (
        "GET",
        "http",
        "auth.local",
        4181,
    )
    assert request.target == "/auth?common_name=&remote_ip=1.2.3.4&secret=a+b%26c&tls=true"
    assert ("Host", "auth.local:4181") in request.headers
    assert ("Accept", "application/vnd.nsq; version=1.0") in request.headers
    assert request.body == b""


def test_post_sends_nsqds_json_of_one_item_lists_not_a_form() -> None:
    request = build_auth_request(
        "auth.local:4181", method="post", remote_ip="1.2.3.4", tls=False, secret="s<"
    )
    assert request.method == "POST"
    assert request.target == "/auth"
    assert request.body == (
        b'{"common_name":[""],"remote_ip":["1.2.3.4"],"secret":["s\\u003c"],"tls":["false"]}'
    )
    assert ("Content-Type", "application/json") in request.headers
    assert ("Content-Length", str(len(request.body))) in request.headers


def test_secret_bytes_are_percent_encoded_exactly_in_get_and_replaced_in_post_json() -> None:
    get = build_auth_request("h:1", method="get", remote_ip="", tls=False, secret=b"\xff\x00")
    assert "secret=%FF%00&" in get.target
    post = build_auth_request("h:1", method="post", remote_ip="", tls=False, secret=b"\xff")
    assert orjson.loads(post.body)["secret"] == ["\ufffd"]


def test_full_url_is_used_as_given_with_its_own_path_and_scheme() -> None:
    request = build_auth_request(
        "https://auth.example:8443/v1/check", method="get", remote_ip="", tls=False, secret="s"
    )
    assert (request.scheme, request.host, request.port) == ("https", "auth.example", 8443)
    assert request.target.startswith("/v1/check?common_name=")
    default_port = build_auth_request(
        "https://auth.example", method="post", remote_ip="", tls=False, secret="s"
    )
    assert (default_port.port, default_port.target) == (443, "/")


def test_url_with_a_query_keeps_it_and_adds_the_values() -> None:
    request = build_auth_request(
        "http://h:1/auth?tenant=x", method="get", remote_ip="", tls=False, secret="s"
    )
    assert request.target.startswith("/auth?tenant=x&common_name=")


def test_url_user_info_becomes_basic_authorization_as_go_does() -> None:
    request = build_auth_request(
        "http://us%40er:p%3Aw@h:1/auth", method="get", remote_ip="", tls=False, secret="s"
    )
    token = base64.b64encode(b"us@er:p:w").decode()
    assert ("Authorization", f"Basic {token}") in request.headers
    assert ("Host", "h:1") in request.headers


def test_ipv6_host_port_is_unbracketed_for_connect_and_bracketed_in_host_header() -> None:
    request = build_auth_request("[::1]:4181", method="get", remote_ip="", tls=False, secret="s")
    assert (request.host, request.port) == ("::1", 4181)
    assert ("Host", "[::1]:4181") in request.headers
    assert request.url == "http://[::1]:4181/auth"


def test_url_for_logs_leaves_the_secret_out() -> None:
    request = build_auth_request("h:1", method="get", remote_ip="", tls=False, secret="hunter2")
    assert "hunter2" not in request.url


@pytest.mark.parametrize(
    "address", ["ftp://h:1/auth", "http://:80/auth", "h:notaport", "http://h:99999/"]
)
def test_unusable_address_is_a_typed_error(address: str) -> None:
    with pytest.raises(AuthAddressError):
        build_auth_request(address, method="get", remote_ip="", tls=False, secret="s")


def test_method_other_than_get_or_post_is_a_value_error() -> None:
    with pytest.raises(ValueError, match="get or post"):
        build_auth_request("h:1", method="put", remote_ip="", tls=False, secret="s")


def test_importing_the_auth_package_does_not_import_trio() -> None:
    code = (
        "import sys, trionsq.auth, trionsq.auth.authorizations\n"
        "sys.exit(1 if any(m == 'trio' or m.startswith('trio.') for m in sys.modules) else 0)\n"
    )
    result = subprocess.run(  # noqa: S603 - our own interpreter and fixed code
        [sys.executable, "-c", code], capture_output=True, text=True, check=False
    )
    assert result.returncode == 0, result.stderr


# --- properties -------------------------------------------------------------------

texts = st.text(st.characters(exclude_categories=["Cs"]))
names = st.from_regex(r"[.a-zA-Z0-9_-]{1,64}", fullmatch=True)
permission_sets = st.lists(st.sampled_from(BOTH), unique=True, max_size=2)
grants = st.builds(
    lambda topic, channels, permissions: {
        "topic": f"^{re.escape(topic)}$",
        "channels": [f"^{re.escape(c)}$" for c in channels],
        "permissions": permissions,
    },
    names,
    st.lists(names, max_size=3),
    permission_sets,
)


@given(st.lists(grants, max_size=4), names, st.one_of(st.just(""), names))
def test_state_allows_exactly_when_some_single_grant_allows(
    grant_list: list[dict[str, object]], topic: str, channel: str
) -> None:
    state = state_of(*grant_list)
    singles = [state_of(g).is_allowed(topic, channel) for g in grant_list]
    assert state.is_allowed(topic, channel) == any(singles)


@given(names, names, permission_sets)
def test_escaped_exact_grant_allows_its_own_names_only_with_the_permission(
    topic: str, channel: str, permissions: list[str]
) -> None:
    state = state_of(
        {
            "topic": f"^{re.escape(topic)}$",
            "channels": [f"^{re.escape(channel)}$", "^$"],
            "permissions": permissions,
        }
    )
    assert state.is_allowed(topic, channel) == (SUBSCRIBE in permissions)
    assert state.is_allowed(topic) == (PUBLISH in permissions)
    assert not state.is_allowed(topic + "x", channel)


@given(texts, st.booleans(), texts, texts)
def test_get_query_decodes_back_to_the_values_sent(
    remote_ip: str, tls: bool, secret: str, common_name: str
) -> None:
    request = build_auth_request(
        "h:1", method="get", remote_ip=remote_ip, tls=tls, secret=secret, common_name=common_name
    )
    query = request.target.partition("?")[2]
    assert dict(parse_qsl(query, keep_blank_values=True)) == {
        "common_name": common_name,
        "remote_ip": remote_ip,
        "secret": secret,
        "tls": "true" if tls else "false",
    }


@given(texts, texts)
def test_post_body_decodes_back_to_the_values_sent(secret: str, common_name: str) -> None:
    request = build_auth_request(
        "h:1", method="post", remote_ip="::1", tls=True, secret=secret, common_name=common_name
    )
    assert orjson.loads(request.body) == {
        "common_name": [common_name],
        "remote_ip": ["::1"],
        "secret": [secret],
        "tls": ["true"],
    }
