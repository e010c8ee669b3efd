"""What a durable channel persists, and how it comes back after a restart (design §2).

A channel's state file holds its confirmed position, the ids it finished out of
order above it, its deferred messages and its pause flag. Restoring restarts
reading at the confirmed position, so whatever was in flight or queued at a crash
is delivered again (at-least-once), while ids already finished are not.

File format (version 1): one compact JSON object, members in this order::

    {"version":1,"confirmed_id":101,"read_id":140,"finished":[103,104],
     "deferred":[[1700000000000000000,102]],"paused":false,"attempts":[[101,2,1]]}

- ``confirmed_id``: every id below it is finished for this channel.
- ``read_id``: the cursor's read position when saved (informational: restoring
  restarts at ``confirmed_id``; it only tells how much is delivered again).
- ``finished``: ids above ``confirmed_id`` already finished, strictly increasing.
- ``deferred``: ``[due, id]`` pairs, ``due`` in nanoseconds since the Unix epoch
  (wall clock, so a restart still waits until the right moment), in due order.
- ``paused``: the channel's pause flag when saved (metadata.json's flag wins for a
  channel listed there).
- ``attempts`` (absent when empty): how often each unfinished message was delivered,
  as runs ``[first id, run length, deliveries]`` of consecutive ids with the same
  count (a consumer's window in flight is a few runs), so a restart counts on
  (issue 30); a message not listed was never delivered.

Invariant: ``confirmed_id <= read_id``; ``finished`` ids lie above ``confirmed_id``,
``deferred`` ids at or above it, and no id is in both. Either may lie beyond
``read_id``: a DPUB is deferred at publish, before the cursor reaches it, and after a
restore the cursor re-reads from ``confirmed_id``. The files live at
``<data-path>/channels/<topic>-<partition>/<channel>.state`` (docs/storage.md).
"""

from __future__ import annotations

import logging
import os
from pathlib import Path
from typing import TYPE_CHECKING, Final, TypeVar

import attrs

from ..persist import (
    StorageFormatError,
    decode_versioned,
    ensure_directory,
    fsync_directory,
    read_optional,
    remove_file,
    remove_stale_temps,
    storage_converter,
    write_atomic,
)
from ..protocol.names import is_ephemeral, is_valid_name
from ..serialization import dumps, omit_defaults
from .cursor import ChannelCursor
from .delivery_journal import runs_of

if TYPE_CHECKING:
    from collections.abc import Iterable

    from .deferred import DeferredQueue
    from .partition_log import PartitionLog

__all__ = [
    "DELAYS_SUFFIX",
    "STATE_SUFFIX",
    "STATE_VERSION",
    "ChannelState",
    "ChannelStateError",
    "RestoredChannel",
    "capture_state",
    "decode_state",
    "delays_path",
    "encode_state",
    "load_state",
    "partition_state_directory",
    "remove_channel_state",
    "remove_partition_states",
    "remove_stale_state_temps",
    "restore_channel",
    "restore_cursor",
    "save_state",
    "scan_channel_states",
    "state_path",
]

storage_log = logging.getLogger("trionsq.storage")

STATE_VERSION: Final = 1
STATE_SUFFIX: Final = ".state"
DELAYS_SUFFIX: Final = ".delays"
"""A durable channel's delay store (queues/delay_store.py), beside its state file."""
CHANNELS_DIRECTORY: Final = "channels"

T = TypeVar("T")

_CONVERTER: Final = storage_converter()


class ChannelStateError(StorageFormatError):
    """A channel state file that cannot be used: bad JSON, wrong shape or version, or
    ids that break the invariant."""


