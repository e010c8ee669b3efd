"""What an nsqd auth server grants, and the HTTP request that asks it (sans-IO).

nsqd's AUTH (spec tcp-protocol §4.2) hands the client's secret to an external HTTP
service and keeps its JSON reply: how long it holds (``ttl``), who the client is,
and which topics and channels it may publish or subscribe to. Everything here is
pure so the rules can be tested with exact inputs; the I/O is in ``client.py``.

The rules are nsqd's ``internal/auth``, checked against its source:

- patterns are searched, not anchored: nsqd compiles the pattern as given and asks
  ``MatchString``, so ``foo`` grants ``xfoox``; a server wanting exact names sends
  ``^foo$``;
- a reply with a pattern that does not compile, an unknown permission, or a ttl that
  is not a positive integer is refused as a whole (nsqd rejects it at fetch time, so
  an uncompilable pattern never reaches a permission check);
- a publish is checked as channel ``""``: it needs ``publish`` and a channel pattern
  that matches the empty string (``.*`` does, ``^$`` does, ``^x$`` does not);
- JSON is read the way Go's ``encoding/json`` reads it into nsqd's struct: unknown
  keys ignored, ``null`` is the zero value, key names match case-insensitively.

Patterns are Python ``re``, not Go's RE2; the common subset (classes, ``^$``,
alternation, repetition) means the same for topic and channel names.
"""

from __future__ import annotations

import base64
import re
import warnings
from typing import Final, Required, TypedDict, Unpack
from urllib.parse import quote_plus, unquote, urlsplit

import attrs
import orjson

from ..serialization import short_repr

__all__ = [
    "ACCEPT",
    "DEFAULT_PATH",
    "PERMISSIONS",
    "PUBLISH",
    "SUBSCRIBE",
    "AuthAddressError",
    "AuthError",
    "AuthReplyError",
    "AuthRequest",
    "AuthState",
    "AuthValues",
    "Authorization",
    "auth_params",
    "build_auth_request",
    "decode_auth_reply",
    "encode_auth_response",
]

SUBSCRIBE: Final = "subscribe"
PUBLISH: Final = "publish"
PERMISSIONS: Final = frozenset({SUBSCRIBE, PUBLISH})
ACCEPT: Final = "application/vnd.nsq; version=1.0"
"""The Accept header nsqd's HTTP client sends with every request."""
DEFAULT_PATH: Final = "/auth"
"""Path used when an auth address is a bare ``host:port``."""
_INT64_MIN: Final = -(2**63)
_INT64_MAX: Final = 2**63 - 1


class AuthError(Exception):
    """Base of every auth failure; the connection maps them all to ``E_AUTH_FAILED``."""


class AuthReplyError(AuthError, ValueError):
    """The auth server's reply is not one nsqd would accept."""


class AuthAddressError(AuthError, ValueError):
    """An ``--auth-http-address`` that cannot be turned into a request."""


def _compile(pattern: str, what: str) -> re.Pattern[str]:
    # Go-only syntax such as [[:alpha:]] makes Python warn; the pattern is the
    # server's, not ours, so a warning must not become an error under -W error.
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        try:
            return re.compile(pattern)
        except (re.error, OverflowError, RecursionError) as exc:
            raise AuthReplyError(f"unable to compile {what} {pattern!r} {exc}") from exc


def _compile_topic(authorization: Authorization) -> re.Pattern[str]:
    return _compile(authorization.topic, "topic")


def _compile_channels(authorization: Authorization) -> tuple[re.Pattern[str], ...]:
    return tuple(_compile(channel, "channel") for channel in authorization.channels)


def _known_permissions(
    _instance: Authorization, _attribute: attrs.Attribute[tuple[str, ...]], value: tuple[str, ...]
) -> None:
    for permission in value:
        if permission not in PERMISSIONS:
            raise AuthReplyError(f"unknown permission {permission}")


@attrs.frozen
class Authorization:
    """One grant: a topic pattern, channel patterns, and what may be done there.

    Patterns are compiled once, at construction, so a bad one fails the whole reply
    (as nsqd) and checks on the hot path only search.
    """

    topic: str = ""
    channels: tuple[str, ...] = ()
    permissions: tuple[str, ...] = attrs.field(default=(), validator=_known_permissions)
    _topic_pattern: re.Pattern[str] = attrs.field(
        init=False, eq=False, repr=False, default=attrs.Factory(_compile_topic, takes_self=True)
    )
    _channel_patterns: tuple[re.Pattern[str], ...] = attrs.field(
        init=False, eq=False, repr=False, default=attrs.Factory(_compile_channels, takes_self=True)
    )

    def has_permission(self, permission: str) -> bool:
        """True when this grant lists ``permission``."""
        return permission in self.permissions

    def is_allowed(self, topic: str, channel: str = "") -> bool:
        """A subscribe (channel given) or a publish (channel ``""``) on ``topic``.

        A publish still walks the channel patterns with ``""``, as nsqd does.
        """
        needed = SUBSCRIBE if channel else PUBLISH
        if not self.has_permission(needed):
            return False
        if self._topic_pattern.search(topic) is None:
            return False
        return any(pattern.search(channel) is not None for pattern in self._channel_patterns)


