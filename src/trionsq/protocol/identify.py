"""IDENTIFY: what a client asks for, how the server settles it, and the JSON reply.

Validation follows nsqd (spec tcp-protocol §4.1) plus Youzan's additions (§8.5);
every failure is the fatal ``E_BAD_BODY IDENTIFY <reason>`` or ``E_IDENTIFY_FAILED``.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Final

import attrs

from ..serialization import JsonDecodeError, dumps, make_converter, omit_defaults, structure_json
from .errors import ProtocolError
from .names import MAX_NAME_LENGTH, is_ephemeral, is_valid_name

if TYPE_CHECKING:
    from .settings import ServerSettings

__all__ = [
    "DEFAULT_GROUP_SESSION_TIMEOUT_MS",
    "MAX_GROUP_SESSION_TIMEOUT_MS",
    "MIN_GROUP_SESSION_TIMEOUT_MS",
    "ExtFilter",
    "ExtFilterItem",
    "IdentifyRequest",
    "IdentifyResponse",
    "NegotiatedSettings",
    "decode_identify_request",
    "encode_identify_request",
    "encode_identify_response",
    "negotiate",
]

MAX_TAG_LENGTH: Final = 100
MAX_ATTEMPTS_BOUND: Final = 0xFFFF
"""The largest dead-letter bound: a message frame's attempts field is 16 bits."""
MAX_MSGS_PER_SEC: Final = 100_000_000
"""The largest rate limit in messages/s (far above what one broker delivers)."""
MAX_BYTES_PER_SEC: Final = 2**40
"""The largest rate limit in bytes/s (1 TiB/s)."""
DEFAULT_GROUP_SESSION_TIMEOUT_MS: Final = 10_000
"""A group member silent this long is gone (Kafka's ``session.timeout.ms`` default)."""
MIN_GROUP_SESSION_TIMEOUT_MS: Final = 3_000
"""A third of it, the member's heartbeat interval, is nsqd's shortest (1 s)."""
MAX_GROUP_SESSION_TIMEOUT_MS: Final = 1_800_000
"""Kafka's ``group.max.session.timeout.ms`` default (30 minutes)."""
_INT32_MAX: Final = 2**31 - 1


@attrs.frozen
class ExtFilterItem:
    """One key/value pair of a Youzan ``ext_filter``."""

    filter_ext_key: str = ""
    filter_data: str = ""


@attrs.frozen
class ExtFilter:
    """Youzan's server-side filter on ext header values (kept for the broker)."""

    type: int = 0
    inverse: bool = False
    filter_ext_key: str = ""
    filter_data: str = ""
    filter_data_list: tuple[ExtFilterItem, ...] = ()


@attrs.frozen
class IdentifyRequest:
    """The IDENTIFY JSON body; absent keys and ``null`` keep these defaults."""

    client_id: str = ""
    hostname: str = ""
    user_agent: str = ""
    heartbeat_interval: int = 0
    output_buffer_size: int = 0
    output_buffer_timeout: int = 0
    feature_negotiation: bool = False
    tls_v1: bool = False
    deflate: bool = False
    deflate_level: int = 0
    snappy: bool = False
    sample_rate: int = 0
    msg_timeout: int = 0
    topology_region: str = ""
    topology_zone: str = ""
    extend_support: bool = False
    desired_tag: str = ""
    ext_filter: ExtFilter | None = None
    short_id: str = ""
    long_id: str = ""
    ordered_window: int = 0
    """trionsq: messages of an ordered partition in flight at once (0: not asked, 1)."""
    max_attempts: int = 0
    """trionsq: deliveries after which a message goes to the channel's dead-letter
    topic instead of coming back (0: not asked)."""
    group_member: str = ""
    """trionsq: join the subscribed channel's consumer group as this member (a name
    the consumer's connections share; empty: an ordinary consumer)."""
    group_session_timeout: int = 0
    """trionsq, with ``group_member``: milliseconds without a frame from the member
    after which it is gone (0: the default, 10 s)."""
    group_notices: bool = False
    """trionsq, with ``group_member``: send ``_group_owner_`` when the member starts
    to own the subscribed partition."""
    max_msgs_per_sec: int = 0
    """trionsq: deliver at most this many messages a second to this consumer (0: no
    limit)."""
    max_bytes_per_sec: int = 0
    """trionsq: deliver at most this many bytes a second to this consumer (0: no limit)."""


