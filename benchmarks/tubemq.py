"""TubeMQ's face against V2 on one broker: produce and pull-consume msg/s, 200-byte
messages (issue 36: the TubeMQ paths at least 0.7x of V2's).

A fresh ``trionsq serve --in-memory`` with both TubeMQ listeners runs pinned to CPU 0;
this process drives it from CPU 1. The same work each way, one message per call:

- produce: ``--messages`` messages, sent in windows of ``--window`` calls per write
  (SendMessage calls / PUB commands), each window's replies read before the next;
- pull-consume: the same count read back from a one-partition topic in packs of
  256: GetMessage + CommitOffset (as TubeMQ's SDKs confirm) against PULL 256 + one
  FIN per message (V2's pull consumption).

Requests are encoded before the clock starts and replies are counted, not decoded
(but for the pulled packs), so the figures are the broker's. Rounds alternate
TubeMQ, V2, V2, TubeMQ ... so a drift of the machine falls on both::

    .venv/bin/python benchmarks/tubemq.py [--rounds 2] [--messages 100000]

Prints each round, the medians and the ratios (TubeMQ / V2).
"""

from __future__ import annotations

import argparse
import os
import statistics
import tempfile
import time
import urllib.request

import trio

from admin_overhead import print_peak_rss, start_broker, stop_broker, wait_for_ping
from trionsq.protocol import Fin, Pub, Pull, Sub
from trionsq.protocol.client import ClientConnection, MessageFrame, encode_commands
from trionsq.protocol.tubemq import (
    Frame,
    FrameReader,
    Method,
    Service,
    decode_reply,
    encode_request,
)
from trionsq.protocol.tubemq_formats import PartitionRef
from trionsq.protocol.tubemq_proto import broker_pb2
from trionsq.tubemq.client import TubeClient, open_client

BODY = b"x" * 200
PACK = 256
TCP, HTTP = "127.0.0.1:14370", "127.0.0.1:14371"
MASTER, BROKER = "127.0.0.1:14372", "127.0.0.1:14373"


def cpu_seconds(pid: int) -> float:
    """The broker's user + system CPU time so far (Linux /proc)."""
    with open(f"/proc/{pid}/stat") as stat:
        fields = stat.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def address(text: str) -> tuple[str, int]:
    host, port = text.rsplit(":", 1)
    return host, int(port)


def create_topic(topic: str) -> None:
    url = f"http://{HTTP}/topic/create?topic={topic}"
    with urllib.request.urlopen(urllib.request.Request(url, method="POST")) as reply:
        reply.read()


async def count_tube_frames(stream: trio.SocketStream, reader: FrameReader, count: int) -> None:
    seen = 0
    while seen < count:
        frames = reader.next_frames(count - seen)
        if not frames:
            reader.receive_data(await stream.receive_some(1 << 18))
            continue
        seen += len(frames)


