"""The Trio client for code that does not run Trio: :func:`connect_producer` and
:func:`connect_consumer`.

Each blocking producer or consumer owns one background thread that calls
:func:`trio.run` and keeps the async client (:func:`~.producer.open_producer`,
:func:`~.consumer.open_consumer`) open in it; the connections, their pipelining,
reconnects and heartbeats stay the async client's, unchanged. A thread rather than a
second client keeps one implementation of the protocol, and lets any number of user
threads share the connections.

Crossing threads is what costs, so it is rare:

- single publishes from any number of threads only append to a deque and wake the
  Trio thread when no wake-up is pending; it hands them all to the async producer's
  batchers at once, so concurrent publishes leave together as MPUBs
  (:mod:`.thread_publishing`); every other publish is one
  :func:`trio.from_thread.run` (their commands share the connection's pipeline);
- delivered messages cross in batches: the Trio side takes every message a read
  brought and puts them in a :class:`queue.SimpleQueue` as one list;
- FIN, REQ and TOUCH only append to a deque in the user's thread. The first one
  appended while no flush is pending schedules one with
  :meth:`trio.lowlevel.TrioToken.run_sync_soon`, and that flush, in the Trio thread,
  sends everything appended by then, each to the connection its message came from.
  So an answer waits at most one turn of the Trio thread (never until the next
  ``get``), and a fast loop pays for one wake-up per batch, not per message. Closing
  sends what is still pending before the connections close.

Measured on a busy 2-core machine against an in-memory trionsq broker in another
process (``benchmarks/blocking_client.py``, 200-byte messages; the figures move
with the load): consuming and finishing 300,000 with ``max_in_flight=2500``,
135-153k msg/s, as fast as the async client on the same broker (99-157k), for
~4.4 us of CPU per message against its ~3.5 (0.3 us in the user's thread); MPUB
of 200 from one thread 190-290k msg/s (async 235-320k); one PUB per call 2.5-2.7k
msg/s from one thread (async, awaiting each: 3.5-4.9k) and 6-13k from 8 threads
(async, 8 tasks: 23k), as each call cost two thread wake-ups. Since single publishes
from many threads are gathered into MPUBs (:mod:`.thread_publishing`), 64 threads
publish 15-26k msg/s one per call in ``benchmarks/client.py`` (8.3-8.4k before, in
alternating runs; gnsq's 64 greenlets 11-21k in the same runs), at about 20 us of
CPU a publish, close to the cost of any blocking call between two threads. Flushing answers
only when the user's thread waits for messages (plus a timer) measured the same
as the flush scheduled by the first pending answer, which was kept as it never
holds a FIN back; queueing every answer as a callable cost ~10% more CPU than the
deque of finished messages.
"""

from __future__ import annotations

import contextlib
import logging
import queue
import threading
import time
from collections import deque
from functools import partial, wraps
from typing import TYPE_CHECKING, Concatenate, Final, Generic, NamedTuple, ParamSpec, TypeVar

import trio

from .consumer import Consumer, open_consumer
from .errors import ConnectionClosedError
from .message import MessageFields
from .producer import Producer, open_producer
from .thread_publishing import ThreadPublishes

if TYPE_CHECKING:
    from collections.abc import Awaitable, Callable
    from contextlib import AbstractAsyncContextManager
    from types import TracebackType
    from typing import Self

    from .message import ClientMessage

__all__ = [
    "BlockingConsumer",
    "BlockingMessage",
    "BlockingProducer",
    "connect_consumer",
    "connect_producer",
]

log = logging.getLogger("trionsq.client")
P = ParamSpec("P")
T = TypeVar("T")
R = TypeVar("R")
H = TypeVar("H")

_END: Final = None
"""Put in a consumer's inbox when its Trio run has ended."""


def _unwrapped(error: BaseException) -> BaseException:
    """The one error inside nested single-error groups (what a nursery wraps a
    failed start in), so the caller sees the NsqError or NsqConnectionError itself."""
    while isinstance(error, BaseExceptionGroup) and len(error.exceptions) == 1:
        error = error.exceptions[0]
    return error


class _Started(NamedTuple, Generic[T]):
    """What a hosting thread hands back once its context manager is entered."""

    hosted: T
    token: trio.lowlevel.TrioToken
    stop: trio.Event


