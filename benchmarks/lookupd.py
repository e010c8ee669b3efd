"""``GET /lookup`` latency of a running lookupd holding 1,000 registered topics.

Starts nothing: point it at a running ``trionsq lookupd`` (or any nsqlookupd). It
opens 3 TCP protocol V1 connections, one per simulated nsqd (distinct IDENTIFY
ports), registers ``--topics`` topics, each with one channel, from every one of
them (pipelined, then every ``OK`` checked), and keeps those connections open, since
a lookupd drops a producer's registrations when its connection ends. Then
``--connections`` keep-alive HTTP connections each keep one ``/lookup?topic=<random>``
in flight for ``--duration`` seconds (a ``selectors`` loop; every answer must be a
200 naming 3 producers). Prints p50/p99/max latency, requests/s and, with ``--pid``,
the lookupd's RSS::

    taskset -c 0 .venv/bin/trionsq lookupd --tcp-address 127.0.0.1:4160 \\
        --http-address 127.0.0.1:4161 --log-level warn &
    taskset -c 1 .venv/bin/python benchmarks/lookupd.py --pid $!
"""

from __future__ import annotations

import argparse
import json
import random
import selectors
import socket
import time
from pathlib import Path
from typing import Final

from trionsq.config import split_host_port
from trionsq.protocol.lookupd import (
    MAGIC_V1,
    LookupClientConnection,
    LookupIdentify,
    PeerInfo,
    Register,
    encode_lookup_command,
)

HEADER_END: Final = b"\r\n\r\n"
PRODUCERS: Final = 3


def register_producers(address: tuple[str, int], topics: int) -> list[socket.socket]:
    """3 simulated nsqd connections, each registered for every topic and its channel."""
    connections = []
    for index in range(PRODUCERS):
        sock = socket.create_connection(address)
        info = PeerInfo(
            version="1.3.0",
            tcp_port=4150 + 100 * index,
            http_port=4151 + 100 * index,
            hostname=f"bench-nsqd-{index}",
            broadcast_address=f"bench-nsqd-{index}",
        )
        commands = [LookupIdentify(info)] + [
            Register(f"topic-{n}", f"channel-{n}") for n in range(topics)
        ]
        sock.sendall(MAGIC_V1 + b"".join(encode_lookup_command(c) for c in commands))
        replies = read_replies(sock, len(commands))
        json.loads(replies[0])  # the IDENTIFY reply
        if any(reply != b"OK" for reply in replies[1:]):
            raise SystemExit(f"a REGISTER failed: {next(r for r in replies[1:] if r != b'OK')!r}")
        connections.append(sock)
    return connections


def read_replies(sock: socket.socket, count: int) -> list[bytes]:
    decoder = LookupClientConnection()
    replies: list[bytes] = []
    while len(replies) < count:
        data = sock.recv(65536)
        if not data:
            raise SystemExit("the lookupd closed a registering connection")
        replies.extend(decoder.receive_data(data))
    return replies


def answer_end(buffer: bytearray) -> int:
    """Where the first complete answer in ``buffer`` ends, or -1."""
    head_end = buffer.find(HEADER_END)
    if head_end < 0:
        return -1
    head = bytes(buffer[:head_end]).lower()
    marker = head.find(b"content-length:")
    length = int(head[marker + 15 :].split(b"\r\n", 1)[0]) if marker >= 0 else 0
    end = head_end + 4 + length
    return end if len(buffer) >= end else -1


def check_answer(answer: bytes) -> None:
    head, _, body = answer.partition(HEADER_END)
    if not head.startswith(b"HTTP/1.1 200"):
        raise SystemExit(f"unexpected answer: {answer[:200]!r}")
    if len(json.loads(body)["producers"]) != PRODUCERS:
        raise SystemExit(f"expected {PRODUCERS} producers: {body[:300]!r}")


