"""The publish rules TCP and HTTP both apply, written once.

Each transport words a refusal its own way (a fatal ``E_TOPIC_NOT_EXIST`` frame, a
404), but what is refused is decided here: where a publish goes, and whether JSON
headers may be stored in a topic. Limits a client can run into are here too, so
the transports take them from the broker and not from storage.
"""

from __future__ import annotations

import enum
from typing import TYPE_CHECKING, Final

from ..protocol.names import MAX_PARTITION_NUM
from ..queues.inflight import InFlightError
from ..queues.record import MAX_EXT_LENGTH

if TYPE_CHECKING:
    from collections.abc import Iterable, Mapping

    from .topic import Topic

__all__ = [
    "EXT_TOO_LONG_REASON",
    "MAX_EXT_LENGTH",
    "MAX_PARTITION_NUM",
    "InFlightError",
    "Refusal",
    "ext_refusal",
    "publish_target",
]

EXT_TOO_LONG_REASON: Final = f"ext header longer than {MAX_EXT_LENGTH} bytes"
"""Why a header the record format cannot hold is refused (Youzan's E_PUB_FAILED)."""


class Refusal(enum.Enum):
    """Why a publish is refused before anything is stored."""

    TOPIC_NOT_EXIST = "the topic or the named partition does not exist"
    BAD_PARTITION = "an ordered topic takes publishes only to a named partition"
    EXT_NOT_SUPPORTED = "a plain topic stores no JSON header"
    EXT_TOO_LONG = EXT_TOO_LONG_REASON


def publish_target(
    topics: Mapping[str, Topic], name: str, partition: int | None, *, create: bool
) -> int | Refusal:
    """The partition index a publish goes to (spec §8.3 steps 5-6, §9).

    No partition: the default one, the lowest, except on an ordered topic. A topic
    that does not exist yet is created by the publish when ``create`` (nsqd's PUB,
    MPUB, DPUB and /pub); Youzan's publishes never create one. A named partition must
    exist.
    """
    topic = topics.get(name)
    if topic is None:
        if partition is None and create:
            return 0
    elif partition is None:
        return Refusal.BAD_PARTITION if topic.ordered else 0
    elif 0 <= partition < len(topic.partitions):
        return partition
    return Refusal.TOPIC_NOT_EXIST


def ext_refusal(topic: Topic | None, headers: Iterable[bytes]) -> Refusal | None:
    """Whether these JSON headers can be stored in ``topic`` (None: they can).

    A plain topic takes none: Youzan's ``allow-ext-compatible`` would drop them
    instead, and it is not an option here.
    """
    if topic is None:  # deleted since the target was chosen
        return Refusal.TOPIC_NOT_EXIST
    if not topic.ext:
        return Refusal.EXT_NOT_SUPPORTED
    if max(map(len, headers), default=0) > MAX_EXT_LENGTH:
        return Refusal.EXT_TOO_LONG
    return None
