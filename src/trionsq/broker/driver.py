"""What the broker needs from the task that drives a channel, and from a consumer's
connection: declared here, implemented in dispatch/ and server/.

Each channel is driven by a router task (``dispatch.router.ChannelRunner``) that
the broker starts in its nursery when the channel first gets a consumer. The
broker only wakes it, re-aims its timer, hands it consumers' outboxes and cancels
it; so it names the task by these protocols and the task tree (nursery_tree.py)
passes the implementation in. Dependencies then run one way: dispatch drives the
broker, not the other way.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Protocol

if TYPE_CHECKING:
    from collections.abc import Callable

    import trio

    from .channel import Channel
    from .consumers import Delivery

__all__ = ["ChannelDriver", "DriverFactory", "Outbox"]


class Outbox(Protocol):
    """Where a consumer's messages go: its connection's outbound buffer."""

    def push(self, deliveries: list[Delivery]) -> None:
        """Take a batch for sending; must not block (the router never awaits here)."""

    def close(self) -> None:
        """The channel is gone (deleted), or the consumer's group member was fenced:
        end the connection, as nsqd closes its clients."""

    def group_owner(self) -> None:
        """The consumer's group member now owns the partition (broker/groups.py)."""

    def topic_now_ext(self) -> None:
        """The topic was upgraded to ext: a consumer that did not IDENTIFY with
        ``extend_support`` cannot decode what comes next (spec §8.8)."""


class ChannelDriver(Protocol):
    """The running task of one channel."""

    channel: Channel
    outboxes: dict[int, Outbox]
    """client id -> outbox; the broker subscribes and unsubscribes consumers here."""
    cancel_scope: trio.CancelScope
    """Cancelling it ends the channel's tasks (channel delete)."""

    def wake(self) -> None:
        """Something changed that may let messages move. Not a checkpoint."""

    def deadline_changed(self) -> None:
        """A deadline may now be earlier (REQ with delay, TOUCH, DPUB)."""

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
        outboxes: dict[int, Outbox],
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