class _Hosted(Generic[T]):
    """An async context manager kept open by a Trio run in a thread of its own.

    The constructor starts the thread and returns once the context manager is
    entered; an error entering it is raised in the caller's thread.
    """

    def __init__(self, opener: Callable[[], AbstractAsyncContextManager[T]], name: str) -> None:
        self._opener = opener
        self._failure: BaseException | None = None
        self._announced = False
        self._abandoned = False
        self._cancel: Callable[[], None] | None = None
        self._closed = False
        self._close_lock = threading.Lock()
        started: queue.SimpleQueue[_Started[T] | BaseException] = queue.SimpleQueue()
        self._thread = threading.Thread(target=self._run, args=(started,), name=name, daemon=True)
        self._thread.start()
        try:
            result = started.get()
        except BaseException:  # KeyboardInterrupt while connecting: stop trying
            self._abandon()
            raise
        if isinstance(result, BaseException):
            self._thread.join()
            raise _unwrapped(result)
        self._hosted: T = result.hosted
        self._token = result.token
        self._stop = result.stop

    @property
    def closed(self) -> bool:
        """True once :meth:`close` was called."""
        return self._closed

    def close(self) -> None:
        """Close the connections and end the thread (waits for it); idempotent."""
        with self._close_lock:
            if self._closed:
                return
            self._closed = True
        with contextlib.suppress(trio.RunFinishedError):  # else the run already ended
            self._token.run_sync_soon(self._stop.set)
        self._thread.join()

    def _abandon(self) -> None:
        """Cancel a start still under way and wait for the thread. Each side first
        publishes its own flag, then reads the other's, so one of them cancels."""
        self._abandoned = True
        cancel = self._cancel
        if cancel is not None:
            with contextlib.suppress(trio.RunFinishedError):
                cancel()
        self._thread.join()

    def __enter__(self) -> Self:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        self.close()

    # ------------------------------------------------------------------ in the Trio thread

    def _run(self, started: queue.SimpleQueue[_Started[T] | BaseException]) -> None:
        try:
            trio.run(self._main, started)
        except BaseException as error:
            if not self._announced:
                started.put(error)  # raised by the constructor
            else:
                log.error("the client's Trio thread failed", exc_info=error)
                self._failure = _unwrapped(error)
        finally:
            self._ended()

    async def _main(self, started: queue.SimpleQueue[_Started[T] | BaseException]) -> None:
        stop = trio.Event()
        token = trio.lowlevel.current_trio_token()
        with trio.CancelScope() as abandoning:
            self._cancel = partial(token.run_sync_soon, abandoning.cancel)
            if self._abandoned:
                abandoning.cancel()
            async with self._opener() as hosted:
                async with trio.open_nursery() as nursery:
                    self._serve(nursery, hosted)
                    self._announced = True
                    started.put(_Started(hosted, token, stop))
                    await stop.wait()
                    await self._draining()
                    nursery.cancel_scope.cancel()
                self._closing()

    def _serve(self, nursery: trio.Nursery, hosted: T) -> None:
        """Start what runs beside the hosted value (a consumer's message pump)."""

    async def _draining(self) -> None:
        """Closing, in the Trio thread, before what :meth:`_serve` started is cancelled."""

    def _closing(self) -> None:
        """Called in the Trio thread before the hosted value is exited."""

    def _ended(self) -> None:
        """Called in the (ending) Trio thread once the run is over, whatever ended it."""


def _in_trio_thread(
    method: Callable[Concatenate[Producer, P], Awaitable[R]],
) -> Callable[Concatenate[BlockingProducer, P], R]:
    """``method`` of the async producer as a blocking one of :class:`BlockingProducer`,
    with its signature and docs: each call runs in the Trio thread (``_call``)."""

    @wraps(method)
    def blocking(self: BlockingProducer, /, *args: P.args, **kwargs: P.kwargs) -> R:
        return self._call(partial(method, self._hosted, *args, **kwargs))

    blocking.__qualname__ = f"BlockingProducer.{method.__name__}"
    return blocking


