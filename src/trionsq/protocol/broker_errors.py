"""The error replies only the broker can decide, built here so their wire text is exact.

The state machine raises the errors it can see in the bytes; these need broker
state (topics, in-flight tables, auth replies, storage). Texts and fatality are
spec tcp-protocol §4 and §8; the broker calls these instead of writing strings.
"""

from __future__ import annotations

from .errors import ProtocolError
from .names import go_quote

__all__ = [
    "auth_failed",
    "auth_no_authorizations",
    "bad_partition_for_ordered",
    "create_topic_failed",
    "ext_not_supported",
    "failed_on_not_leader",
    "failed_on_not_writable",
    "fin_failed",
    "identify_upgrade_failed",
    "invalid_internal_id",
    "no_channel",
    "pub_failed",
    "pub_rate_limited",
    "pub_too_much_waiting",
    "req_failed",
    "sub_channel_not_registered",
    "sub_extend_forbidden",
    "sub_extend_needed",
    "sub_failed",
    "sub_failed_deleted",
    "sub_order_is_must",
    "too_many_connections",
    "topic_not_exist",
    "touch_failed",
    "unauthorized",
]

NOT_IN_FLIGHT = "ID not in flight"
NOT_OWNER = "client does not own message"
RATE_LIMITED = "rate limit exceeded"


def _id_text(message_id: bytes) -> str:
    return message_id.decode("utf-8", "surrogateescape")


def identify_upgrade_failed(reason: str) -> ProtocolError:
    """TLS handshake or compression setup after IDENTIFY failed."""
    return ProtocolError("E_IDENTIFY_FAILED", f"IDENTIFY failed {reason}")


def auth_failed() -> ProtocolError:
    """The auth server could not be reached or refused (reasons stay in the log)."""
    return ProtocolError("E_AUTH_FAILED", "AUTH failed")


def auth_no_authorizations() -> ProtocolError:
    """The auth server answered with no authorizations."""
    return ProtocolError("E_UNAUTHORIZED", "AUTH no authorizations found")


def unauthorized(verb: str, topic: str, channel: str = "") -> ProtocolError:
    """The client's authorizations do not cover this topic/channel."""
    return ProtocolError(
        "E_UNAUTHORIZED",
        f"AUTH failed for {verb} on {go_quote(topic.encode())} {go_quote(channel.encode())}",
    )


def sub_failed(reason: str) -> ProtocolError:
    """The channel refused the client (exiting, or max-channel-consumers reached)."""
    return ProtocolError("E_SUB_FAILED", f"SUB failed {reason}")


def sub_failed_deleted() -> ProtocolError:
    """An ephemeral topic/channel was being deleted and the one retry failed too."""
    return ProtocolError("E_SUB_FAILED", "SUB failed to deleted topic/channel")


def fin_failed(message_id: bytes, reason: str, *, fatal: bool = False) -> ProtocolError:
    """FIN of an id not in flight or not owned (non-fatal)."""
    return ProtocolError("E_FIN_FAILED", f"FIN {_id_text(message_id)} failed {reason}", fatal=fatal)


def req_failed(message_id: bytes, reason: str) -> ProtocolError:
    """REQ of an id not in flight or not owned (non-fatal)."""
    return ProtocolError("E_REQ_FAILED", f"REQ {_id_text(message_id)} failed {reason}", fatal=False)


def touch_failed(message_id: bytes, reason: str) -> ProtocolError:
    """TOUCH of an id not in flight or not owned (non-fatal)."""
    return ProtocolError(
        "E_TOUCH_FAILED", f"TOUCH {_id_text(message_id)} failed {reason}", fatal=False
    )


def pub_failed(verb: str, reason: str, *, youzan: bool = False) -> ProtocolError:
    """A store failure: upstream ``E_PUB_FAILED PUB failed <err>`` (fatal), or Youzan's
    non-fatal ``E_PUB_FAILED <err>`` for its own publish commands.

    ``verb`` is PUB, MPUB or DPUB; the code follows it (E_MPUB_FAILED, E_DPUB_FAILED).
    """
    code = f"E_{verb}_FAILED"
    if youzan:
        return ProtocolError(code, reason, fatal=False)
    return ProtocolError(code, f"{verb} failed {reason}")


