"""How long a publish keeps trying while its partition moves to a new leader.

A replicated partition's leader may die or lose its lease (docs/replication.md): its
publishes then fail (a refused connection, a closed one, Youzan's
``E_FAILED_ON_NOT_LEADER`` / ``E_FAILED_ON_NOT_WRITABLE``) until the cluster has
elected another leader, which takes a lease TTL at most (2 s by default). The first
retries go at once, each after a fresh lookup; then the producer keeps looking up
and retrying with a jittered backoff (50 ms doubling to 1 s) until
:attr:`~.producer.ProducerSettings.failover_timeout` has passed since the first
failure. A retried message with a ``##idempotency_key`` is stored once.
"""

from __future__ import annotations

from typing import Final

import trio

from .backoff import Backoff

__all__ = ["FailoverRetry"]

FIRST_PAUSE: Final = 0.05
MAX_PAUSE: Final = 1.0


class FailoverRetry:
    """One request's failover window and backoff."""

    __slots__ = ("_backoff", "_deadline", "timeout")

    def __init__(self, timeout: float) -> None:
        self.timeout = timeout
        self._deadline: float | None = None
        self._backoff = Backoff(FIRST_PAUSE, MAX_PAUSE)

    async def wait(self) -> bool:
        """Pause before the next try; False once the window (from the first failure
        that waited) is over: the caller raises the last error."""
        if self._deadline is None:
            self._deadline = trio.current_time() + self.timeout
        pause = self._backoff.delay_before(self._deadline)
        if pause is None:
            return False
        await trio.sleep(pause)
        return True