@attrs.frozen(kw_only=True)
class ChannelState:
    """A durable channel's persisted position: see the module docstring for the format."""

    version: int = STATE_VERSION
    confirmed_id: int
    read_id: int
    finished: tuple[int, ...]
    """Finished ids above ``confirmed_id``, sorted."""
    deferred: tuple[tuple[int, int], ...]
    """(due, internal id), due in Unix nanoseconds, in due order."""
    paused: bool
    attempts: tuple[tuple[int, int, int], ...] = ()
    """Delivery counts of unfinished messages: runs (first id, length, deliveries)."""

    def check(self) -> None:
        """Raise :class:`ChannelStateError` unless the ids keep the invariant."""
        low = self.confirmed_id
        if not 0 <= low <= self.read_id:
            raise ChannelStateError(f"confirmed_id {low} / read_id {self.read_id} out of order")
        finished = set(self.finished)
        increasing = self.finished == tuple(sorted(finished))  # a repeat makes it shorter
        if not increasing or (self.finished and self.finished[0] <= low):
            previous = low  # the walk names the first id out of order (one sort found it)
            for internal_id in self.finished:
                if internal_id <= previous:
                    raise ChannelStateError(
                        f"finished id {internal_id} is not increasing above confirmed_id {low}"
                    )
                previous = internal_id
        seen: set[int] = set()
        for _, internal_id in self.deferred:
            if internal_id < low or internal_id in finished or internal_id in seen:
                raise ChannelStateError(
                    f"deferred id {internal_id} is below confirmed_id {low}, finished or repeated"
                )
            seen.add(internal_id)
        for first, length, deliveries in self.attempts:
            if first < low or length < 1 or deliveries < 1:
                raise ChannelStateError(f"attempts run {[first, length, deliveries]} is invalid")


omit_defaults(_CONVERTER, ChannelState, "attempts")


def encode_state(state: ChannelState) -> bytes:
    """Compact JSON bytes (the module docstring's format)."""
    return dumps(state, _CONVERTER)


def decode_state(data: bytes, *, what: str = "channel state") -> ChannelState:
    """Parse and check a state file; ``what`` names it in the error.

    Raises:
        ChannelStateError: not a usable version-1 state.
    """
    state = decode_versioned(
        data, ChannelState, _CONVERTER, version=STATE_VERSION, what=what, error=ChannelStateError
    )
    try:
        state.check()
    except ChannelStateError as exc:
        raise ChannelStateError(f"{what}: {exc}") from exc
    return state


def capture_state(
    cursor: ChannelCursor,
    deferred: DeferredQueue[T],
    *,
    paused: bool,
    now_monotonic: float,
    now_wall_ns: int,
    finished_ahead: Iterable[int] = (),
    attempts: Iterable[tuple[int, int]] = (),
) -> ChannelState:
    """Snapshot a live channel (call on the broker's thread, then write elsewhere).

    Deferred due times are Trio monotonic seconds; they are stored as wall-clock
    nanoseconds: ``now_wall_ns + (due - now_monotonic)``, read at the same moment.
    ``finished_ahead``: ids the channel finished before its cursor reached them (a
    DPUB deferred at publish, then FINished), which the cursor does not know yet;
    without them they would only be delivered again after a restart.
    ``attempts``: (id, deliveries) of the messages delivered and not finished.
    """
    confirmed = cursor.confirmed_id
    done = set(cursor._finished)  # no public accessor yet
    done.update(i for i in finished_ahead if i >= confirmed)
    while confirmed in done:  # finished ahead of the cursor, right at its confirmed id
        done.remove(confirmed)
        confirmed += 1
    entries = tuple(
        (now_wall_ns + round((due - now_monotonic) * 1e9), key)
        for due, key in deferred.entries()
        if key not in done and key >= confirmed
    )
    counts = sorted((i, n) for i, n in attempts if i >= confirmed and i not in done)
    return ChannelState(
        confirmed_id=confirmed,
        read_id=max(cursor.read_id, confirmed),
        finished=tuple(sorted(done)),
        deferred=entries,
        paused=paused,
        attempts=tuple(runs_of(counts)),
    )


@attrs.frozen
class RestoredChannel:
    """A channel's state fitted to its log after a restart: what the channel needs.

    How the channel uses it:

    - ``cursor`` reads from ``confirmed_id`` again: every id it reads that is not in
      :attr:`skip_ids` was unfinished at the crash (in flight, queued or not yet
      read) and is delivered again (at-least-once).
    - ``deferred``: hold each (due, id) with the record from the log
      (``log.get(id)``) ahead of the cursor, as ``Channel.defer_ahead`` does; a due
      time in the past fires at once.
    - :attr:`skip_ids` (``finished_ids`` | ``deferred_ids``): when the cursor reads one
      of these again, it must not be delivered. A finished id already counts in the
      cursor's finished set (so ``confirmed_id`` moves over it as soon as the ids
      before it are finished); a deferred one belongs to the deferred heap.
    - ``ChannelCursor.finish`` ignores ids at or above ``read_id``: a restored
      deferred id FINished before the cursor re-reads it must be finished on the
      cursor when the cursor passes it (``Channel.defer_ahead`` keeps that record).
    """

    cursor: ChannelCursor
    deferred: tuple[tuple[float, int], ...]
    """(due in Trio monotonic seconds, internal id), in due order."""
    deferred_ids: frozenset[int]
    finished_ids: frozenset[int]
    """Finished ids above the confirmed position (also in the cursor's finished set)."""
    paused: bool
    redelivered: int
    """Ids read before the restart and neither finished nor deferred: delivered again."""
    lost: int
    """Unfinished ids the log no longer holds (cut by recovery): logged, for /stats."""
    attempts: dict[int, int] = attrs.Factory(dict)
    """Delivery counts of the unfinished ids the log holds."""

    @property
    def skip_ids(self) -> frozenset[int]:
        """Ids the channel must not deliver when its cursor reads them again."""
        return self.finished_ids | self.deferred_ids


