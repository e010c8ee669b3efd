"""Scale-out on one machine: two trionsq brokers sharing a 4-partition topic
(replicas=1, then replicas=2) against one Go nsqd, the same clients through a lookupd
on each, in one run (issue 35).

Python serves with one core per process, so trionsq scales by processes: here two
brokers, an etcd and a trionsq lookupd (trionsq.cluster.local_cluster) against Go
nsqd 1.3 with Go nsqlookupd, each started fresh per round with its default flags
(trionsq durable, nsqd keeping 10,000 messages per queue in memory). Each client
gets its own topic (``so_trionsq``, ``so_pynsq``; 4 partitions on trionsq, created
through the lookupd with ``replicator``; plain on nsqd) and channel ``bench``,
created before anything is published. Every client process finds the brokers
through the lookupd:

- **trionsq.client**: ``open_producer(lookupd=...)`` and ``open_consumer(lookupd=...)``
  (one connection per partition leader; publishes go round the partitions).
- **pynsq**: ``Writer`` given the producers lookupd lists (it spreads publishes over
  them at random), ``Reader(lookupd_http_addresses=...)``. pynsq names no partition:
  a trionsq broker takes its publishes and SUB on the lowest partition it leads.

Workloads, each in fresh client processes (``multiprocessing`` spawn):

- ``mpub``: 4 processes, each with 2 MPUBs of 200 bodies of 200 bytes outstanding,
  for ``--seconds``; aggregate messages/s answered.
- ``pub``: 16 publishers (4 processes x 4), each its own producer (pynsq: its own
  ``Writer``), one PUB outstanding each, for ``--seconds``; aggregate round trips/s
  and p50/p99 of every round trip.
- ``consume``: 4 processes in channel ``bench`` (max in flight 2500 each), FIN every
  message, until everything both publish phases stored is read (each stops once
  idle for 1 s); aggregate messages/s from the first message to the last.

The machine is shared (2 cores here: brokers, etcd, lookupd and clients together),
so the rounds alternate nsqd and trionsq and print every round, with the servers'
CPU a message in each workload (every broker's, or nsqd's, from /proc): rates move
with what else runs, that figure much less. Go nsqd is not in the
repo: build it as benchmarks/vs_nsqd.py's docstring says (steps 1-3, ``apps/nsqd``
and ``apps/nsqlookupd``). Prints numbers; not a test::

    .venv/bin/python benchmarks/scale_out.py --nsqd ~/nsq/bin/nsqd \\
        --nsqlookupd ~/nsq/bin/nsqlookupd [--seconds 5] [--rounds 2]
"""

from __future__ import annotations

import argparse
import contextlib
import functools
import json
import multiprocessing
import os
import statistics
import subprocess
import tempfile
import time
import urllib.request
from pathlib import Path
from typing import TYPE_CHECKING, Final, TypedDict

from trionsq.cluster.etcd_process import free_port, start_etcd
from trionsq.cluster.local_cluster import LocalCluster, _wait_http

if TYPE_CHECKING:
    from collections.abc import Awaitable, Callable, Iterator, Sequence
    from multiprocessing.queues import Queue

    import nsq

BODY: Final = b"s" * 200
BATCH: Final = 200
PARTITIONS: Final = 4
PROCESSES: Final = 4
MPUB_OUTSTANDING: Final = 2
PUBLISHERS_PER_PROCESS: Final = 4
MAX_IN_FLIGHT: Final = 2500
IDLE: Final = 1.0
CLIENTS: Final = ("trionsq", "pynsq")


class Result(TypedDict, total=False):
    """What one client process measured."""

    count: int
    times: list[float]
    first: float
    last: float


class Figures(TypedDict):
    """One client's workloads on one system."""

    mpub: float
    pub: float
    pub_p50_ms: float
    pub_p99_ms: float
    consume: float
    consumed: int
    stored: int
    cpu_us: list[float]
    """The servers' CPU (every broker's, or nsqd's) a message in MPUB, PUB, consume."""


System = tuple[str, list[int]]
"""A running system: its lookupd's HTTP address, and the pids of the servers."""


def _post(url: str) -> None:
    request = urllib.request.Request(url, method="POST", data=b"")  # noqa: S310 - loopback
    urllib.request.urlopen(request, timeout=10).close()  # noqa: S310 - loopback


def _get_json(url: str) -> dict[str, object]:
    with urllib.request.urlopen(url, timeout=5) as reply:  # noqa: S310 - loopback
        answer = json.loads(reply.read())
    return answer.get("data", answer)  # type: ignore[no-any-return]


def _producers(lookupd: str, topic: str) -> list[str]:
    producers = _get_json(f"http://{lookupd}/lookup?topic={topic}")["producers"]
    assert isinstance(producers, list)  # noqa: S101 - lookupd's shape
    return [f"{p['broadcast_address']}:{p['tcp_port']}" for p in producers]


