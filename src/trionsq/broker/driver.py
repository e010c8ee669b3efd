"""What the broker needs from the task that drives a channel: declared here,
implemented in dispatch/ (a consumer's connection, the ``Outbox``, is declared in
``consumers.py`` and implemented in server/).

Each channel is driven by a router task (``dispatch.router.ChannelRunner``) that
the broker starts in its nursery when the channel first gets a consumer. The
broker only wakes it, re-aims its timer and cancels it (the consumers, with their
outboxes, the task finds in its channel); so it names the task by these protocols
and the task tree (nursery_tree.py) passes the implementation in. Dependencies then run one way: dispatch drives the
broker, not the other way.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Protocol

from .consumers import Outbox  # handed on: long imported from here

if TYPE_CHECKING:
    from collections.abc import Callable

    import trio

    from .channel import Channel

__all__ = ["ChannelDriver", "DriverFactory", "Outbox"]


class ChannelDriver(Protocol):
    """The running task of one channel."""

    channel: Channel
    """Its consumers (``channel.consumers``) carry their outboxes: the router reads
    them there, so subscribing is only ``channel.subscribe``."""
    cancel_scope: trio.CancelScope
    """Cancelling it ends the channel's tasks (channel delete)."""

    def wake(self) -> None:
        """Something changed that may let messages move. Not a checkpoint."""

    def deadline_changed(self) -> None:
        """A deadline may now be earlier (REQ with delay, TOUCH, DPUB)."""

    def wake_soon(self) -> None:
        """Make a routing pass within a short delay, not at once (FINs that freed
        little of a consumer's window: the room gathers into one batch)."""

    def route_now(self) -> None:
        """Route from the caller's task instead of waking the router (an ordered
        channel's FIN: the next message goes out with the FIN's other answers)."""

    async def run(self, *, task_status: trio.TaskStatus[None] = ...) -> None:
        """Drive the channel until the cancel scope is cancelled."""

    async def drained(self) -> None:
        """Return once nothing is in flight on the channel, or its tasks have ended."""


class DriverFactory(Protocol):
    """Builds the driver of a new channel (``dispatch.router.ChannelRunner``)."""

    def __call__(
        self,
        channel: Channel,
        *,
        read_outcome: Callable[[OSError | None], None] | None = None,
        changed: Callable[[], None] | None = None,
        dead_letters: Callable[[Channel], None] | None = None,
        wall_clock: Callable[[], int] = ...,
    ) -> ChannelDriver:
        """A driver for ``channel``; ``read_outcome`` hears of failed disk reads,
        ``changed`` of each pass that may have changed the channel's state,
        ``dead_letters`` of a pass after which the channel holds dead letters;
        ``wall_clock``: the broker's (DPUB times, TTLs)."""
        ...