@attrs.frozen
class _Fitted:
    confirmed_id: int
    finished: tuple[int, ...]
    deferred: tuple[tuple[int, int], ...]
    lost: int


def _fit(log: PartitionLog, state: ChannelState, label: str) -> _Fitted:
    """Clamp a state to the ids the log holds now (recovery may have cut either end)."""
    start, end = log.start_id, log.next_id
    confirmed = state.confirmed_id
    finished_all = set(state.finished)
    lost = 0
    if confirmed < start:
        lost = start - confirmed - sum(1 for i in finished_all if i < start)
        storage_log.warning(
            "%s: ids %d..%d are no longer in the log; %d unfinished message(s) lost",
            label,
            confirmed,
            start - 1,
            lost,
        )
        confirmed = start
    elif confirmed > end:
        storage_log.warning(
            "%s: state is ahead of the log (confirmed id %d, log ends before %d); "
            "restarting at the log's end",
            label,
            confirmed,
            end,
        )
        confirmed = end
    kept = {i for i in finished_all if confirmed <= i < end}
    while confirmed in kept:  # ids cut below may leave the finished set contiguous
        kept.discard(confirmed)
        confirmed += 1
    deferred = tuple(
        (due, i) for due, i in state.deferred if confirmed <= i < end and i not in kept
    )
    return _Fitted(confirmed, tuple(sorted(kept)), deferred, lost)


def restore_cursor(
    log: PartitionLog, state: ChannelState, *, label: str = "channel"
) -> ChannelCursor:
    """A cursor that reads again from the confirmed position; finished-ahead ids
    stay finished. Ids outside the log's range are dropped (and logged)."""
    fitted = _fit(log, state, label)
    return _cursor(log, fitted)


def _cursor(log: PartitionLog, fitted: _Fitted) -> ChannelCursor:
    cursor = ChannelCursor(log, fitted.confirmed_id)
    cursor._finished.update(fitted.finished)  # no public setter yet
    return cursor


def restore_channel(
    log: PartitionLog,
    state: ChannelState,
    *,
    now_monotonic: float,
    now_wall_ns: int,
    label: str = "channel",
) -> RestoredChannel:
    """Everything a channel needs to resume (see :class:`RestoredChannel`).

    Due times go back to Trio's clock: ``now_monotonic + (due - now_wall_ns)``, with
    both clocks read at the same moment; ``label`` (e.g. ``orders/0/billing``) names
    the channel in log lines.
    """
    fitted = _fit(log, state, label)
    deferred = tuple(
        sorted(
            (now_monotonic + (due - now_wall_ns) / 1e9, internal_id)
            for due, internal_id in fitted.deferred
        )
    )
    deferred_ids = frozenset(internal_id for _, internal_id in fitted.deferred)
    finished_ids = frozenset(fitted.finished)
    end = log.next_id
    attempts = {
        internal_id: deliveries
        for first, length, deliveries in state.attempts
        for internal_id in range(max(first, fitted.confirmed_id), min(first + length, end))
        if internal_id not in finished_ids
    }
    horizon = min(max(state.read_id, fitted.confirmed_id), log.next_id)
    held = sum(1 for i in finished_ids if i < horizon) + sum(1 for i in deferred_ids if i < horizon)
    redelivered = horizon - fitted.confirmed_id - held
    if redelivered:
        storage_log.info(
            "%s: resuming at id %d; %d message(s) unfinished at shutdown will be redelivered",
            label,
            fitted.confirmed_id,
            redelivered,
        )
    return RestoredChannel(
        cursor=_cursor(log, fitted),
        deferred=deferred,
        deferred_ids=deferred_ids,
        finished_ids=finished_ids,
        paused=state.paused,
        redelivered=redelivered,
        lost=fitted.lost,
        attempts=attempts,
    )


