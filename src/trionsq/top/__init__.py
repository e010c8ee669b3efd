"""``trionsq top``: a terminal view of one broker, following its admin stream.

Three layers, so the view is testable without a terminal or a socket: the state
and its reducer (:mod:`.state`), the view (:mod:`.view`), and the stream with the
command around it (:mod:`.stream`, :mod:`.command`).
"""

from __future__ import annotations

from .command import main
from .state import (
    EVENT_LOG_SIZE,
    BrokerInfo,
    ChannelRow,
    EventLine,
    Sort,
    TopicRow,
    TopState,
    apply,
)
from .stream import (
    MIN_RENDER_INTERVAL,
    CannotConnect,
    StreamClosed,
    close_message,
    follow,
    stream_url,
)
from .view import render

__all__ = [
    "EVENT_LOG_SIZE",
    "MIN_RENDER_INTERVAL",
    "BrokerInfo",
    "CannotConnect",
    "ChannelRow",
    "EventLine",
    "Sort",
    "StreamClosed",
    "TopState",
    "TopicRow",
    "apply",
    "close_message",
    "follow",
    "main",
    "render",
    "stream_url",
]