@attrs.frozen
class NegotiatedSettings:
    """The values in force for one client after IDENTIFY (0 means "off" for timers)."""

    client_id: str
    hostname: str
    user_agent: str
    heartbeat_interval_ms: int
    """0 = heartbeats disabled (and no read deadline)."""
    output_buffer_size: int
    output_buffer_timeout_ms: int
    """0 = no flush timer."""
    sample_rate: int
    msg_timeout_ms: int
    tls_v1: bool
    snappy: bool
    deflate: bool
    deflate_level: int
    extend_support: bool
    desired_tag: str
    feature_negotiation: bool
    ordered_window: int = 1
    """SUB_ORDERED: how many messages of the partition may be in flight to this
    consumer at once, in order (trionsq's extension; Youzan's is 1)."""
    max_attempts: int = 0
    """Dead-letter bound this consumer asked for (trionsq's extension; 0: none)."""
    group_member: str = ""
    """Consumer-group member name (trionsq's extension; empty: no group)."""
    group_session_timeout_ms: int = 0
    """A member connection silent this long is closed and the member gone (0: not a
    member, which has nsqd's two heartbeat intervals instead)."""
    group_notices: bool = False
    """A member that asked to hear when it starts to own the partition."""
    max_msgs_per_sec: int = 0
    """This consumer's delivery rate limit (trionsq's extension; 0: none)."""
    max_bytes_per_sec: int = 0

    @classmethod
    def defaults(cls, settings: ServerSettings) -> NegotiatedSettings:
        """What a client that never sends IDENTIFY gets."""
        return negotiate(IdentifyRequest(), settings)[0]


@attrs.frozen
class IdentifyResponse:
    """The JSON reply to IDENTIFY with ``feature_negotiation``; field order is nsqd's."""

    max_rdy_count: int
    version: str
    max_msg_timeout: int
    msg_timeout: int
    tls_v1: bool
    deflate: bool
    deflate_level: int
    max_deflate_level: int
    snappy: bool
    sample_rate: int
    auth_required: bool
    output_buffer_size: int
    output_buffer_timeout: int
    topology_region: str = ""
    topology_zone: str = ""
    desired_tag: str = ""
    """Youzan: present only when the client asked for a tag."""
    ordered_window: int = 0
    """trionsq: present only when the client asked for one (so it knows it holds)."""
    max_attempts: int = 0
    """trionsq: present only when the client asked for a dead-letter bound."""
    group_member: str = ""
    """trionsq: present only when the client joined a consumer group."""
    group_session_timeout: int = 0
    """trionsq: present only when the client joined a consumer group (so it knows
    when the broker gives up on it)."""
    group_notices: bool = False
    """trionsq: present only when a member asked for them."""
    max_msgs_per_sec: int = 0
    """trionsq: present only when the client asked for a rate limit (so it knows it
    holds: a broker without the extension leaves it out)."""
    max_bytes_per_sec: int = 0


_converter = make_converter()
omit_defaults(
    _converter,
    IdentifyResponse,
    "desired_tag",
    "ordered_window",
    "max_attempts",
    "group_member",
    "group_session_timeout",
    "group_notices",
    "max_msgs_per_sec",
    "max_bytes_per_sec",
)


def decode_identify_request(body: bytes) -> IdentifyRequest:
    """Parse an IDENTIFY body; bad JSON is nsqd's ``failed to decode JSON body``."""
    try:
        request = structure_json(body, IdentifyRequest, _converter)
    except JsonDecodeError:
        raise ProtocolError("E_BAD_BODY", "IDENTIFY failed to decode JSON body") from None
    if not -(2**31) <= request.sample_rate <= _INT32_MAX:  # Go decodes it into an int32
        raise ProtocolError("E_BAD_BODY", "IDENTIFY failed to decode JSON body")
    return request


def encode_identify_request(request: IdentifyRequest) -> bytes:
    """The JSON a client sends, without keys that hold their default."""
    raw: dict[str, object] = _converter.unstructure(request)
    defaults: dict[str, object] = _converter.unstructure(IdentifyRequest())
    return dumps({key: value for key, value in raw.items() if defaults.get(key) != value})