# ------------------------------------------------------------------ files


def partition_state_directory(
    data_path: str | os.PathLike[str], topic: str, partition: int
) -> Path:
    """``<data-path>/channels/<topic>-<partition>``: one partition's channel states."""
    return Path(data_path or ".") / CHANNELS_DIRECTORY / f"{topic}-{partition}"


def state_path(data_path: str | os.PathLike[str], topic: str, partition: int, channel: str) -> Path:
    """``<data-path>/channels/<topic>-<partition>/<channel>.state``.

    Names need no escaping: ``[.a-zA-Z0-9_-]+`` holds no separator, and the suffixes
    make even ``.`` and ``..`` ordinary file names. Ephemeral channels have no file.
    """
    if is_ephemeral(topic) or is_ephemeral(channel):
        raise ValueError(f"ephemeral channel {topic}/{channel} is never persisted")
    return partition_state_directory(data_path, topic, partition) / f"{channel}{STATE_SUFFIX}"


def delays_path(
    data_path: str | os.PathLike[str], topic: str, partition: int, channel: str
) -> Path:
    """``<data-path>/channels/<topic>-<partition>/<channel>.delays``: the channel's
    parked long delays (removed with the partition's directory as the state is)."""
    state = state_path(data_path, topic, partition, channel)
    return state.with_name(f"{channel}{DELAYS_SUFFIX}")


def save_state(path: str | os.PathLike[str], state: ChannelState) -> None:
    """Write a state file atomically, creating its directory if needed (blocking)."""
    ensure_directory(Path(path).parent)
    write_atomic(path, encode_state(state))


def load_state(path: str | os.PathLike[str]) -> ChannelState | None:
    """The state in ``path``; None if there is none (blocking).

    Raises:
        ChannelStateError: the file is there but unusable.
    """
    data = read_optional(path)
    return None if data is None else decode_state(data, what=str(path))


def remove_channel_state(
    data_path: str | os.PathLike[str], topic: str, partition: int, channel: str
) -> bool:
    """Delete a channel's state file (before its metadata entry goes; blocking)."""
    return remove_file(state_path(data_path, topic, partition, channel))


def remove_partition_states(data_path: str | os.PathLike[str], topic: str, partition: int) -> int:
    """Delete a partition's state directory with its files; returns files removed."""
    directory = partition_state_directory(data_path, topic, partition)
    try:
        entries = list(os.scandir(directory))
    except FileNotFoundError:
        return 0
    removed = 0
    for entry in entries:
        Path(entry.path).unlink(missing_ok=True)
        removed += 1
    directory.rmdir()
    fsync_directory(directory.parent)
    return removed


def scan_channel_states(
    data_path: str | os.PathLike[str],
) -> dict[tuple[str, int], tuple[str, ...]]:
    """Channel names with a state file or a delay store, by (topic, partition),
    names sorted (blocking): a channel killed before its first state write still
    comes back when it parked a message.

    Temporary files and names that are not valid durable names are ignored.
    """
    root = Path(data_path or ".") / CHANNELS_DIRECTORY
    found: dict[tuple[str, int], tuple[str, ...]] = {}
    try:
        directories = list(os.scandir(root))
    except FileNotFoundError:
        return found
    for directory in directories:
        topic, _, index = directory.name.rpartition("-")
        if not (directory.is_dir() and index.isdigit() and index.isascii() and _durable(topic)):
            continue
        names = sorted(
            {
                entry.name[: -len(suffix)]
                for entry in os.scandir(directory.path)
                for suffix in (STATE_SUFFIX, DELAYS_SUFFIX)
                if entry.name.endswith(suffix)
                and _durable(entry.name[: -len(suffix)])
                and entry.is_file()
            }
        )
        if names:
            found[topic, int(index)] = tuple(names)
    return found


def remove_stale_state_temps(data_path: str | os.PathLike[str]) -> list[Path]:
    """Delete temporary files a crash left in any partition's state directory (at
    startup only, before any state writer runs); returns what was removed."""
    root = Path(data_path or ".") / CHANNELS_DIRECTORY
    removed: list[Path] = []
    try:
        directories = [entry.path for entry in os.scandir(root) if entry.is_dir()]
    except FileNotFoundError:
        return removed
    for directory in directories:
        removed.extend(remove_stale_temps(directory))
    return removed


def _durable(name: str) -> bool:
    return is_valid_name(name.encode()) and not is_ephemeral(name)
