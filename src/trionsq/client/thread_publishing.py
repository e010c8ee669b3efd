"""Single publishes from many threads, gathered into MPUBs as the async producer
gathers concurrent tasks' (:mod:`.batching`).

A thread's :meth:`ThreadPublishes.publish` only appends to a deque, wakes the Trio
thread if no wake-up is pending, and waits on its own reply queue. The Trio thread's
gatherer takes every publish appended since its last turn at once and hands each
body to the batcher of its topic and partition without awaiting it, with a slot that
puts the outcome in the caller's queue; so N threads publishing at once cost the
Trio thread one wake-up per turn and the broker one MPUB per batch, instead of a
:func:`trio.from_thread.run` (two wake-ups, a task) per message.

Closing lets what was appended be sent and answered (for at most
:data:`DRAIN_TIMEOUT`); whatever is left then fails with
:class:`~.errors.ConnectionClosedError`, so no thread waits forever.
"""

from __future__ import annotations

import contextlib
import queue
import threading
from collections import deque
from typing import TYPE_CHECKING, Final

import trio

from .errors import ConnectionClosedError

if TYPE_CHECKING:
    from .batching import Batcher
    from .producer import Producer

__all__ = ["ThreadPublishes"]

DRAIN_TIMEOUT: Final = 5.0
"""Seconds a closing blocking producer gives the publishes already made."""

_Reply = queue.SimpleQueue[BaseException | None]


class _ThreadSlot:
    """One thread's publish, as the batcher settles it: its outcome goes to the
    caller's reply queue."""

    __slots__ = ("owner", "reply")

    def __init__(self, reply: _Reply, owner: ThreadPublishes) -> None:
        self.reply = reply
        self.owner = owner

    def settle(self, error: BaseException | None) -> None:
        """In the Trio thread (a batcher's task), or once it has ended."""
        owner = self.owner
        owner._outstanding.discard(self)
        self.reply.put(error)
        if owner.closed and not owner._outstanding:
            owner._settled.set()


class ThreadPublishes:
    """The publishes of one blocking producer's threads and the Trio task sending
    them (:meth:`gather_forever`, in the producer's Trio thread)."""

    def __init__(self, producer: Producer, token: trio.lowlevel.TrioToken) -> None:
        self._producer = producer
        self._token = token
        self._pending: deque[tuple[str, bytes, int | None, bytes | str | None, _Reply]] = deque()
        self._wake_pending = False
        self._wanted = trio.Event()
        self._replies = threading.local()
        self._outstanding: set[_ThreadSlot] = set()
        """Handed to a batcher, not settled yet."""
        self._settled = trio.Event()
        """Closing, and nothing is outstanding any more."""
        self._lock = threading.Lock()
        """Appending and closing exclude each other: nothing is appended once closed."""
        self.closed = False

    # ------------------------------------------------------------------ any thread

    def publish(
        self, topic: str, body: bytes, partition: int | None, key: bytes | str | None
    ) -> None:
        """Publish from this thread; returns once stored, or raises its error.

        Raises:
            ConnectionClosedError: the producer is closed (or closes meanwhile).
        """
        reply: _Reply | None = getattr(self._replies, "queue", None)
        if reply is None:
            reply = self._replies.queue = queue.SimpleQueue()
        with self._lock:
            if self.closed:
                raise ConnectionClosedError("the producer is closed")
            self._pending.append((topic, body, partition, key, reply))
            wake, self._wake_pending = not self._wake_pending, True
        if wake:
            # once the run is over, :meth:`ended` fails what is pending
            with contextlib.suppress(trio.RunFinishedError):
                self._token.run_sync_soon(self._wanted.set)
        try:
            error = reply.get()
        except BaseException:  # interrupted: a late answer must not reach the next call
            self._replies.queue = None
            raise
        if error is not None:
            raise error

    # ------------------------------------------------------------------ the Trio thread

    async def gather_forever(self) -> None:
        """Hand what was appended to the batchers, a turn's worth at a time."""
        while True:
            await self._wanted.wait()
            self._wanted = trio.Event()
            await self._hand_over()

    async def _hand_over(self) -> None:
        """Every pending publish to its batcher; waits only for a full batcher's room.
        The wake-up flag is cleared first, so a publish appended meanwhile wakes us."""
        self._wake_pending = False
        pending, producer = self._pending, self._producer
        batchers: dict[tuple[str, int | None, bytes | str | None], Batcher] = {}
        while pending:
            topic, body, partition, key, reply = pending.popleft()
            where = (topic, partition, key)
            batcher = batchers.get(where)
            if batcher is None:
                try:
                    batcher = batchers[where] = await producer.batcher_for(topic, partition, key)
                except Exception as error:
                    reply.put(error)
                    continue
            if batcher.full:
                await batcher.wait_for_room()
            slot = _ThreadSlot(reply, self)
            self._outstanding.add(slot)
            batcher.put_nowait(body, slot)

    async def drain(self) -> None:
        """Closing: no new publishes; those made are sent and answered, for at most
        :data:`DRAIN_TIMEOUT`."""
        with self._lock:
            self.closed = True
        with trio.move_on_after(DRAIN_TIMEOUT):
            await self._hand_over()
            if self._outstanding:
                await self._settled.wait()

    def ended(self) -> None:
        """Once the producer's Trio run is over (in its ending thread): every publish
        not answered fails."""
        with self._lock:
            self.closed = True
        closed = ConnectionClosedError("the producer was closed")
        for slot in list(self._outstanding):
            slot.settle(closed)
        while self._pending:
            self._pending.popleft()[-1].put(closed)
