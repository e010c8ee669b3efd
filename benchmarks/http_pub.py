"""HTTP ``POST /pub`` load: keep-alive connections, one request in flight on each.

wrk is the reference (``benchmarks/README.md`` shows the command); this generator
exists for machines without it. Connections are spread over ``--processes`` OS
processes; each process drives its connections with a ``selectors`` loop, writes a
request encoded once before the clock starts, and finds the end of each answer by
its Content-Length. Prints requests/s, MB/s, latency percentiles and, with
``--broker-pid``, the broker's peak RSS::

    .venv/bin/python benchmarks/http_pub.py --address 127.0.0.1:4151 -c 16 -p 2
"""

from __future__ import annotations

import argparse
import multiprocessing
import selectors
import socket
import time
from typing import TYPE_CHECKING, Final

from loadgen import BrokerProbe  # a sibling script: benchmarks/ is on sys.path

if TYPE_CHECKING:
    from multiprocessing.queues import Queue
    from multiprocessing.synchronize import Event

HEADER_END: Final = b"\r\n\r\n"


def encode_request(host: str, topic: str, size: int) -> bytes:
    """One keep-alive POST /pub with a body of ``size`` bytes."""
    body = b"x" * size
    head = (
        f"POST /pub?topic={topic} HTTP/1.1\r\nHost: {host}\r\nContent-Length: {len(body)}\r\n\r\n"
    ).encode()
    return head + body


def answer_end(buffer: bytes | bytearray) -> int:
    """Where the first complete answer in ``buffer`` ends, or -1."""
    head_end = buffer.find(HEADER_END)
    if head_end < 0:
        return -1
    head = bytes(buffer[:head_end]).lower()
    marker = head.find(b"content-length:")
    length = int(head[marker + 15 :].split(b"\r\n", 1)[0]) if marker >= 0 else 0
    end = head_end + 4 + length
    return end if len(buffer) >= end else -1


def worker(
    address: tuple[str, int],
    connections: int,
    request: bytes,
    seconds: float,
    start: Event,
    results: Queue[tuple[int, list[int], int]],
) -> None:
    """Drive ``connections`` sockets until ``seconds`` have passed; report counts."""
    selector = selectors.DefaultSelector()
    buffers: dict[socket.socket, bytearray] = {}
    sent_at: dict[socket.socket, int] = {}
    for _ in range(connections):
        sock = socket.create_connection(address)
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        selector.register(sock, selectors.EVENT_READ, sock)
        buffers[sock] = bytearray()
    start.wait()
    deadline = time.monotonic() + seconds
    for sock in buffers:
        sent_at[sock] = time.monotonic_ns()
        sock.sendall(request)
    done = 0
    errors = 0
    latencies: list[int] = []
    while time.monotonic() < deadline:
        for key, _ in selector.select(timeout=0.5):
            ready: socket.socket = key.data
            data = ready.recv(65536)
            if not data:
                raise SystemExit("the server closed a connection")
            buffer = buffers[ready]
            buffer += data
            end = answer_end(buffer)
            if end < 0:
                continue
            now = time.monotonic_ns()
            if not buffer.startswith(b"HTTP/1.1 200"):
                errors += 1
            del buffer[:end]
            done += 1
            latencies.append(now - sent_at[ready])
            sent_at[ready] = now
            ready.sendall(request)
    results.put((done, latencies[:: max(1, len(latencies) // 100_000)], errors))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--address", default="127.0.0.1:4151")
    parser.add_argument("--topic", default="http_bench")
    parser.add_argument("-c", "--connections", type=int, default=16)
    parser.add_argument("-p", "--processes", type=int, default=2)
    parser.add_argument("--size", type=int, default=200, help="body bytes")
    parser.add_argument("--seconds", type=float, default=5.0)
    parser.add_argument("--broker-pid", type=int)
    args = parser.parse_args()
    host, _, port = args.address.rpartition(":")
    request = encode_request(args.address, args.topic, args.size)
    context = multiprocessing.get_context("spawn")
    start = context.Event()
    results: Queue[tuple[int, list[int], int]] = context.Queue()
    shares = [
        args.connections // args.processes + (i < args.connections % args.processes)
        for i in range(args.processes)
    ]
    workers = [
        context.Process(
            target=worker,
            args=((host, int(port)), share, request, args.seconds, start, results),
        )
        for share in shares
        if share
    ]
    for process in workers:
        process.start()
    time.sleep(1.0)  # every worker connects before the clock starts
    start.set()
    outcomes = [results.get(timeout=args.seconds + 30) for _ in workers]
    for process in workers:
        process.join()
    total = sum(done for done, _, _ in outcomes)
    errors = sum(errs for _, _, errs in outcomes)
    latencies = sorted(ns for _, sample, _ in outcomes for ns in sample)

    def at(fraction: float) -> float:
        return latencies[min(len(latencies) - 1, int(fraction * len(latencies)))] / 1e6

    rate = total / args.seconds
    print(
        f"http /pub {args.connections} connections, {args.size}-byte bodies: "
        f"{rate:,.0f} req/s  {rate * args.size / 1e6:.2f} MB/s payload  "
        f"latency p50 {at(0.5):.2f} ms  p99 {at(0.99):.2f} ms  max {latencies[-1] / 1e6:.2f} ms"
        f"  non-200: {errors}"
    )
    if args.broker_pid:
        print(
            f"broker peak RSS {BrokerProbe(args.broker_pid).sample().hwm_kib / 1024:.1f} MiB (VmHWM)"
        )


if __name__ == "__main__":
    main()