# ------------------------------------------------------------- the client processes


def trionsq_worker(
    phase: str, lookupd: str, topic: str, seconds: float, out: Queue[Result]
) -> None:
    import trio

    from trionsq.client import ProducerSettings, open_consumer, open_producer

    async def mpub() -> Result:
        count = 0
        end = time.monotonic() + seconds
        async with open_producer(lookupd=lookupd) as producer:

            async def loop() -> None:
                nonlocal count
                while time.monotonic() < end:
                    await producer.publish_many(topic, [BODY] * BATCH)
                    count += BATCH

            async with trio.open_nursery() as nursery:
                for _ in range(MPUB_OUTSTANDING):
                    nursery.start_soon(loop)
        return {"count": count}

    async def pub() -> Result:
        times: list[float] = []
        end = time.monotonic() + seconds
        settings = ProducerSettings(batching=False)

        async def publisher() -> None:
            async with open_producer(lookupd=lookupd, settings=settings) as producer:
                await producer.publish(topic, BODY)  # connected before the clock
                while time.monotonic() < end:
                    sent = time.perf_counter()
                    await producer.publish(topic, BODY)
                    times.append(time.perf_counter() - sent)

        async with trio.open_nursery() as nursery:
            for _ in range(PUBLISHERS_PER_PROCESS):
                nursery.start_soon(publisher)
        return {"times": times, "count": len(times) + PUBLISHERS_PER_PROCESS}

    async def consume() -> Result:
        count, first, last = 0, 0.0, 0.0
        async with open_consumer(
            topic, "bench", lookupd=lookupd, max_in_flight=MAX_IN_FLIGHT
        ) as consumer:
            messages = consumer.__aiter__()
            while True:
                with trio.move_on_after(IDLE if count else seconds * 4) as waited:
                    message = await messages.__anext__()
                if waited.cancelled_caught:
                    break
                message.finish()
                count += 1
                last = time.time()
                first = first or last
        return {"count": count, "first": first, "last": last}

    phases: dict[str, Callable[[], Awaitable[Result]]] = {
        "mpub": mpub,
        "pub": pub,
        "consume": consume,
    }
    out.put(trio.run(phases[phase]))


async def _pynsq_writer(lookupd: str, topic: str) -> nsq.Writer:
    """A pynsq ``Writer`` to every producer lookupd lists, connected."""
    import asyncio

    import nsq

    addresses = _producers(lookupd, topic)
    writer = nsq.Writer(addresses)
    while len(writer.conns) < len(addresses):  # noqa: ASYNC110 - pynsq has no event
        await asyncio.sleep(0.005)
    return writer


async def _pynsq_round_trips(
    lookupd: str,
    topic: str,
    seconds: float,
    outstanding: int,
    send: Callable[[nsq.Writer, Callable[[object, object], None]], None],
) -> list[float]:
    """``outstanding`` writers, one publish out on each; the round trips."""
    import asyncio

    import nsq

    writers = [await _pynsq_writer(lookupd, topic) for _ in range(outstanding)]
    end = time.monotonic() + seconds
    done: asyncio.Future[None] = asyncio.get_running_loop().create_future()
    times: list[float] = []
    running = [outstanding]

    def next_one(index: int) -> None:
        if time.monotonic() >= end:
            running[0] -= 1
            if not running[0]:
                done.set_result(None)
            return
        sent = time.perf_counter()

        def answer(conn: object, data: object) -> None:
            if isinstance(data, nsq.Error):
                if not done.done():
                    done.set_exception(RuntimeError(f"publish failed: {data}"))
                return
            times.append(time.perf_counter() - sent)
            next_one(index)

        send(writers[index], answer)

    for index in range(outstanding):
        next_one(index)
    await done
    for each in writers:
        for conn in list(each.conns.values()):
            conn.close()
    return times


def pynsq_worker(phase: str, lookupd: str, topic: str, seconds: float, out: Queue[Result]) -> None:
    import asyncio

    import nsq

    async def mpub() -> Result:
        def send(w: nsq.Writer, answer: Callable[[object, object], None]) -> None:
            w.mpub(topic, [BODY] * BATCH, callback=answer)

        return {
            "count": len(await _pynsq_round_trips(lookupd, topic, seconds, MPUB_OUTSTANDING, send))
            * BATCH
        }

    async def pub() -> Result:
        def send(w: nsq.Writer, answer: Callable[[object, object], None]) -> None:
            w.pub(topic, BODY, callback=answer)

        times = await _pynsq_round_trips(lookupd, topic, seconds, PUBLISHERS_PER_PROCESS, send)
        return {"times": times, "count": len(times)}

    async def consume() -> Result:
        state: Result = {"count": 0, "first": 0.0, "last": 0.0}

        def handler(message: object) -> bool:
            state["count"] += 1
            state["last"] = time.time()
            state["first"] = state["first"] or state["last"]
            return True

        reader = nsq.Reader(
            topic=topic,
            channel="bench",
            message_handler=handler,
            lookupd_http_addresses=[f"http://{lookupd}"],
            lookupd_poll_interval=5,
            max_in_flight=MAX_IN_FLIGHT,
        )
        started = time.time()
        while True:
            await asyncio.sleep(0.1)
            now = time.time()
            if state["count"] and now - state["last"] > IDLE:
                break
            if not state["count"] and now - started > seconds * 4:
                break
        reader.close()
        return state

    async def run() -> Result:
        return await {"mpub": mpub, "pub": pub, "consume": consume}[phase]()

    out.put(asyncio.run(run()))