class BlockingProducer(_Hosted[Producer]):
    """The async :class:`~.producer.Producer` for blocking code (see
    :func:`connect_producer`). Every method may be called from any thread, at once."""

    def __init__(self, opener: Callable[[], AbstractAsyncContextManager[Producer]]) -> None:
        self._gathered: ThreadPublishes | None = None
        super().__init__(opener, "trionsq-producer")

    @property
    def async_producer(self) -> Producer:
        """The async producer in the Trio thread: read its counters, call nothing."""
        return self._hosted

    # PUB mirrors Producer.publish by hand: it alone gathers single publishes from
    # threads (thread_publishing.py) instead of crossing to the Trio thread.
    def publish(
        self,
        topic: str,
        body: bytes,
        *,
        partition: int | None = None,
        key: bytes | str | None = None,
    ) -> None:
        """PUB one message (to ``partition``, or the partition ``key`` hashes to);
        concurrent calls from several threads leave together as one MPUB.

        Raises:
            NsqError: the broker refused it.
            NsqConnectionError: the broker cannot be reached, or the connection was
                lost (ConnectionClosedError: also when the producer is closed).
        """
        gathered = self._gathered
        if gathered is None:  # trace, or batching off: one call at a time
            self._call(partial(self._hosted.publish, topic, body, partition=partition, key=key))
        else:
            gathered.publish(topic, body, partition, key)

    # The other publishes are Producer's own, run in the Trio thread: one definition,
    # so their signatures and docs cannot drift apart (and stay typed: ParamSpec)
    publish_many = _in_trio_thread(Producer.publish_many)
    publish_deferred = _in_trio_thread(Producer.publish_deferred)
    publish_ext = _in_trio_thread(Producer.publish_ext)
    publish_many_ext = _in_trio_thread(Producer.publish_many_ext)
    publish_encoded = _in_trio_thread(Producer.publish_encoded)
    publish_traced = _in_trio_thread(Producer.publish_traced)

    def _serve(self, nursery: trio.Nursery, hosted: Producer) -> None:
        if hosted.settings.batching and not hosted.settings.trace:
            token = trio.lowlevel.current_trio_token()
            self._gathered = ThreadPublishes(hosted, token)
            nursery.start_soon(self._gathered.gather_forever)

    async def _draining(self) -> None:
        if self._gathered is not None:
            await self._gathered.drain()

    def _ended(self) -> None:
        if self._gathered is not None:
            self._gathered.ended()

    def _call(self, request: Callable[[], Awaitable[R]]) -> R:
        """Run ``request`` in the Trio thread; what it raises is raised here.

        Raises:
            NsqError: the broker refused it.
            ConnectionClosedError: the connection was lost twice, or the producer was
                (or is being) closed.
            OSError: the broker cannot be reached.
        """
        if self._closed:
            raise ConnectionClosedError("the producer is closed")
        try:
            return trio.from_thread.run(request, trio_token=self._token)
        except (trio.Cancelled, trio.RunFinishedError) as stopped:
            raise ConnectionClosedError("the producer was closed") from stopped


class BlockingMessage(MessageFields):
    """A delivered message; its answers may be given from any thread (each of FIN
    and REQ at most once, TOUCH as often as needed) and leave without blocking."""

    __slots__ = ("_consumer", "_delivered", "message", "responded")

    def __init__(self, delivered: ClientMessage, consumer: BlockingConsumer) -> None:
        self.message = delivered.message
        self._delivered = delivered
        self._consumer = consumer
        self.responded = False

    def finish(self) -> None:
        """FIN: done with it."""
        if self.responded:
            raise RuntimeError("this message was already finished or requeued")
        self.responded = True
        consumer = self._consumer
        consumer._finished.append(self._delivered)
        if not consumer._flush_pending:
            consumer._schedule_flush()

    def requeue(self, delay: float = 0.0, *, backoff: bool = True) -> None:
        """REQ: deliver it again after ``delay`` seconds; with ``backoff`` the
        consumer also slows down (see :meth:`.message.ClientMessage.requeue`)."""
        if self.responded:
            raise RuntimeError("this message was already finished or requeued")
        self.responded = True
        self._consumer._answer(partial(self._delivered.requeue, delay, backoff=backoff))

    def touch(self) -> None:
        """TOUCH: more time before the broker redelivers it (nothing once answered)."""
        if not self.responded:
            self._consumer._answer(self._delivered.touch)