def pub_rate_limited(verb: str, *, youzan: bool = False) -> ProtocolError:
    """trionsq's publish limit refused a publish: :func:`pub_failed`'s text with the
    reason ``rate limit exceeded``, always non-fatal (the client may publish again on
    the same connection once its bucket has refilled)."""
    error = pub_failed(verb, RATE_LIMITED, youzan=youzan)
    return ProtocolError(error.code, error.description, fatal=False)


def topic_not_exist() -> ProtocolError:
    """PUB/SUB to a partition or partitioned topic that does not exist (trailing space)."""
    return ProtocolError("E_TOPIC_NOT_EXIST", "")


def bad_partition_for_ordered() -> ProtocolError:
    """A publish without a partition to an ordered topic."""
    return ProtocolError("E_BAD_PARTITION", "topic partition is not valid for multi partition: -1")


def pub_too_much_waiting(pending_bytes: int) -> ProtocolError:
    """Publish back-pressure: too many bytes waiting for the topic."""
    return ProtocolError(
        "E_PUB_TOO_MUCH_WAITING", f"pub too much waiting in the queue: {pending_bytes}"
    )


def ext_not_supported(topic: str) -> ProtocolError:
    """A JSON header sent to a topic that is not ext (non-fatal)."""
    return ProtocolError(
        "E_EXT_NOT_SUPPORT", f"ext content not supported in topic {topic}", fatal=False
    )


def failed_on_not_leader(*, fatal: bool) -> ProtocolError:
    """This node does not lead the partition (fatal for SUB/FIN, not for publishes)."""
    return ProtocolError("E_FAILED_ON_NOT_LEADER", "", fatal=fatal)


def failed_on_not_writable(*, fatal: bool) -> ProtocolError:
    """A cluster write failed (fatal for SUB/FIN, not for publishes)."""
    return ProtocolError("E_FAILED_ON_NOT_WRITABLE", "", fatal=fatal)


def sub_order_is_must() -> ProtocolError:
    """A plain SUB to an ordered topic."""
    return ProtocolError("E_SUB_ORDER_IS_MUST", "this topic is configured only allow ordered sub")


def sub_extend_needed() -> ProtocolError:
    """SUB to an ext topic without ``extend_support``."""
    return ProtocolError(
        "E_SUB_EXTEND_NEED", "this topic is extended and should identify as extend support."
    )


def sub_extend_forbidden() -> ProtocolError:
    """SUB to a plain topic with ``extend_support`` (Youzan's spelling kept)."""
    return ProtocolError(
        "E_SUB_EXTEND_FORBIDDON",
        "this topic is not extended and should not identify as extend support.",
    )


def sub_channel_not_registered() -> ProtocolError:
    """SUB to an unknown channel on a topic whose channels are not auto-created."""
    return ProtocolError("E_SUB_CHANNEL_NOT_REGISTERED", "channel is not registered under topic.")


def invalid_internal_id() -> ProtocolError:
    """FIN with a binary id whose internal id is 0."""
    return ProtocolError("E_INVALID", "Invalid Message ID")


def no_channel() -> ProtocolError:
    """FIN/REQ/TOUCH from a subscribed client that has no channel."""
    return ProtocolError("E_INVALID", "No channel")


def create_topic_failed(reason: str) -> ProtocolError:
    """INTERNAL_CREATE_TOPIC refused (non-fatal)."""
    return ProtocolError("E_CREATE_TOPIC_FAILED", reason, fatal=False)


def too_many_connections() -> ProtocolError:
    """Youzan's refusal past max-conn-for-client: the frame text has no E_ code at all."""
    return ProtocolError("too much client connections", None)
