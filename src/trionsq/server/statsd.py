"""The statsd pusher: nsqd's ``--statsd-*`` options at work.

Every ``--statsd-interval`` (the first push one interval after start, as nsqd's
ticker), the broker resolves ``--statsd-address``, takes a ``/stats`` snapshot,
turns it into nsqd's lines (:mod:`trionsq.server.statsd_lines`) and sends them in
datagrams of at most ``--statsd-udp-packet-size`` bytes over a connected UDP socket.
Like nsqd, it spreads one push's datagrams evenly over the interval less one second,
so a broker with many topics does not send them in one burst.

A statsd that cannot be reached costs a log line, never the broker: the first
failure is a warning, the ones after it (until a push works again) debug lines. When
the address cannot be resolved nothing is measured, so the next push's counters
cover both intervals, as in nsqd.
"""

from __future__ import annotations

import logging
import math
import time
from typing import TYPE_CHECKING

import trio

from ..config import split_host_port
from .memory_stats import memory_statistics
from .stats import snapshot
from .statsd_lines import pack_datagrams, statsd_lines, statsd_prefix

if TYPE_CHECKING:
    from ..broker.broker import Broker
    from ..config import NsqdConfig
    from .stats import TopicSnapshot

__all__ = ["StatsdPusher"]

log = logging.getLogger("trionsq")

SPREAD_MARGIN = 1.0
"""Seconds of each interval left free after the datagrams (nsqd's ``interval - 1s``)."""


class StatsdPusher:
    """Pushes the broker's figures to statsd until cancelled."""

    def __init__(self, broker: Broker, config: NsqdConfig, *, http_port: int) -> None:
        """``http_port``: the port the HTTP listener bound (0 without one); the host
        key uses ``--broadcast-http-port`` when that is set, as nsqd does."""
        self._broker = broker
        self.address = config.statsd_address
        self.interval = config.statsd_interval
        self._packet_size = config.statsd_udp_packet_size
        self._mem_stats = config.statsd_mem_stats
        self._exclude_ephemeral = config.statsd_exclude_ephemeral
        self.prefix = statsd_prefix(
            config.statsd_prefix,
            config.broadcast_address,
            config.broadcast_http_port or http_port,
        )
        """Every key's prefix, ``%s`` already replaced by this node's host key."""
        self._previous: tuple[TopicSnapshot, ...] = ()
        self._gc_runs = 0
        self._failing = False

    async def run(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        """Push every interval; ``started`` at once (nothing is sent before one interval)."""
        task_status.started()
        if not self.interval > 0:
            log.error(
                "STATSD: --statsd-interval must be positive, got %s: not pushing", self.interval
            )
            return
        deadline = trio.current_time()
        try:
            while True:
                deadline = _next_deadline(deadline, self.interval, trio.current_time())
                await trio.sleep_until(deadline)
                await self.push(spread=max(self.interval - SPREAD_MARGIN, 0.0))
        finally:
            log.info("STATSD: closing")

    async def push(self, *, spread: float = 0.0) -> None:
        """One push: resolve, measure, send; datagrams ``spread`` seconds apart in all."""
        try:
            sock = await self._connect()
        except (OSError, ValueError) as error:
            self._failed("failed to create UDP socket to statsd(%s): %s", error)
            return
        with sock:
            log.info("STATSD: pushing stats to %s", self.address)
            datagrams = pack_datagrams(self.collect(), self._packet_size)
            step = spread / len(datagrams) if datagrams else 0.0
            start = trio.current_time()
            failure: OSError | None = None
            for index, datagram in enumerate(datagrams):
                if index and step:
                    await trio.sleep_until(start + index * step)
                try:
                    await sock.send(datagram)
                except OSError as error:  # the next datagram may well get through
                    failure = failure or error
        if failure is not None:
            self._failed("failed to send to statsd(%s): %s", failure)
        elif self._failing:
            self._failing = False
            log.info("STATSD: sending to %s works again", self.address)

    def collect(self) -> list[str]:
        """This push's lines; what they count from is remembered for the next push."""
        stats = snapshot(
            self._broker, topic=None, channel=None, include_clients=False, now=time.time()
        )
        current = stats.topics or ()
        memory = memory_statistics() if self._mem_stats else None
        lines = statsd_lines(
            current,
            self._previous,
            prefix=self.prefix,
            exclude_ephemeral=self._exclude_ephemeral,
            memory=memory,
            previous_gc_runs=self._gc_runs,
        )
        self._previous = current
        if memory is not None:
            self._gc_runs = memory.gc_total_runs
        return lines

    async def _connect(self) -> trio.socket.SocketType:
        """A UDP socket connected to the address as it resolves now.

        Raises:
            ValueError: the address is not ``<addr>:<port>``.
            OSError: it does not resolve, or no socket could be made.
        """
        host, port = split_host_port(self.address)
        found = await trio.socket.getaddrinfo(host, port, type=trio.socket.SOCK_DGRAM)
        if not found:
            raise OSError(f"no address for {self.address}")
        family, kind, proto, _, address = found[0]
        sock = trio.socket.socket(family, kind, proto)
        try:
            await sock.connect(address)
        except BaseException:
            sock.close()
            raise
        return sock

    def _failed(self, message: str, error: BaseException) -> None:
        """A warning for the first failure, debug lines while it goes on."""
        level = logging.DEBUG if self._failing else logging.WARNING
        self._failing = True
        log.log(level, "STATSD: " + message, self.address, error)


def _next_deadline(previous: float, interval: float, now: float) -> float:
    """One interval after ``previous``; ticks already missed are dropped (Go's ticker)."""
    deadline = previous + interval
    if deadline < now:
        deadline += math.ceil((now - deadline) / interval) * interval
    return deadline
