"""trionsq's sans-IO NSQ protocol: pure functions and state machines over bytes.

Nothing here does I/O or imports trio, so the broker, the Trio client, the blocking
Spark client and the tests all share it. Server side: :class:`ServerConnection`.
Client side: :func:`encode_command` and :class:`ClientConnection`. Lookupd V1:
:mod:`trionsq.protocol.lookupd`.

Importing the package is cheap: each name is imported from its module on first use
(PEP 562), so a process that needs one module (a Spark worker checking options
needs names.py) does not pay for the others (commands, identify and its cattrs
converter: 90 ms, issue 32).
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Final

if TYPE_CHECKING:
    from .commands import (
        Auth,
        Cls,
        Command,
        Dpub,
        ExtMessage,
        Fin,
        Identify,
        InternalCreateTopic,
        Mpub,
        MpubExt,
        MpubTrace,
        Nop,
        OffsetSpec,
        Pub,
        PubExt,
        PubTrace,
        Pull,
        Rdy,
        Req,
        Sub,
        SubAdvanced,
        SubOrdered,
        Touch,
        TracedMessage,
    )
    from .errors import ProtocolError
    from .ext_header import ExtHeader, check_ext_header
    from .frames import (
        CLOSE_WAIT_FRAME,
        HEARTBEAT_FRAME,
        MAGIC_V2,
        OK_FRAME,
        error_frame,
        response_frame,
        traced_reply,
        traced_reply_frame,
    )
    from .identify import IdentifyRequest, IdentifyResponse, NegotiatedSettings
    from .message import (
        Message,
        binary_id,
        decode_message,
        encode_message,
        encode_message_frame,
        encode_message_frames,
        hex_id,
    )
    from .server import ConnectionState, Event, PublishHeader, ServerConnection
    from .settings import ServerSettings

# The same names as the typing-only imports above and __all__ below, on purpose: type
# checkers read those, the lazy import this (tests/unit/protocol/test_package_names.py).
# Twins, too, of parts of the modules' own __all__ (commands, message): the package
# cannot read those without importing the modules, which is what it defers.
_SUBMODULES: Final = {
    "commands": (
        "Auth",
        "Cls",
        "Command",
        "Dpub",
        "ExtMessage",
        "Fin",
        "Identify",
        "InternalCreateTopic",
        "Mpub",
        "MpubExt",
        "MpubTrace",
        "Nop",
        "OffsetSpec",
        "Pub",
        "PubExt",
        "PubTrace",
        "Pull",
        "Rdy",
        "Req",
        "Sub",
        "SubAdvanced",
        "SubOrdered",
        "Touch",
        "TracedMessage",
    ),
    "errors": ("ProtocolError",),
    "ext_header": (
        "ExtHeader",
        "check_ext_header",
    ),
    "frames": (
        "CLOSE_WAIT_FRAME",
        "HEARTBEAT_FRAME",
        "MAGIC_V2",
        "OK_FRAME",
        "error_frame",
        "response_frame",
        "traced_reply",
        "traced_reply_frame",
    ),
    "identify": (
        "IdentifyRequest",
        "IdentifyResponse",
        "NegotiatedSettings",
    ),
    "message": (
        "Message",
        "binary_id",
        "decode_message",
        "encode_message",
        "encode_message_frame",
        "encode_message_frames",
        "hex_id",
    ),
    "server": (
        "ConnectionState",
        "Event",
        "PublishHeader",
        "ServerConnection",
    ),
    "settings": ("ServerSettings",),
}
_WHERE: Final = {name: module for module, names in _SUBMODULES.items() for name in names}


def __getattr__(name: str) -> object:
    """A name of :data:`__all__`, imported from its module on first use."""
    module = _WHERE.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(f".{module}", __name__), name)
    globals()[name] = value
    return value


__all__ = [
    "CLOSE_WAIT_FRAME",
    "HEARTBEAT_FRAME",
    "MAGIC_V2",
    "OK_FRAME",
    "Auth",
    "Cls",
    "Command",
    "ConnectionState",
    "Dpub",
    "Event",
    "ExtHeader",
    "ExtMessage",
    "Fin",
    "Identify",
    "IdentifyRequest",
    "IdentifyResponse",
    "InternalCreateTopic",
    "Message",
    "Mpub",
    "MpubExt",
    "MpubTrace",
    "NegotiatedSettings",
    "Nop",
    "OffsetSpec",
    "ProtocolError",
    "Pub",
    "PubExt",
    "PubTrace",
    "PublishHeader",
    "Pull",
    "Rdy",
    "Req",
    "ServerConnection",
    "ServerSettings",
    "Sub",
    "SubAdvanced",
    "SubOrdered",
    "Touch",
    "TracedMessage",
    "binary_id",
    "check_ext_header",
    "decode_message",
    "encode_message",
    "encode_message_frame",
    "encode_message_frames",
    "error_frame",
    "hex_id",
    "response_frame",
    "traced_reply",
    "traced_reply_frame",
]
