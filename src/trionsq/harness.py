"""The parts of trionsq's test harness that need no pytest: a cluster of brokers and
lookupds (:class:`NsqCluster`, :func:`open_nsq_cluster`), waiting for a condition
(:func:`wait_until`), consumer-group helpers, and the wall clock that follows Trio's.
:mod:`trionsq.testing` (the pytest plugin) builds its fixtures on them and exports
them; import them from there.
"""

from __future__ import annotations

import math
import os
import time
from contextlib import asynccontextmanager
from typing import TYPE_CHECKING, Final, Generic, TypeVar

import attrs
import orjson
import trio
import trio.testing

from .addresses import normalize_address
from .client import ConsumerSettings, open_consumer
from .config import NsqdConfig
from .http.client import http_get
from .listen import open_started
from .lookupd.config import LookupdConfig
from .lookupd.registry import CHANNEL, CLIENT, TOPIC, Registration
from .lookupd.server import LookupdAddresses, serve_lookupd
from .nursery_tree import BoundAddresses, serve_nsqd
from .server.lookupd_peers import PING_INTERVAL

if TYPE_CHECKING:
    from collections.abc import AsyncIterator, Awaitable, Callable, Collection

    from .addresses import Address

__all__ = [
    "POLL_INTERVAL_AUTOJUMP",
    "REGISTRATION_TIMEOUT",
    "FollowingWallClock",
    "NsqCluster",
    "even_group",
    "group_member",
    "is_registered",
    "open_nsq_cluster",
    "wait_until",
]

REGISTRATION_TIMEOUT: Final = 60.0
"""Longest wait for brokers to (re)register: above a broker's longest reconnection
backoff (15 s) with room to spare (virtual seconds under MockClock)."""
POLL_INTERVAL: Final = (0.005, 0.5)
"""Seconds between two looks at a condition in :func:`wait_until`: the first wait,
doubled after each look up to the second."""
POLL_INTERVAL_AUTOJUMP: Final = 2.0
"""The longest wait between two looks under an autojump MockClock, where each wait
costs a jump (``autojump_threshold`` of real time) and virtual time is free."""


class FollowingWallClock:
    """Unix nanoseconds that move with Trio's clock from the real now: the wall clock
    of the fixtures' brokers (``serve_nsqd(wall_clock=)``), so that under a MockClock
    what the broker times by the wall (publish timestamps, TTLs, long DPUB and REQ
    delays kept on disk) comes due in virtual time as the rest does. Under Trio's
    real clock it is the wall clock, without its steps (NTP)."""

    def __init__(self) -> None:
        self.start_wall = time.time_ns()
        self.start_trio = trio.current_time()

    def __call__(self) -> int:
        return self.start_wall + round((trio.current_time() - self.start_trio) * 1e9)


async def wait_until(
    condition: Callable[[], bool], what: str, *, within: float = REGISTRATION_TIMEOUT
) -> None:
    """Return once ``condition()`` holds, looking again whenever the program settles.

    Between two looks it lets every task run until all are blocked (bytes already on
    a socket get handled), then sleeps (:data:`POLL_INTERVAL`, growing), which lets an
    autojump MockClock move on to the next timer (a reconnection backoff, a ping): a
    condition met at once costs milliseconds, a long wait costs few looks. Beside a
    task that never rests (a client publishing one message per round trip) not all
    tasks are ever blocked at once: it waits for that at most one interval, and looks
    again. Works under the real clock and under MockClock with autojump; a MockClock
    without autojump never moves and the wait never ends.

    Raises:
        trio.TooSlowError: naming ``what``, after ``within`` seconds.
    """
    interval, longest = POLL_INTERVAL
    clock = trio.lowlevel.current_clock()
    if isinstance(clock, trio.testing.MockClock) and clock.autojump_threshold != math.inf:
        longest = POLL_INTERVAL_AUTOJUMP
    with trio.move_on_after(within) as scope:
        while not condition():
            with trio.move_on_after(interval):
                await trio.testing.wait_all_tasks_blocked(cushion=0.005)
            if condition():
                return
            await trio.sleep(interval)
            interval = min(2 * interval, longest)
    if scope.cancelled_caught:
        raise trio.TooSlowError(f"still waiting after {within}s for {what}")