def encode_identify_response(response: IdentifyResponse) -> bytes:
    """The reply JSON bytes, keys in nsqd's order."""
    return dumps(response, _converter)


def decode_identify_response(data: bytes) -> IdentifyResponse:
    """Parse a server's IDENTIFY reply (client side)."""
    try:
        return structure_json(data, IdentifyResponse, _converter)
    except JsonDecodeError as exc:
        raise ProtocolError("E_BAD_RESPONSE", f"IDENTIFY reply is not valid: {exc}") from None


def _invalid(reason: str) -> ProtocolError:
    return ProtocolError("E_BAD_BODY", f"IDENTIFY {reason}")


def negotiate(
    request: IdentifyRequest, settings: ServerSettings
) -> tuple[NegotiatedSettings, IdentifyResponse | None]:
    """Validate ``request`` against ``settings`` and settle every value, as nsqd does.

    Returns the client's settings and, when ``feature_negotiation`` was asked for,
    the JSON reply (else the reply is ``OK``).

    Raises:
        ProtocolError: ``E_BAD_BODY IDENTIFY <reason>`` or ``E_IDENTIFY_FAILED``.
    """
    heartbeat_ms = _heartbeat_ms(request.heartbeat_interval, settings)
    buffer_size, timeout_ms = _output_buffer(request, settings)
    if not 0 <= request.sample_rate <= 99:
        raise _invalid(f"sample rate ({request.sample_rate}) is invalid")
    msg_timeout_ms = _msg_timeout_ms(request.msg_timeout, settings)
    tag_length = len(request.desired_tag.encode("utf-8"))
    if tag_length > MAX_TAG_LENGTH:
        raise _invalid(f"invalid tag len {tag_length}, exceed limit {MAX_TAG_LENGTH}")
    window = request.ordered_window
    if not 0 <= window <= settings.max_rdy_count:
        raise _invalid(f"ordered window ({window}) is invalid")
    if not 0 <= request.max_attempts <= MAX_ATTEMPTS_BOUND:
        raise _invalid(f"max attempts ({request.max_attempts}) is invalid")
    member = request.group_member
    if member and not _valid_member(member):
        raise _invalid(f"group member ({member!r}) is invalid")
    session_ms = _group_session_ms(request.group_session_timeout)
    if not member:
        session_ms = 0  # a session is a group member's
    else:  # heartbeats often enough for an idle member to answer in time
        heartbeat_ms = min(heartbeat_ms or session_ms, session_ms // 3)
    if not 0 <= request.max_msgs_per_sec <= MAX_MSGS_PER_SEC:
        raise _invalid(f"max msgs per sec ({request.max_msgs_per_sec}) is invalid")
    if not 0 <= request.max_bytes_per_sec <= MAX_BYTES_PER_SEC:
        raise _invalid(f"max bytes per sec ({request.max_bytes_per_sec}) is invalid")

    tls_v1 = settings.tls_available and request.tls_v1
    deflate = settings.deflate and request.deflate
    level = request.deflate_level if deflate and request.deflate_level > 0 else 6
    level = min(level, settings.max_deflate_level)
    snappy = settings.snappy and request.snappy
    if deflate and snappy:
        raise ProtocolError(
            "E_IDENTIFY_FAILED", "cannot enable both deflate and snappy compression"
        )

    negotiated = NegotiatedSettings(
        client_id=request.client_id or request.short_id,
        hostname=request.hostname or request.long_id,
        user_agent=request.user_agent,
        heartbeat_interval_ms=heartbeat_ms,
        output_buffer_size=buffer_size,
        output_buffer_timeout_ms=timeout_ms,
        sample_rate=request.sample_rate,
        msg_timeout_ms=msg_timeout_ms,
        tls_v1=tls_v1,
        snappy=snappy,
        deflate=deflate,
        deflate_level=level,
        extend_support=request.extend_support,
        desired_tag=request.desired_tag,
        feature_negotiation=request.feature_negotiation,
        ordered_window=window or 1,
        max_attempts=request.max_attempts,
        group_member=member,
        group_session_timeout_ms=session_ms,
        group_notices=bool(member) and request.group_notices,
        max_msgs_per_sec=request.max_msgs_per_sec,
        max_bytes_per_sec=request.max_bytes_per_sec,
    )
    if not request.feature_negotiation:
        return negotiated, None
    return negotiated, _response(negotiated, settings, window_asked=window > 0)


def _valid_member(member: str) -> bool:
    """A group member is named like a topic or channel: 1-64 of ``[.a-zA-Z0-9_-]``."""
    raw = member.encode("utf-8")
    return len(raw) <= MAX_NAME_LENGTH and is_valid_name(raw) and not is_ephemeral(member)


def _heartbeat_ms(asked: int, settings: ServerSettings) -> int:
    """-1 turns heartbeats off, 0 takes the default, else 1 s up to the maximum."""
    if asked == -1:
        return 0
    if asked == 0:
        return settings.default_heartbeat_interval_ms
    if 1000 <= asked <= settings.max_heartbeat_interval_ms:
        return asked
    raise _invalid(f"heartbeat interval ({asked}) is invalid")


def _group_session_ms(asked: int) -> int:
    """0 takes the default, else 3 s up to 30 minutes (a third of it is the member's
    heartbeat interval, which nsqd keeps at 1 s or more)."""
    if asked == 0:
        return DEFAULT_GROUP_SESSION_TIMEOUT_MS
    if MIN_GROUP_SESSION_TIMEOUT_MS <= asked <= MAX_GROUP_SESSION_TIMEOUT_MS:
        return asked
    raise _invalid(
        f"group session timeout ({asked}) is invalid: "
        f"{MIN_GROUP_SESSION_TIMEOUT_MS} to {MAX_GROUP_SESSION_TIMEOUT_MS} ms"
    )


def _output_buffer(request: IdentifyRequest, settings: ServerSettings) -> tuple[int, int]:
    """(size, timeout ms): -1 turns either off (a size of -1 also means no timeout)."""
    timeout = request.output_buffer_timeout
    if timeout == -1:
        timeout_ms = 0
    elif timeout == 0:
        timeout_ms = settings.output_buffer_timeout_ms
    elif settings.min_output_buffer_timeout_ms <= timeout <= settings.max_output_buffer_timeout_ms:
        timeout_ms = timeout  # the floor defaults to Youzan's 10 ms, not nsqd's 25 (config.py)
    else:
        raise _invalid(f"output buffer timeout ({timeout}) is invalid")

    size = request.output_buffer_size
    if size == -1:
        return 1, 0
    if size == 0:
        return settings.output_buffer_size, timeout_ms
    if 64 <= size <= settings.max_output_buffer_size:
        return size, timeout_ms
    raise _invalid(f"output buffer size ({size}) is invalid")


def _msg_timeout_ms(asked: int, settings: ServerSettings) -> int:
    """0 takes the default, else 1 s up to the maximum."""
    if asked == 0:
        return settings.msg_timeout_ms
    if 1000 <= asked <= settings.max_msg_timeout_ms:
        return asked
    raise _invalid(f"msg timeout ({asked}) is invalid")


def _response(
    negotiated: NegotiatedSettings, settings: ServerSettings, *, window_asked: bool
) -> IdentifyResponse:
    """The JSON reply to a ``feature_negotiation`` IDENTIFY."""
    return IdentifyResponse(
        max_rdy_count=settings.max_rdy_count,
        version=settings.version,
        max_msg_timeout=settings.max_msg_timeout_ms,
        msg_timeout=negotiated.msg_timeout_ms,
        tls_v1=negotiated.tls_v1,
        deflate=negotiated.deflate,
        deflate_level=negotiated.deflate_level,
        max_deflate_level=settings.max_deflate_level,
        snappy=negotiated.snappy,
        sample_rate=negotiated.sample_rate,
        auth_required=settings.auth_enabled,
        output_buffer_size=negotiated.output_buffer_size,
        output_buffer_timeout=negotiated.output_buffer_timeout_ms,
        topology_region=settings.topology_region,
        topology_zone=settings.topology_zone,
        desired_tag=negotiated.desired_tag,
        ordered_window=negotiated.ordered_window if window_asked else 0,
        max_attempts=negotiated.max_attempts,
        group_member=negotiated.group_member,
        group_session_timeout=negotiated.group_session_timeout_ms,
        group_notices=negotiated.group_notices,
        max_msgs_per_sec=negotiated.max_msgs_per_sec,
        max_bytes_per_sec=negotiated.max_bytes_per_sec,
    )