def server_cpu(pids: Sequence[int]) -> float:
    """CPU seconds (user and system) the servers used so far: on a shared machine the
    figure that holds still when the rates move with the load."""
    ticks = 0
    for pid in pids:
        with open(f"/proc/{pid}/stat", encoding="ascii") as stat:
            fields = stat.read().rsplit(")", 1)[1].split()
        ticks += int(fields[11]) + int(fields[12])  # utime, stime
    return ticks / os.sysconf("SC_CLK_TCK")


def run_workers(client: str, phase: str, lookupd: str, topic: str, seconds: float) -> list[Result]:
    context = multiprocessing.get_context("spawn")
    out: Queue[Result] = context.Queue()
    target = trionsq_worker if client == "trionsq" else pynsq_worker
    workers = [
        context.Process(target=target, args=(phase, lookupd, topic, seconds, out))
        for _ in range(PROCESSES)
    ]
    for worker in workers:
        worker.start()
    results = [out.get(timeout=seconds * 8 + 60) for _ in workers]
    for worker in workers:
        worker.join()
    return results


def measure(client: str, system: System, topic: str, seconds: float) -> Figures:
    """The three workloads of one client on one system, and the servers' CPU in each."""
    lookupd, pids = system
    cpu = [server_cpu(pids)]
    mpub = run_workers(client, "mpub", lookupd, topic, seconds)
    cpu.append(server_cpu(pids))
    pub = run_workers(client, "pub", lookupd, topic, seconds)
    cpu.append(server_cpu(pids))
    stored = sum(r["count"] for r in mpub) + sum(r["count"] for r in pub)
    consume = [r for r in run_workers(client, "consume", lookupd, topic, seconds) if r["count"]]
    cpu.append(server_cpu(pids))
    published = [sum(r["count"] for r in mpub), sum(r["count"] for r in pub)]
    times = sorted(t for r in pub for t in r.get("times", []))
    consumed = sum(r["count"] for r in consume)
    span = max(r["last"] for r in consume) - min(r["first"] for r in consume) if consume else 0
    return {
        "mpub": sum(r["count"] for r in mpub) / seconds,
        "pub": len(times) / seconds,
        "pub_p50_ms": statistics.median(times) * 1e3,
        "pub_p99_ms": times[int(len(times) * 0.99)] * 1e3,
        "consume": consumed / span if span else 0.0,
        "consumed": consumed,
        "stored": stored,
        "cpu_us": [
            (after - before) * 1e6 / max(count, 1)
            for before, after, count in zip(cpu[:-1], cpu[1:], [*published, consumed], strict=True)
        ],
    }


# ------------------------------------------------------------------- the systems


@contextlib.contextmanager
def go_nsqd(directory: Path, nsqd: str, nsqlookupd: str) -> Iterator[System]:
    """Go nsqlookupd and one Go nsqd registered with it; yields the lookupd address."""
    lookup_tcp, lookup_http, tcp, http = free_port(), free_port(), free_port(), free_port()
    processes: list[subprocess.Popen[bytes]] = []
    log = open(directory / "go.log", "wb")  # noqa: SIM115 - closed below
    try:
        processes.append(
            subprocess.Popen(  # noqa: S603 - our own arguments
                [
                    nsqlookupd,
                    f"--tcp-address=127.0.0.1:{lookup_tcp}",
                    f"--http-address=127.0.0.1:{lookup_http}",
                    "--broadcast-address=127.0.0.1",
                ],
                stdout=log,
                stderr=subprocess.STDOUT,
            )
        )
        _wait_http(lookup_http, "/ping", processes[0], 30)
        processes.append(
            subprocess.Popen(  # noqa: S603 - our own arguments
                [
                    nsqd,
                    f"--tcp-address=127.0.0.1:{tcp}",
                    f"--http-address=127.0.0.1:{http}",
                    "--broadcast-address=127.0.0.1",
                    f"--data-path={directory}",
                    f"--lookupd-tcp-address=127.0.0.1:{lookup_tcp}",
                ],
                stdout=log,
                stderr=subprocess.STDOUT,
            )
        )
        _wait_http(http, "/ping", processes[1], 30)
        for client in CLIENTS:
            _post(f"http://127.0.0.1:{http}/topic/create?topic=so_{client}")
            _post(f"http://127.0.0.1:{http}/channel/create?topic=so_{client}&channel=bench")
        _until(lambda: all(_producers(f"127.0.0.1:{lookup_http}", f"so_{c}") for c in CLIENTS))
        yield f"127.0.0.1:{lookup_http}", [processes[1].pid]
    finally:
        for process in reversed(processes):
            process.terminate()
            process.wait()
        log.close()