T = TypeVar("T")


async def group_member(
    lookupd: Address,
    topic: str,
    channel: str,
    name: str,
    *,
    task_status: trio.TaskStatus[trio.CancelScope] = trio.TASK_STATUS_IGNORED,
) -> None:
    """A consumer-group member that handles nothing: a ``trionsq.client`` consumer
    found through ``lookupd`` (its HTTP address), subscribed to every partition
    until cancelled. ``await nursery.start(group_member, ...)`` returns once it is
    subscribed, with a scope whose cancelling makes it leave."""
    with trio.CancelScope() as scope:
        settings = ConsumerSettings(group_member=name, lookup_interval=0.5)
        async with open_consumer(topic, channel, lookupd=lookupd, settings=settings):
            task_status.started(scope)
            await trio.sleep_forever()


async def even_group(
    lookupd: Address,
    topic: str,
    channel: str,
    members: Collection[str],
    partitions: int,
    *,
    steady: float = 0.5,
) -> dict[int, str]:
    """partition -> member, from lookupd's ``GET /group`` (``lookupd``: its HTTP
    address) once every partition of the topic has one of ``members``, the
    members' counts differ by one at most, and it stays so for ``steady`` seconds
    (a consumer group's rebalances over the brokers have settled)."""
    target = f"/group?topic={topic}&channel={channel}"
    lookupd = normalize_address(lookupd)
    while True:
        reply = await http_get(lookupd, target, connect_timeout=2, request_timeout=5)
        document = orjson.loads(reply.body) if reply.status == 200 else {}
        owners = {p: m for m, parts in document.get("assignment", {}).items() for p in parts}
        loads = [list(owners.values()).count(m) for m in members]
        if (
            set(document.get("assignment", {})) == set(members)
            and sorted(owners) == list(range(partitions))
            and max(loads) - min(loads) <= 1
        ):
            await trio.sleep(steady)
            again = await http_get(lookupd, target, connect_timeout=2, request_timeout=5)
            if again.body == reply.body:
                return owners
        await trio.sleep(0.1)


def _peer_ids(lookupd: LookupdAddresses, broker: BoundAddresses) -> list[str]:
    """The lookupd's ids of identified connections from ``broker`` (by its TCP port)."""
    config = broker.broker.config
    port = config.broadcast_tcp_port or broker.tcp[1]
    return [
        producer.peer.id
        for producer in lookupd.registry.find_producers(CLIENT, "", "")
        if producer.peer.info.tcp_port == port
        and producer.peer.info.broadcast_address == config.broadcast_address
    ]


def is_registered(lookupd: LookupdAddresses, broker: BoundAddresses) -> bool:
    """Whether ``broker`` has identified with ``lookupd`` and registered every topic
    and channel it has now. Call it from the Trio thread both run in."""
    wanted: set[Registration] = set()
    for topic, channel in broker.broker.registrations():
        wanted.add(Registration(TOPIC, topic))
        if channel is not None:
            wanted.add(Registration(CHANNEL, topic, channel))
    registry = lookupd.registry
    return any(
        wanted <= set(registry.lookup_registrations(peer_id))
        for peer_id in _peer_ids(lookupd, broker)
    )


class _Hosted(Generic[T]):
    """One broker or lookupd run in a cluster's nursery under its own cancel scope."""

    def __init__(self) -> None:
        self.scope = trio.CancelScope()
        self.finished = trio.Event()

    async def run(
        self,
        serve: Callable[[trio.TaskStatus[T]], Awaitable[None]],
        *,
        task_status: trio.TaskStatus[T] = trio.TASK_STATUS_IGNORED,
    ) -> None:
        try:
            with self.scope:
                await serve(task_status)
        finally:
            self.finished.set()

    async def stop(self) -> None:
        self.scope.cancel()
        await self.finished.wait()