def measure(
    address: tuple[str, int], topics: int, connections: int, duration: float, *, check: bool
) -> tuple[list[float], float]:
    """Latencies (seconds) of every /lookup answered, and the elapsed time."""
    host = f"{address[0]}:{address[1]}"
    requests = [
        f"GET /lookup?topic=topic-{n} HTTP/1.1\r\nHost: {host}\r\n\r\n".encode()
        for n in range(topics)
    ]
    chooser = random.Random(1)
    selector = selectors.DefaultSelector()
    buffers: dict[socket.socket, bytearray] = {}
    sent_at: dict[socket.socket, float] = {}
    for _ in range(connections):
        sock = socket.create_connection(address)
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        sock.setblocking(False)
        selector.register(sock, selectors.EVENT_READ)
        buffers[sock] = bytearray()
    latencies: list[float] = []
    start = time.perf_counter()
    deadline = start + duration
    for sock in buffers:
        sent_at[sock] = time.perf_counter()
        sock.send(chooser.choice(requests))
    while True:
        for key, _ in selector.select(timeout=1.0):
            ready = key.fileobj
            if not isinstance(ready, socket.socket):  # only sockets were registered
                continue
            sock = ready
            data = sock.recv(65536)
            if not data:
                raise SystemExit("the lookupd closed an HTTP connection")
            buffer = buffers[sock]
            buffer += data
            end = answer_end(buffer)
            if end < 0:
                continue
            now = time.perf_counter()
            latencies.append(now - sent_at[sock])
            if check:
                check_answer(bytes(buffer[:end]))
            del buffer[:end]
            if now < deadline:
                sent_at[sock] = time.perf_counter()
                sock.send(chooser.choice(requests))
            else:
                selector.unregister(sock)
                sock.close()
        if not selector.get_map():
            break
    return latencies, time.perf_counter() - start


def rss(pid: int) -> str:
    status = Path(f"/proc/{pid}/status").read_text()
    fields = dict(line.split(":", 1) for line in status.splitlines() if ":" in line)
    return f"RSS {fields['VmRSS'].strip()}, peak {fields['VmHWM'].strip()}"


def percentile(ordered: list[float], fraction: float) -> float:
    return ordered[min(len(ordered) - 1, int(fraction * len(ordered)))]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--tcp-address", default="127.0.0.1:4160")
    parser.add_argument("--http-address", default="127.0.0.1:4161")
    parser.add_argument("--topics", type=int, default=1000)
    parser.add_argument("-c", "--connections", type=int, default=4)
    parser.add_argument("-d", "--duration", type=float, default=10.0)
    parser.add_argument("--pid", type=int, help="the lookupd's pid, to print its RSS")
    parser.add_argument("--no-check", action="store_true", help="skip decoding each answer")
    args = parser.parse_args()
    tcp = split_host_port(args.tcp_address)
    http = split_host_port(args.http_address)
    began = time.perf_counter()
    producers = register_producers(tcp, args.topics)
    print(
        f"registered {args.topics} topics x {PRODUCERS} producers "
        f"in {time.perf_counter() - began:.2f} s"
    )
    if args.pid:
        print(f"lookupd after registration: {rss(args.pid)}")
    measure(http, args.topics, args.connections, 1.0, check=True)  # warm-up
    latencies, elapsed = measure(
        http, args.topics, args.connections, args.duration, check=not args.no_check
    )
    ordered = sorted(latencies)
    print(
        f"GET /lookup x {len(ordered)} over {args.connections} keep-alive connections: "
        f"{len(ordered) / elapsed:,.0f} req/s; latency p50 {percentile(ordered, 0.5) * 1e3:.3f} ms, "
        f"p99 {percentile(ordered, 0.99) * 1e3:.3f} ms, max {ordered[-1] * 1e3:.3f} ms"
    )
    if args.pid:
        print(f"lookupd: {rss(args.pid)}")
    for sock in producers:
        sock.close()


if __name__ == "__main__":
    main()