@contextlib.contextmanager
def two_trionsq(directory: Path, replicas: int) -> Iterator[System]:
    """etcd, a trionsq lookupd and two brokers sharing each client's 4-partition topic."""
    etcd = start_etcd(directory / "etcd")
    cluster = LocalCluster(directory, etcd)
    try:
        cluster.start(2)
        lookupd = f"127.0.0.1:{cluster.lookupd_http}"
        for client in CLIENTS:
            url = (
                f"http://{lookupd}/topic/create?topic=so_{client}"
                f"&partition_num={PARTITIONS}&replicator={replicas}"
            )
            _until(functools.partial(_tried, functools.partial(_post, url)))
            _until(functools.partial(_all_led, lookupd, f"so_{client}"))
            for broker in cluster.brokers:
                _post(
                    f"http://127.0.0.1:{broker.http_port}/channel/create"
                    f"?topic=so_{client}&channel=bench"
                )
        time.sleep(1.0)  # followers connected
        yield lookupd, [b.process.pid for b in cluster.brokers if b.process is not None]
    finally:
        cluster.stop()
        etcd.stop()


def _all_led(lookupd: str, topic: str) -> bool:
    partitions = _get_json(f"http://{lookupd}/lookup?topic={topic}&access=w").get("partitions")
    return isinstance(partitions, dict) and len(partitions) == PARTITIONS


def _tried(action: Callable[[], None]) -> bool:
    try:
        action()
    except OSError:
        return False
    return True


def _until(condition: Callable[[], bool], within: float = 30) -> None:
    deadline = time.monotonic() + within
    while not condition():
        if time.monotonic() > deadline:
            raise SystemExit("the system did not settle")
        time.sleep(0.1)


# ------------------------------------------------------------------------- main


def one_round(base: Path, arguments: argparse.Namespace) -> dict[str, dict[str, Figures]]:
    systems: dict[str, Callable[[Path], contextlib.AbstractContextManager[System]]] = {
        "nsqd": lambda d: go_nsqd(d, arguments.nsqd, arguments.nsqlookupd),
        "trionsq x2 r1": lambda d: two_trionsq(d, 1),
        "trionsq x2 r2": lambda d: two_trionsq(d, 2),
    }
    results: dict[str, dict[str, Figures]] = {}
    for name, start in systems.items():
        directory = Path(tempfile.mkdtemp(prefix=name.replace(" ", "_"), dir=base))
        with start(directory) as system:
            results[name] = {
                client: measure(client, system, f"so_{client}", arguments.seconds)
                for client in CLIENTS
            }
    return results


def report(results: dict[str, dict[str, Figures]]) -> None:
    nsqd = results["nsqd"]
    for name, per_client in results.items():
        for client, r in per_client.items():
            base = nsqd[client]
            note = "" if r["consumed"] >= r["stored"] else f" (read {r['consumed']}/{r['stored']})"
            print(
                f"  {name:14} {client:8} MPUB {r['mpub']:9,.0f}/s {r['mpub'] / base['mpub']:.2f}x"
                f" | PUB x16 {r['pub']:7,.0f}/s {r['pub'] / base['pub']:.2f}x"
                f" p50 {r['pub_p50_ms']:.2f} p99 {r['pub_p99_ms']:.2f} ms"
                f" | consume {r['consume']:9,.0f}/s {r['consume'] / base['consume']:.2f}x{note}"
                " | server CPU us/msg {:.1f} {:.1f} {:.1f}".format(*r["cpu_us"]),
                flush=True,
            )


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    parser.add_argument("--nsqd", required=True, help="Go nsqd 1.3's binary")
    parser.add_argument("--nsqlookupd", required=True, help="Go nsqlookupd's binary")
    parser.add_argument("--seconds", type=float, default=5.0)
    parser.add_argument("--rounds", type=int, default=1)
    arguments = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="trionsq-scale-") as name:
        for number in range(arguments.rounds):
            print(f"round {number + 1} (ratios against nsqd with the same client)", flush=True)
            report(one_round(Path(name), arguments))


if __name__ == "__main__":
    main()