async def tubemq_produce(topic: str, messages: int, window: int) -> float:
    client = await open_client(address(BROKER))
    request = TubeClient.message_request("bench-producer", topic, 0, BODY)
    batch = b"".join(
        encode_request(n, Service.BROKER_WRITE, Method.SEND_MESSAGE, request) for n in range(window)
    )
    reader = FrameReader(1 << 24)
    started = time.perf_counter()
    for _ in range(messages // window):
        await client.stream.send_all(batch)
        await count_tube_frames(client.stream, reader, window)
    elapsed = time.perf_counter() - started
    await client.aclose()
    return messages // window * window / elapsed


async def v2_produce(topic: str, messages: int, window: int) -> float:
    stream = await trio.open_tcp_stream(*address(TCP))
    await stream.send_all(b"  V2")
    batch = encode_commands([Pub(topic, BODY)] * window)
    frames = ClientConnection()
    started = time.perf_counter()
    for _ in range(messages // window):
        await stream.send_all(batch)
        seen = 0
        while seen < window:
            seen += len(frames.receive_data(await stream.receive_some(1 << 18)))
    elapsed = time.perf_counter() - started
    await stream.aclose()
    return messages // window * window / elapsed


async def tubemq_consume(topic: str, messages: int) -> float:
    master = await open_client(address(MASTER))
    broker = await open_client(address(BROKER))
    registered = await master.register_consumer("bench-consumer", "bench", [topic])
    if not registered.success:
        raise RuntimeError(registered.errMsg)
    held: list[PartitionRef] = []
    for _ in range(50):  # until the deal gives it the partition
        beat = await master.consumer_heartbeat("bench-consumer", "bench", held)
        if beat.HasField("event"):
            ref = PartitionRef(0, "", 0, topic, 0)
            joined = await broker.register_partition("bench-consumer", "bench", ref)
            if not joined.success:
                raise RuntimeError(joined.errMsg)
            held = [ref]
            break
        await trio.sleep(0.1)
    if not held:
        raise RuntimeError("no partition dealt")
    pull = encode_request(
        1,
        Service.BROKER_READ,
        Method.GET_MESSAGE,
        broker_pb2.GetMessageRequestC2B(
            clientId="bench-consumer", partitionId=0, groupName="bench", topicName=topic
        ),
    )
    commit = encode_request(
        2,
        Service.BROKER_READ,
        Method.COMMIT_OFFSET,
        broker_pb2.CommitOffsetRequestC2B(
            clientId="bench-consumer", topicName=topic, partitionId=0, groupName="bench"
        ),
    )
    reader = FrameReader(1 << 24)
    received = 0
    started = time.perf_counter()
    while received < messages:
        await broker.stream.send_all(pull)
        frames = reader.next_frames(1)
        while not frames:
            reader.receive_data(await broker.stream.receive_some(1 << 18))
            frames = reader.next_frames(1)
        frame = frames[0]
        if not isinstance(frame, Frame):
            raise RuntimeError(frame.reason)
        body = decode_reply(frame).body
        if not isinstance(body, broker_pb2.GetMessageResponseB2C):
            raise RuntimeError(f"not a pack: {body}")
        received += len(body.messages)
        await broker.stream.send_all(commit)
        await count_tube_frames(broker.stream, reader, 1)
    elapsed = time.perf_counter() - started
    await master.close_consumer("bench-consumer", "bench")
    await master.aclose()
    await broker.aclose()
    return received / elapsed


async def v2_consume(topic: str, messages: int) -> float:
    stream = await trio.open_tcp_stream(*address(TCP))
    await stream.send_all(b"  V2" + encode_commands([Sub(topic, "bench")]))
    frames = ClientConnection()
    while not frames.receive_data(await stream.receive_some(1 << 16)):
        pass  # SUB's OK
    received = 0
    started = time.perf_counter()
    while received < messages:
        await stream.send_all(encode_commands([Pull(PACK)]))
        ids: list[bytes] = []
        while len(ids) < min(PACK, messages - received):
            got = frames.receive_data(await stream.receive_some(1 << 18))
            ids.extend(frame.message.id for frame in got if isinstance(frame, MessageFrame))
        await stream.send_all(encode_commands([Fin(i) for i in ids]))
        received += len(ids)
    elapsed = time.perf_counter() - started
    await stream.aclose()
    return received / elapsed


Result = tuple[float, float, float, float]
"""produce msg/s, pull-consume msg/s, broker CPU µs per message produced, consumed."""


async def one_round(kind: str, number: int, messages: int, window: int, pid: int) -> Result:
    topic = f"{kind}{number}"
    create_topic(topic)
    cpu = cpu_seconds(pid)
    if kind == "tubemq":
        produced = await tubemq_produce(topic, messages, window)
        cpu_produce = cpu_seconds(pid) - cpu
        consumed = await tubemq_consume(topic, messages)
    else:
        produced = await v2_produce(topic, messages, window)
        cpu_produce = cpu_seconds(pid) - cpu
        consumed = await v2_consume(topic, messages)
    cpu_consume = cpu_seconds(pid) - cpu - cpu_produce
    return produced, consumed, cpu_produce / messages * 1e6, cpu_consume / messages * 1e6


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=2, help="pairs of rounds (default 2)")
    parser.add_argument("--messages", type=int, default=100_000, help="per round")
    parser.add_argument("--window", type=int, default=200, help="calls per write (default 200)")
    args = parser.parse_args()
    if hasattr(os, "sched_setaffinity") and (os.cpu_count() or 1) > 1:
        os.sched_setaffinity(0, {1})
    data = tempfile.mkdtemp(prefix="tubemq-bench-")
    flags = ["--in-memory", "--mem-queue-size", str(args.messages * 2)]
    flags += ["--tubemq-master-address", MASTER, "--tubemq-broker-address", BROKER]
    flags += ["--group-rebalance-delay", "0s"]
    broker = start_broker(TCP, HTTP, data, *flags)
    results: dict[str, list[Result]] = {"tubemq": [], "v2": []}
    try:
        wait_for_ping(HTTP)
        order = ["tubemq", "v2", "v2", "tubemq"] * args.rounds
        for number, kind in enumerate(order[: args.rounds * 2]):
            result = trio.run(one_round, kind, number, args.messages, args.window, broker.pid)
            results[kind].append(result)
            produced, consumed, cpu_p, cpu_c = result
            print(
                f"round {number + 1}: {kind:6s} produce {produced:>9,.0f} msg/s"
                f" ({cpu_p:5.1f} µs broker CPU/msg)   pull-consume {consumed:>9,.0f} msg/s"
                f" ({cpu_c:5.1f} µs/msg)",
                flush=True,
            )
        medians = {
            kind: [statistics.median(r[i] for r in rounds) for i in range(4)]
            for kind, rounds in results.items()
        }
        (tp, tc, tpc, tcc), (vp, vc, vpc, vcc) = medians["tubemq"], medians["v2"]
        print(
            f"\nproduce median       TubeMQ {tp:>9,.0f}   V2 {vp:>9,.0f}   ratio {tp / vp:.2f}"
            f"   (broker CPU/msg {tpc:.1f} vs {vpc:.1f} µs)"
        )
        print(
            f"pull-consume median  TubeMQ {tc:>9,.0f}   V2 {vc:>9,.0f}   ratio {tc / vc:.2f}"
            f"   (broker CPU/msg {tcc:.1f} vs {vcc:.1f} µs)"
        )
        print_peak_rss(broker.pid)
    finally:
        stop_broker(broker, data)


if __name__ == "__main__":
    main()