@attrs.frozen
class AuthState:
    """A validated auth reply and when it was fetched (Trio's clock, seconds)."""

    ttl: int
    authorizations: tuple[Authorization, ...] = ()
    identity: str = ""
    identity_url: str = ""
    fetched_at: float = 0.0

    @property
    def expires_at(self) -> float:
        """When nsqd would fetch again before the next check."""
        return self.fetched_at + self.ttl

    def is_expired(self, now: float) -> bool:
        """True strictly after ``expires_at`` (nsqd: ``Expires.Before(now)``)."""
        return self.expires_at < now

    @property
    def has_authorizations(self) -> bool:
        """False for an empty grant list, which AUTH answers with ``E_UNAUTHORIZED``."""
        return bool(self.authorizations)

    @property
    def permission_count(self) -> int:
        """What the AUTH reply reports: the number of grants, not of permissions."""
        return len(self.authorizations)

    def is_allowed(self, topic: str, channel: str = "") -> bool:
        """True when any grant allows it; no check of expiry (the caller refreshes)."""
        return any(grant.is_allowed(topic, channel) for grant in self.authorizations)


# --- decoding the reply ---------------------------------------------------------


def _member(obj: dict[str, object], name: str) -> object:
    """Go's rule: the last key equal to ``name`` ignoring case wins."""
    found: object = None
    for key, value in obj.items():
        if key.lower() == name:
            found = value
    return found


def _string(value: object, where: str) -> str:
    if value is None:
        return ""
    if type(value) is not str:
        raise AuthReplyError(f"{where}: expected a string, got {short_repr(value)}")
    return value


def _strings(value: object, where: str) -> tuple[str, ...]:
    if value is None:
        return ()
    if type(value) is not list:
        raise AuthReplyError(f"{where}: expected a list of strings, got {short_repr(value)}")
    return tuple(_string(item, where) for item in value)


def _ttl(value: object) -> int:
    if value is None:
        ttl = 0
    elif type(value) is int and _INT64_MIN <= value <= _INT64_MAX:
        ttl = value
    else:
        raise AuthReplyError(f"ttl: expected an integer, got {short_repr(value)}")
    if ttl <= 0:
        raise AuthReplyError(f"invalid TTL {ttl} (must be >0)")
    return ttl


def _authorization(value: object) -> Authorization:
    if value is None:
        return Authorization()
    if type(value) is not dict:
        raise AuthReplyError(f"authorizations: expected an object, got {short_repr(value)}")
    return Authorization(
        topic=_string(_member(value, "topic"), "topic"),
        channels=_strings(_member(value, "channels"), "channels"),
        permissions=_strings(_member(value, "permissions"), "permissions"),
    )


def decode_auth_reply(data: bytes, *, fetched_at: float) -> AuthState:
    """Parse and validate a 200 reply's body; anything nsqd would refuse raises
    :class:`AuthReplyError`.
    """
    try:
        raw = orjson.loads(data)
    except orjson.JSONDecodeError as exc:
        raise AuthReplyError(f"reply is not JSON: {exc}") from exc
    if type(raw) is not dict:
        raise AuthReplyError(f"reply is not a JSON object: {short_repr(raw)}")
    grants = _member(raw, "authorizations")
    if grants is not None and type(grants) is not list:
        raise AuthReplyError(f"authorizations: expected a list, got {short_repr(grants)}")
    authorizations = tuple(_authorization(item) for item in grants or ())
    return AuthState(
        ttl=_ttl(_member(raw, "ttl")),
        authorizations=authorizations,
        identity=_string(_member(raw, "identity"), "identity"),
        identity_url=_string(_member(raw, "identity_url"), "identity_url"),
        fetched_at=fetched_at,
    )


def _go_json(value: object) -> bytes:
    """JSON as Go's ``json.Marshal`` writes it: compact, ``<>&`` and U+2028/9 escaped."""
    out = orjson.dumps(value)
    for raw, escaped in (
        (b"<", b"\\u003c"),
        (b">", b"\\u003e"),
        (b"&", b"\\u0026"),
        ("\u2028".encode(), b"\\u2028"),
        ("\u2029".encode(), b"\\u2029"),
    ):
        out = out.replace(raw, escaped)
    return out


