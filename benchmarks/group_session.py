"""A consumer-group member that hangs (SIGSTOP): how long until its partitions move,
and how many messages are handled twice (issue 30, item 8).

A broker runs in this process (in memory, a topic of four partitions); two members,
each a ``trionsq.client`` consumer in its own process (``--run-member``), handle
every message by writing its body to their own file, and publishing goes on at
``--rate`` messages a second all along. Once both handle messages, the first member
is stopped with SIGSTOP; the time its partitions take to move is read from
``/stats`` (its partitions listed under the other member) and from the other's file
(its first message of them). After ``--stopped`` seconds the member gets SIGCONT and
runs on for a few seconds::

    .venv/bin/python benchmarks/group_session.py [--session 10] [--stopped 20]

Prints the time until the partitions moved, what the stopped member handled after
it resumed that the other member had handled too (the goal is none: it finds its
session over and drops what it held), and the duplicates of the stop itself
(messages it had handled whose FIN had not left when it stopped: at-least-once).
"""

from __future__ import annotations

import argparse
import os
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import attrs
import httpx
import trio

from trionsq import NsqdConfig, serve_nsqd
from trionsq.client import ConsumerSettings, open_consumer, open_producer

PARTITIONS = 4


async def run_member(address: str, name: str, out: Path, session: float) -> None:
    """A member process: handle each message by noting (time, body), then FIN."""
    settings = ConsumerSettings(group_member=name)
    if session:
        settings = attrs.evolve(settings, group_session_timeout=session)
    with out.open("a", buffering=1) as notes:
        async with open_consumer(
            "hang", "c", address, partitions=range(PARTITIONS), settings=settings
        ) as consumer:
            print("ready", flush=True)
            async for message in consumer:
                notes.write(f"{time.time()} {message.partition} {message.body.decode()}\n")
                message.finish()


def member_process(address: str, name: str, out: Path, session: float) -> subprocess.Popen[str]:
    command = [sys.executable, __file__, "--run-member", address, name, str(out), str(session)]
    member = subprocess.Popen(command, stdout=subprocess.PIPE, text=True)  # noqa: S603
    assert member.stdout is not None  # noqa: S101 - piped just above
    assert member.stdout.readline().strip() == "ready"  # noqa: S101 - its first line
    return member


def notes(path: Path) -> list[tuple[float, int, str]]:
    lines = [line.split() for line in path.read_text().splitlines()]
    return [(float(at), int(partition), body) for at, partition, body in lines]


async def owned(http: httpx.AsyncClient) -> dict[str, list[int]]:
    document = (await http.get("/stats?format=json&topic=hang")).json()
    group = document["topics"][0]["channels"][0].get("group", {})
    assignment: dict[str, list[int]] = group.get("assignment", {})
    return assignment


async def owned_by_other(http: httpx.AsyncClient) -> None:
    """Return once ``/stats`` shows every partition with the other member."""
    while True:
        if set(range(PARTITIONS)) <= set((await owned(http)).get("other", [])):
            return
        await trio.sleep(0.05)


@attrs.define
class Publisher:
    """Publishes numbered messages over the partitions until stopped."""

    address: str
    rate: float
    sent: int = 0

    async def run(self) -> None:
        async with open_producer(self.address) as producer:
            while True:
                await producer.publish("hang", b"%d" % self.sent, partition=self.sent % PARTITIONS)
                self.sent += 1
                await trio.sleep(1 / self.rate)


async def measure(args: argparse.Namespace) -> None:
    config = NsqdConfig.loopback(mem_queue_size=1_000_000)
    async with trio.open_nursery() as nursery:
        addresses = await nursery.start(serve_nsqd, config)
        addresses.broker.topic("hang", partitions=PARTITIONS)
        tcp = f"{addresses.tcp[0]}:{addresses.tcp[1]}"
        base = f"http://{addresses.http[0]}:{addresses.http[1]}"
        folder = Path(tempfile.mkdtemp(prefix="group-session-"))
        paths = {name: folder / f"{name}.txt" for name in ("stopped", "other")}
        members = {}
        for name, path in paths.items():
            members[name] = await trio.to_thread.run_sync(
                member_process, tcp, name, path, args.session
            )
        publisher = Publisher(tcp, args.rate)
        nursery.start_soon(publisher.run)
        async with httpx.AsyncClient(base_url=base) as http:
            await trio.sleep(3)  # both handle messages
            theirs = set((await owned(http))["stopped"])
            os.kill(members["stopped"].pid, signal.SIGSTOP)
            stopped_at = time.time()
            await owned_by_other(http)
            moved_at = time.time()
            await trio.sleep(max(0.0, stopped_at + args.stopped - time.time()))
            os.kill(members["stopped"].pid, signal.SIGCONT)
            resumed_at = time.time()
            await trio.sleep(5)
        nursery.cancel_scope.cancel()
    for member in members.values():
        member.terminate()
        member.wait()
    report(paths, theirs, stopped_at, moved_at, resumed_at, publisher.sent)


def report(
    paths: dict[str, Path],
    theirs: set[int],
    stopped_at: float,
    moved_at: float,
    resumed_at: float,
    sent: int,
) -> None:
    stopped, other = notes(paths["stopped"]), notes(paths["other"])
    by_other = {body for _, _, body in other}
    first_taken = min(at for at, partition, _ in other if partition in theirs and at > stopped_at)
    after = [body for at, _, body in stopped if at >= resumed_at]
    before = [body for at, _, body in stopped if at < resumed_at]
    handled = by_other | {body for _, _, body in stopped}
    print(f"stopped member owned partitions {sorted(theirs)}; {sent} messages published")
    print(f"partitions moved (/stats) {moved_at - stopped_at:.2f} s after SIGSTOP")
    print(f"first of them handled by the other {first_taken - stopped_at:.2f} s after SIGSTOP")
    print(
        f"handled after SIGCONT by the stopped member: {len(after)}, "
        f"of which the other handled too: {len(set(after) & by_other)}"
    )
    print(f"handled before the stop by both (FIN not sent in time): {len(set(before) & by_other)}")
    missing = sorted(int(body) for body in {str(i) for i in range(sent)} - handled)
    print(f"never handled: {len(missing)}, from #{missing[0] if missing else '-'} of {sent}")


def main() -> None:
    if len(sys.argv) > 1 and sys.argv[1] == "--run-member":
        address, name, out, session = sys.argv[2:6]
        trio.run(run_member, address, name, Path(out), float(session))
        return
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--session", type=float, default=0.0, help="seconds (0: the default, 10)")
    parser.add_argument("--stopped", type=float, default=20.0, help="seconds stopped (20)")
    parser.add_argument("--rate", type=float, default=200.0, help="messages/s published (200)")
    trio.run(measure, parser.parse_args())


if __name__ == "__main__":
    main()