def _put(items: list[T], index: int, started: T) -> None:
    """``started`` in slot ``index``: in place of the one stopped there, or a new last."""
    if index < len(items):
        items[index] = started
    else:
        items.append(started)


def _pinned(address: str, bound: tuple[str, int] | None) -> str:
    """``address`` with the port a previous run bound, so a restart keeps its ports."""
    if not address or bound is None:
        return address
    return normalize_address(bound)


class NsqCluster:
    """Brokers registered with every lookupd, run in one nursery (the ``nsq_cluster``
    fixture, or :func:`open_nsq_cluster`).

    Nodes are numbered from 0 in :attr:`brokers` and :attr:`lookupds`; a stopped node
    keeps its entry (its last addresses) and a restarted one binds the same ports, so
    clients, lookupds and brokers find it where it was. Use it from the Trio thread
    the cluster runs in.
    """

    def __init__(
        self, nursery: trio.Nursery, nsqd_config: NsqdConfig, lookupd_config: LookupdConfig
    ) -> None:
        self.nursery: Final = nursery
        self.nsqd_config: Final = nsqd_config
        """The base of every broker's configuration (see :meth:`broker_config`)."""
        self.lookupd_config: Final = lookupd_config
        self.brokers: list[BoundAddresses] = []
        """Each broker's addresses and live :class:`Broker` (``.broker``)."""
        self.lookupds: list[LookupdAddresses] = []
        """Each lookupd's addresses and live registry (``.registry``)."""
        self._broker_runs: list[_Hosted[BoundAddresses] | None] = []
        self._lookupd_runs: list[_Hosted[LookupdAddresses] | None] = []
        self._lookupd_configs: list[LookupdConfig] = []
        self._change = trio.Event()
        """Set by any lookupd's registry when it changes (see :meth:`_until`)."""
        self.wall_clock: Final = FollowingWallClock()
        """Every broker's wall clock: it follows Trio's (a MockClock's too)."""

    # ------------------------------------------------------------------ addresses

    @property
    def lookupd_tcp_addresses(self) -> list[str]:
        """``host:port`` of every lookupd's TCP listener (what brokers register with)."""
        return [normalize_address(lookupd.tcp) for lookupd in self.lookupds]

    @property
    def lookupd_http_addresses(self) -> list[str]:
        """``host:port`` of every lookupd's HTTP API (``lookupd_http_addresses`` of a
        consumer)."""
        return [normalize_address(lookupd.http) for lookupd in self.lookupds]

    @property
    def nsqd_tcp_addresses(self) -> list[str]:
        """``host:port`` of every broker's TCP listener (publishers connect here)."""
        return [normalize_address(broker.tcp) for broker in self.brokers]

    def broker_running(self, index: int) -> bool:
        """Whether broker ``index`` runs (it was not stopped, or was started again)."""
        return self._broker_runs[index] is not None

    def lookupd_running(self, index: int) -> bool:
        """Whether lookupd ``index`` runs."""
        return self._lookupd_runs[index] is not None

    def broker_config(self, index: int) -> NsqdConfig:
        """Broker ``index``'s configuration: :attr:`nsqd_config` with every lookupd's
        TCP address, a distinct ``node_id``, ``broadcast_address`` 127.0.0.1 (where
        clients that ask a lookupd connect), PINGs every third of the lookupds'
        shortest ``inactive_producer_timeout`` (unless ``nsqd_config`` chose an
        interval) and, with ``persist``, its own directory ``<data_path>/nsqd<index>``;
        after a first start, the ports it bound."""
        base = self.nsqd_config
        data_path = base.data_path
        if base.persist:
            data_path = os.path.join(base.data_path or ".", f"nsqd{index}")
            os.makedirs(data_path, exist_ok=True)
        tcp, http, https = base.tcp_address, base.http_address, base.https_address
        if index < len(self.brokers):
            bound = self.brokers[index]
            tcp = _pinned(tcp, bound.tcp)
            http = _pinned(http, bound.http)
            https = _pinned(https, bound.https)
        ping = base.lookupd_ping_interval
        if ping == PING_INTERVAL and self._lookupd_configs:  # not chosen: as rare as it can be
            ping = min(c.inactive_producer_timeout for c in self._lookupd_configs) / 3
        return attrs.evolve(
            base,
            lookupd_tcp_addresses=tuple(self.lookupd_tcp_addresses),
            lookupd_ping_interval=ping,
            node_id=(base.node_id + index) % 1024,
            broadcast_address="127.0.0.1",
            data_path=data_path,
            tcp_address=tcp,
            http_address=http,
            https_address=https,
        )

    # ------------------------------------------------------------------ registration

    def registered(self, broker: int, lookupd: int) -> bool:
        """Whether broker ``broker`` has identified with lookupd ``lookupd`` and
        registered every topic and channel it has now."""
        return is_registered(self.lookupds[lookupd], self.brokers[broker])

    def listed(self, broker: int, lookupd: int) -> bool:
        """Whether lookupd ``lookupd`` holds a connection from broker ``broker``."""
        return bool(_peer_ids(self.lookupds[lookupd], self.brokers[broker]))

    def _all_registered(
        self, brokers: Collection[int] | None = None, lookupds: Collection[int] | None = None
    ) -> bool:
        """Whether each running broker of ``brokers`` has registered with each running
        lookupd of ``lookupds`` (None: all of them)."""
        return all(
            self.registered(b, k)
            for b in (range(len(self.brokers)) if brokers is None else brokers)
            if self.broker_running(b)
            for k in (range(len(self.lookupds)) if lookupds is None else lookupds)
            if self.lookupd_running(k)
        )

    async def wait_registered(self, *, within: float = REGISTRATION_TIMEOUT) -> None:
        """Return once every running broker has registered everything it has with
        every running lookupd (topics created since are included)."""
        await self._until(self._all_registered, "every broker registered", within=within)

    def _note_change(self) -> None:
        self._change.set()

    async def _until(
        self, condition: Callable[[], bool], what: str, *, within: float = REGISTRATION_TIMEOUT
    ) -> None:
        """Return once ``condition()`` holds, looking again after each change of a
        lookupd's registry: the cluster's conditions (registered, listed) can only
        become true through one, so this waits on an event instead of polling.

        Raises:
            trio.TooSlowError: naming ``what``, after ``within`` seconds.
        """
        with trio.move_on_after(within):
            while True:
                change = self._change = trio.Event()
                if condition():
                    return
                await change.wait()
        raise trio.TooSlowError(f"still waiting after {within}s for {what}")

    # ------------------------------------------------------------------ brokers

    async def start_broker(self, index: int | None = None, *, wait: bool = True) -> BoundAddresses:
        """Start broker ``index`` again (None: add a broker); with ``wait``, return once
        it is registered with every running lookupd."""
        if index is None:
            index = len(self.brokers)
            self._broker_runs.append(None)
        elif self._broker_runs[index] is not None:
            raise RuntimeError(f"broker {index} is running")
        hosted = _Hosted[BoundAddresses]()
        config = self.broker_config(index)
        addresses: BoundAddresses = await self.nursery.start(
            hosted.run,
            lambda status: serve_nsqd(config, wall_clock=self.wall_clock, task_status=status),
        )
        self._broker_runs[index] = hosted
        _put(self.brokers, index, addresses)
        if wait:
            await self._until(
                lambda: self._all_registered(brokers=[index]), f"broker {index} registered"
            )
        return addresses

    async def stop_broker(self, index: int, *, wait: bool = True) -> None:
        """Stop broker ``index`` as a killed nsqd stops (connections closed, nothing
        unregistered); with ``wait``, return once no running lookupd lists it."""
        hosted = self._broker_runs[index]
        if hosted is None:
            raise RuntimeError(f"broker {index} is not running")
        self._broker_runs[index] = None
        await hosted.stop()
        if wait:
            await self._until(
                lambda: (
                    not any(
                        self.listed(index, k)
                        for k in range(len(self.lookupds))
                        if self.lookupd_running(k)
                    )
                ),
                f"broker {index} gone from the lookupds",
            )

    async def restart_broker(self, index: int, *, wait: bool = True) -> BoundAddresses:
        """Stop then start broker ``index`` on the same ports."""
        await self.stop_broker(index, wait=wait)
        return await self.start_broker(index, wait=wait)

    # ------------------------------------------------------------------ lookupds

    async def start_lookupd(
        self, index: int | None = None, *, wait: bool = True
    ) -> LookupdAddresses:
        """Start lookupd ``index`` again on its ports (None: add one, which the running
        brokers do not know). With ``wait``, return once every running broker has
        registered with it again: brokers reconnect after their backoff (1 s, doubling
        up to 15 s), which is real time unless the test runs on an autojump MockClock."""
        if index is None:
            index = len(self.lookupds)
            self._lookupd_runs.append(None)
            self._lookupd_configs.append(self.lookupd_config)
        elif self._lookupd_runs[index] is not None:
            raise RuntimeError(f"lookupd {index} is running")
        hosted = _Hosted[LookupdAddresses]()
        config = self._lookupd_configs[index]
        addresses: LookupdAddresses = await self.nursery.start(
            hosted.run, lambda status: serve_lookupd(config, task_status=status)
        )
        self._lookupd_runs[index] = hosted
        addresses.registry.watch(self._note_change)
        self._lookupd_configs[index] = attrs.evolve(
            self._lookupd_configs[index],
            tcp_address=normalize_address(addresses.tcp),
            http_address=normalize_address(addresses.http),
        )
        _put(self.lookupds, index, addresses)
        if wait:
            await self._until(
                lambda: self._all_registered(lookupds=[index]),
                f"every broker registered with lookupd {index}",
            )
        return addresses

    async def stop_lookupd(self, index: int) -> None:
        """Stop lookupd ``index``: its registrations are gone, brokers start reconnecting."""
        hosted = self._lookupd_runs[index]
        if hosted is None:
            raise RuntimeError(f"lookupd {index} is not running")
        self._lookupd_runs[index] = None
        await hosted.stop()

    async def restart_lookupd(self, index: int, *, wait: bool = True) -> LookupdAddresses:
        """Stop then start lookupd ``index`` on the same ports (empty, as nsqlookupd
        keeps no state); with ``wait``, return once the brokers registered again."""
        await self.stop_lookupd(index)
        return await self.start_lookupd(index, wait=wait)

    async def aclose(self) -> None:
        """Stop every node (what leaving :func:`open_nsq_cluster` does)."""
        self.nursery.cancel_scope.cancel()


@asynccontextmanager
async def open_nsq_cluster(
    brokers: int = 3,
    lookupds: int = 2,
    *,
    nsqd_config: NsqdConfig | None = None,
    lookupd_config: LookupdConfig | None = None,
) -> AsyncIterator[NsqCluster]:
    """``async with open_nsq_cluster() as cluster:`` lookupds first, then brokers
    registered with all of them; everything stops when the block is left. A node
    that cannot start raises its error itself, not in an ExceptionGroup."""

    async def start(nursery: trio.Nursery) -> NsqCluster:
        cluster = NsqCluster(
            nursery,
            nsqd_config if nsqd_config is not None else NsqdConfig.loopback(),
            lookupd_config if lookupd_config is not None else LookupdConfig.loopback(),
        )
        for _ in range(lookupds):
            await cluster.start_lookupd(wait=False)
        for _ in range(brokers):
            await cluster.start_broker(wait=False)
        await cluster.wait_registered()
        return cluster

    async with open_started(start) as cluster:
        yield cluster