def encode_auth_response(state: AuthState) -> bytes:
    """The body of AUTH's success frame: identity, identity_url, permission_count."""
    return _go_json(
        {
            "identity": state.identity,
            "identity_url": state.identity_url,
            "permission_count": state.permission_count,
        }
    )


# --- the request ----------------------------------------------------------------


class AuthValues(TypedDict, total=False):
    """What an auth server is told about the connection: the keywords of
    :func:`auth_params`, handed on unchanged by :func:`build_auth_request` and the
    client (auth/client.py), so the four stand, and ``common_name``'s default, once."""

    remote_ip: Required[str]
    """The bare address (no port, no brackets), ``""`` for a unix socket."""
    tls: Required[bool]
    secret: Required[str | bytes]
    common_name: str
    """The client certificate's CN; ``""`` (the default) without one."""


def auth_params(**values: Unpack[AuthValues]) -> tuple[tuple[str, str | bytes], ...]:
    """The four values nsqd always sends, in its (sorted) order.

    ``common_name`` is sent even when empty: nsqd sets it unconditionally, to the
    client certificate's CN when the client did TLS with a certificate.
    """
    return (
        ("common_name", values.get("common_name", "")),
        ("remote_ip", values["remote_ip"]),
        ("secret", values["secret"]),
        ("tls", "true" if values["tls"] else "false"),
    )


def _query_string(params: tuple[tuple[str, str | bytes], ...]) -> str:
    # Go's url.Values.Encode: QueryEscape (space → "+"), keys sorted.
    return "&".join(f"{quote_plus(key)}={quote_plus(value)}" for key, value in params)


def _json_form(params: tuple[tuple[str, str | bytes], ...]) -> bytes:
    # nsqd's POST marshals url.Values (map[string][]string) as JSON; Go replaces
    # invalid UTF-8 with U+FFFD when it does.
    form = {
        key: [value.decode("utf-8", "replace") if isinstance(value, bytes) else value]
        for key, value in params
    }
    return _go_json(form)


@attrs.frozen
class AuthRequest:
    """One HTTP request to one auth server, ready for any HTTP/1.1 client."""

    method: str
    scheme: str
    host: str
    port: int
    target: str
    headers: tuple[tuple[str, str], ...]
    body: bytes = b""

    @property
    def url(self) -> str:
        """For logs and errors; the secret is in the query of a GET, so keep it out."""
        path = self.target.split("?", 1)[0]
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"{self.scheme}://{host}:{self.port}{path}"


def build_auth_request(
    address: str, *, method: str, user_agent: str = "trionsq", **values: Unpack[AuthValues]
) -> AuthRequest:
    """The request nsqd would send to ``address`` for ``--auth-http-request-method``.

    An address containing ``://`` is used as the URL (http or https, path as given);
    otherwise it is ``host:port`` and the URL is ``http://host:port/auth``. GET puts
    the values in the query string; POST sends them as nsqd does, a JSON object of
    one-element lists (``{"secret":["…"],…}``), not a form. User info in the URL
    becomes Basic authorization, as Go's client does.
    """
    verb = method.lower()
    if verb not in ("get", "post"):
        raise ValueError(f"auth request method must be get or post, got {method!r}")
    url = address if "://" in address else f"http://{address}{DEFAULT_PATH}"
    try:
        parts = urlsplit(url)
        port = parts.port
    except ValueError as exc:
        raise AuthAddressError(f"bad auth address {address!r}: {exc}") from exc
    scheme = parts.scheme.lower()
    if scheme not in ("http", "https"):
        raise AuthAddressError(f"unsupported protocol scheme {parts.scheme!r} in {address!r}")
    host = parts.hostname
    if not host:
        raise AuthAddressError(f"no host in auth address {address!r}")
    host_header = parts.netloc.rpartition("@")[2]
    params = auth_params(**values)
    path = parts.path or "/"
    headers = [("Host", host_header), ("User-Agent", user_agent), ("Accept", ACCEPT)]
    if parts.username is not None:
        credentials = f"{unquote(parts.username)}:{unquote(parts.password or '')}"
        token = base64.b64encode(credentials.encode()).decode("ascii")
        headers.append(("Authorization", f"Basic {token}"))
    if verb == "get":
        query = _query_string(params)
        # nsqd appends "?<values>" even to a URL that has a query; "&" keeps both.
        target = f"{path}?{parts.query}&{query}" if parts.query else f"{path}?{query}"
        body = b""
    else:
        target = f"{path}?{parts.query}" if parts.query else path
        body = _json_form(params)
        headers += [("Content-Type", "application/json"), ("Content-Length", str(len(body)))]
    headers.append(("Connection", "close"))
    return AuthRequest(
        method=verb.upper(),
        scheme=scheme,
        host=host,
        port=port if port is not None else (443 if scheme == "https" else 80),
        target=target,
        headers=tuple(headers),
        body=body,
    )