class BlockingConsumer(_Hosted[Consumer]):
    """Messages of one topic's channel for blocking code (see :func:`connect_consumer`):
    ``for message in consumer:`` (ends when the consumer is closed) or
    :meth:`get`. Several threads may take messages at once."""

    def __init__(self, opener: Callable[[], AbstractAsyncContextManager[Consumer]]) -> None:
        self._inbox: queue.SimpleQueue[list[BlockingMessage] | None] = queue.SimpleQueue()
        self._ready: deque[BlockingMessage] = deque()
        self._taking = threading.Lock()
        self._finished: deque[ClientMessage] = deque()
        self._answers: deque[Callable[[], None]] = deque()
        """REQ and TOUCH; FIN, the most frequent, goes to ``_finished``."""
        self._flush_pending = False
        self._flush_wanted = trio.Event()
        super().__init__(opener, "trionsq-consumer")

    @property
    def async_consumer(self) -> Consumer:
        """The async consumer in the Trio thread: read its counters, call nothing."""
        return self._hosted

    def __iter__(self) -> BlockingConsumer:
        return self

    def __next__(self) -> BlockingMessage:
        try:
            return self._ready.popleft()
        except IndexError:
            pass
        message = self._wait(None)
        if message is None:
            raise StopIteration
        return message

    def get(self, timeout: float | None = None) -> BlockingMessage | None:
        """The next message; None once ``timeout`` seconds passed without one, or
        when the consumer is closed.

        Raises:
            BaseException: what ended the Trio thread, if it failed.
        """
        try:
            return self._ready.popleft()
        except IndexError:
            return self._wait(timeout)

    def close(self) -> None:
        """Send the answers still pending, close the connections and end the thread;
        every message received and not answered goes back to the broker (REQ 0: the
        async consumer's graceful stop), taken or not."""
        super().close()
        self._ready.clear()

    def _wait(self, timeout: float | None) -> BlockingMessage | None:
        """One thread at a time waits for the next batch; the others wait for it to
        share it (they find it in ``_ready``)."""
        deadline = None if timeout is None else time.monotonic() + timeout
        if not self._taking.acquire(timeout=-1 if timeout is None else max(timeout, 0.0)):
            return None
        try:
            while True:
                try:
                    return self._ready.popleft()
                except IndexError:
                    pass
                if self._closed:
                    return None
                try:
                    if deadline is None:
                        batch = self._inbox.get()
                    else:
                        batch = self._inbox.get(timeout=max(deadline - time.monotonic(), 0.0))
                except queue.Empty:
                    return None
                if batch is _END:
                    self._inbox.put(_END)  # for the next caller
                    if self._failure is not None:
                        raise self._failure
                    return None
                self._ready.extend(batch)
        finally:
            self._taking.release()

    def _answer(self, answer: Callable[[], None]) -> None:
        """Queue a REQ or TOUCH (from any thread)."""
        self._answers.append(answer)
        if not self._flush_pending:
            self._schedule_flush()

    def _schedule_flush(self) -> None:
        """Have the Trio thread send the queued answers soon, unless the consumer is
        closing (the broker redelivers what it held). The Trio thread clears the flag
        before it takes the answers, so an answer queued meanwhile is never stranded."""
        if self._closed:
            return
        self._flush_pending = True
        # once the run ended nothing can be sent any more: the broker redelivers
        with contextlib.suppress(trio.RunFinishedError):
            self._token.run_sync_soon(self._wake_flusher)

    # ------------------------------------------------------------------ in the Trio thread

    def _wake_flusher(self) -> None:
        self._flush_wanted.set()

    async def _flush_forever(self) -> None:
        """Flush when asked, in a task of its own (the answers may start tasks or
        change RDY, which a ``run_sync_soon`` callback had better not do)."""
        while True:
            await self._flush_wanted.wait()
            self._flush_wanted = trio.Event()
            self._flush()

    def _flush(self) -> None:
        """Hand every queued answer to its message (which only queues the bytes on
        the connection the message came from)."""
        self._flush_pending = False
        answers, finished = self._answers, self._finished
        while answers or finished:
            try:
                while answers:
                    answers.popleft()()
                while finished:
                    finished.popleft().finish()
            except Exception:  # pragma: no cover - a bug; the others still go
                log.exception("answering a message failed")

    def _serve(self, nursery: trio.Nursery, hosted: Consumer) -> None:
        nursery.start_soon(self._pump, hosted)
        nursery.start_soon(self._flush_forever)

    async def _pump(self, consumer: Consumer) -> None:
        """Hand the messages over in batches: every message waiting at once."""
        inbox = self._inbox
        while batch := await consumer.next_batch():  # none: the consumer is stopping
            inbox.put([BlockingMessage(message, self) for message in batch])

    def _closing(self) -> None:
        self._flush()

    def _ended(self) -> None:
        self._inbox.put(_END)


def _connector(
    opener: Callable[P, AbstractAsyncContextManager[T]],
    blocking: Callable[[Callable[[], AbstractAsyncContextManager[T]]], H],
    name: str,
    doc: str,
) -> Callable[P, H]:
    """A function that takes ``opener``'s arguments (whatever they become) and returns
    the blocking client hosting what ``opener`` opens."""

    def connect(*args: P.args, **kwargs: P.kwargs) -> H:
        return blocking(partial(opener, *args, **kwargs))

    connect.__name__ = connect.__qualname__ = name
    connect.__doc__ = doc
    return connect


connect_producer = _connector(
    open_producer,
    BlockingProducer,
    "connect_producer",
    """A :class:`BlockingProducer` over :func:`~.producer.open_producer`, which gets
    the arguments as given: ``with connect_producer("127.0.0.1:4150") as producer:``
    or ``producer = connect_producer(...)`` and later ``producer.close()``.

    Like the async producer it connects on the first publish, so an unreachable
    broker is an OSError from that publish.""",
)

connect_consumer = _connector(
    open_consumer,
    BlockingConsumer,
    "connect_consumer",
    """A :class:`BlockingConsumer` over :func:`~.consumer.open_consumer`, which gets
    the arguments as given: ``with connect_consumer("t", "c", "127.0.0.1:4150") as
    consumer: for message in consumer: ...; message.finish()``.

    Raises:
        OSError: a broker cannot be reached.
        NsqError: a SUB was refused (a bad name, an ordered topic, ...).""",
)
