"""Many publishers, one MPUB: concurrent single publishes to one topic and
partition wait in a bounded queue while the previous batches are out (at most
``batches_out`` at once, pipelined on the connection), then leave together, up to
``max_batch`` bodies per MPUB.

A lone publish goes at once (as a PUB), so batching adds no latency when idle;
under load the batch grows with the round trip. Memory is bounded: past
``max_waiting`` queued bodies a publisher waits for room (back-pressure), never
queues more. An MPUB refused for a message's own fault (an empty or oversized body)
is sent again one message at a time, so only the bad one fails.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Awaitable, Callable
from typing import Final, Protocol

import attrs
import trio

from .errors import NsqConfigError, NsqError

__all__ = ["Batcher", "Slot"]

MESSAGE_ERRORS: Final = frozenset({"E_BAD_MESSAGE", "E_BAD_BODY"})


class Slot(Protocol):
    """Who hears how one queued body's publish ended."""

    def settle(self, error: BaseException | None) -> None:
        """Stored (None), or not: ``error``. Called once, in the Trio thread."""


class _Slot:
    """One awaiting task's publish: the outcome it waits for."""

    __slots__ = ("done", "error")

    def __init__(self) -> None:
        self.done = trio.Event()
        self.error: BaseException | None = None

    def settle(self, error: BaseException | None) -> None:
        self.error = error
        self.done.set()


@attrs.define(eq=False)
class Batcher:
    """The queue and sender task for one topic and partition."""

    _send: Callable[[tuple[bytes, ...]], Awaitable[None]]
    max_batch: int = attrs.field(kw_only=True)
    max_waiting: int = attrs.field(kw_only=True)
    batches_out: int = attrs.field(default=1, kw_only=True)
    batches: int = attrs.field(default=0, init=False)
    """MPUBs (or PUBs) sent: published / batches is the mean batch."""
    split_batches: int = attrs.field(default=0, init=False)
    """Batches refused for one message's fault and sent again one by one."""
    peak_waiting: int = attrs.field(default=0, init=False)
    """The most bodies that ever waited at once (never over ``max_waiting``)."""
    _bodies: deque[bytes] = attrs.field(factory=deque, init=False)
    _slots: deque[Slot] = attrs.field(factory=deque, init=False)
    _work: trio.Event = attrs.field(factory=trio.Event, init=False)
    _room: trio.Event = attrs.field(factory=trio.Event, init=False)

    def __attrs_post_init__(self) -> None:
        if self.max_batch < 1 or self.max_waiting < self.max_batch:
            raise NsqConfigError("need 1 <= max_batch <= max_waiting")
        if self.batches_out < 1:
            raise NsqConfigError("need batches_out >= 1")

    @property
    def waiting(self) -> int:
        return len(self._bodies)

    @property
    def full(self) -> bool:
        """``max_waiting`` bodies wait: :meth:`put_nowait` must wait for room first."""
        return len(self._bodies) >= self.max_waiting

    async def wait_for_room(self) -> None:
        """Until fewer than ``max_waiting`` bodies wait."""
        while self.full:
            await self._room.wait()

    def put_nowait(self, body: bytes, slot: Slot) -> None:
        """Queue ``body``; ``slot`` hears how it went. The caller made sure it is not
        :attr:`full` (bounded memory is the point)."""
        self._bodies.append(body)
        self._slots.append(slot)
        self.peak_waiting = max(self.peak_waiting, len(self._bodies))
        self._work.set()

    async def publish(self, body: bytes) -> None:
        """Queue ``body`` and return once the broker stored it (or raise its error)."""
        await self.wait_for_room()
        slot = _Slot()
        self.put_nowait(body, slot)
        await slot.done.wait()
        if slot.error is not None:
            raise slot.error

    async def run(self) -> None:
        """Send what waits, a batch at a time and at most ``batches_out`` batches at
        once, for as long as the producer is open."""
        bodies, slots = self._bodies, self._slots
        out = trio.Semaphore(self.batches_out)
        async with trio.open_nursery() as sending:
            while True:
                await self._work.wait()
                self._work = trio.Event()
                while bodies:
                    await out.acquire()
                    count = min(len(bodies), self.max_batch)
                    batch = tuple(bodies.popleft() for _ in range(count))
                    taken = [slots.popleft() for _ in range(count)]
                    self._room.set()
                    self._room = trio.Event()
                    sending.start_soon(self._send_then_release, batch, taken, out)

    async def _send_then_release(
        self, batch: tuple[bytes, ...], slots: list[Slot], out: trio.Semaphore
    ) -> None:
        try:
            await self._send_batch(batch, slots)
        finally:
            out.release()

    async def _send_batch(self, batch: tuple[bytes, ...], slots: list[Slot]) -> None:
        self.batches += 1
        try:
            await self._send(batch)
        except NsqError as error:
            if len(batch) > 1 and error.code in MESSAGE_ERRORS:
                self.split_batches += 1
                for body, slot in zip(batch, slots, strict=True):
                    await self._send_batch((body,), [slot])
                return
            _settle(slots, error)
        except Exception as error:
            _settle(slots, error)
        else:
            _settle(slots, None)


def _settle(slots: list[Slot], error: BaseException | None) -> None:
    for slot in slots:
        slot.settle(error)
