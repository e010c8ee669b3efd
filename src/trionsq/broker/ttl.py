"""Message time to live (issue 20): past it a message leaves its channels unseen.

A topic's TTL (``/topic/ttl``, persisted) and a message's own ``##ttl`` header (ext
topics) both count from the message's publish time; the shorter one holds. A
message past it leaves each channel when a routing pass would hand it out, or at
the channel's next TTL sweep (``channel_ttl.py``), finished unseen and counted in
the channel's ``expired_count``. Off by default: a topic without a TTL costs nothing per message
until a message with ``##ttl`` is published to it (then its ext messages are looked
at for one; the topic remembers this in its metadata).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Final

import attrs

from ..protocol.ext_header import TTL_KEY, stored_fields, ttl_seconds_of

if TYPE_CHECKING:
    from collections.abc import Sequence

    from ..queues.record import Record

TTL_NEEDLE: Final = b'"' + TTL_KEY.encode() + b'"'
"""Looked for in an ext record's raw header before it is parsed: most carry none."""


@attrs.define
class TopicTtl:
    """One topic's TTL rules, shared by reference by all its channels, so a change
    reaches every partition's channels at once."""

    ttl_ns: int = 0
    """The topic's TTL in nanoseconds (0: none)."""
    headers: bool = False
    """A message with ``##ttl`` was published to the topic (persisted)."""
    dead_letter: bool = False
    """``--ttl-dead-letter``: an expired message goes to its channel's dead-letter
    topic, when the channel has a bound (the broker's setting, not persisted)."""

    @property
    def active(self) -> bool:
        """Whether any message of the topic can expire."""
        return bool(self.ttl_ns) or self.headers

    def note_published(self, exts: Sequence[bytes]) -> bool:
        """A batch of ext headers was published: whether it is the first to carry
        ``##ttl`` (from now on the topic's messages are looked at for one)."""
        # one search over the batch (a newline cannot be part of the needle)
        if self.headers or TTL_NEEDLE not in b"\n".join(exts):
            return False
        self.headers = True
        return True

    def limit_ns(self, record: Record) -> int:
        """How long ``record`` may live (0: for ever)."""
        limit = self.ttl_ns
        if self.headers and record.ext_version and TTL_NEEDLE in record.ext:
            own = header_ttl_ns(record.ext)
            if own is not None and (not limit or own < limit):
                limit = own
        return limit

    def expires_ns(self, record: Record) -> int:
        """When ``record`` expires, wall-clock nanoseconds (0: never)."""
        limit = self.limit_ns(record)
        return record.timestamp + limit if limit else 0


def header_ttl_ns(ext: bytes) -> int | None:
    """A raw ext header's ``##ttl`` in nanoseconds, if it has a valid one (publishing
    refuses invalid ones; a record written before that rule simply has none)."""
    fields = stored_fields(ext)
    if fields is None:
        return None
    seconds = ttl_seconds_of(fields)
    return None if seconds is None else int(seconds * 1e9)
