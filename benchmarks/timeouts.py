"""How late in-flight timeouts fire: the broker's expiry timer against real time.

A consumer takes messages and never finishes them; each comes back (attempt 2) when
its ``msg_timeout`` runs out. Lateness is the time between the two deliveries minus
the timeout, both measured when the frame reaches the consumer, so transit cancels
out and what is left is how late the broker's expiry fired and re-routed the
message. The consumer turns output buffering off (IDENTIFY ``output_buffer_size``
-1), or the flush timer would add up to 250 ms to each delivery. Messages are published one at a time, spread over ``--spread`` seconds, so
that each deadline is its own event rather than one batch.

With ``--load`` a loadgen MPUB process publishes to another topic during the whole
run, which shows the timer's lateness while the broker is busy::

    .venv/bin/python benchmarks/timeouts.py --nsqd-tcp-address 127.0.0.1:4150
    .venv/bin/python benchmarks/timeouts.py --load --broker-pid $B
"""

from __future__ import annotations

import argparse
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Final

from loadgen import BrokerProbe  # a sibling script: benchmarks/ is on sys.path
from trionsq.protocol import MAGIC_V2, Fin, IdentifyRequest, Pub, Rdy, Sub
from trionsq.protocol.client import (
    ClientConnection,
    ErrorReply,
    MessageFrame,
    Response,
    encode_command,
    encode_identify,
)

LOADGEN: Final = Path(__file__).with_name("loadgen.py")
MS: Final = 1_000_000


def connect(address: tuple[str, int]) -> socket.socket:
    """A blocking socket that has sent the magic."""
    sock = socket.create_connection(address)
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    sock.sendall(MAGIC_V2)
    return sock


def publish_spread(address: tuple[str, int], topic: str, count: int, spread: float) -> None:
    """PUB ``count`` messages, evenly over ``spread`` seconds, each waiting for its OK."""
    sock = connect(address)
    codec = ClientConnection()
    step = spread / count
    start = time.monotonic()
    for index in range(count):
        delay = start + index * step - time.monotonic()
        if delay > 0:
            time.sleep(delay)
        sock.sendall(encode_command(Pub(topic, b"%d" % index)))
        frames: list[object] = []
        while not frames:
            frames = list(codec.receive_data(sock.recv(4096)))
        if not isinstance(frames[0], Response):
            raise SystemExit(f"publish failed: {frames[0]}")
    sock.close()


def measure(args: argparse.Namespace, address: tuple[str, int]) -> list[int]:
    """Lateness of every message's timeout, in nanoseconds."""
    timeout_ns = args.msg_timeout_ms * MS
    sock = connect(address)
    sock.sendall(
        encode_identify(IdentifyRequest(msg_timeout=args.msg_timeout_ms, output_buffer_size=-1))
    )
    sock.sendall(encode_command(Sub(args.topic, "timeouts")) + encode_command(Rdy(args.count)))
    codec = ClientConnection()
    publisher = threading.Thread(
        target=publish_spread, args=(address, args.topic, args.count, args.spread), daemon=True
    )
    publisher.start()
    first: dict[bytes, int] = {}
    lateness: list[int] = []
    while len(lateness) < args.count:
        data = sock.recv(65536)
        now = time.monotonic_ns()
        if not data:
            raise SystemExit("the broker closed the connection")
        fins = []
        for frame in codec.receive_data(data):
            if isinstance(frame, ErrorReply):
                raise SystemExit(f"broker error: {frame.error.text}")
            if isinstance(frame, Response) and frame.is_heartbeat:
                sock.sendall(b"NOP\n")
            if not isinstance(frame, MessageFrame):
                continue
            message = frame.message
            if message.attempts == 1:
                first[message.id] = now
            else:
                lateness.append(now - first[message.id] - timeout_ns)
                fins.append(encode_command(Fin(message.id)))
        if fins:
            sock.sendall(b"".join(fins))
    publisher.join()
    sock.close()
    return lateness


def start_load(args: argparse.Namespace) -> subprocess.Popen[bytes]:
    """A loadgen MPUB process on another topic, for lateness under load."""
    seconds = args.spread + args.msg_timeout_ms / 1000 + 3
    command = [sys.executable, str(LOADGEN), "mpub", "--nsqd-tcp-address"]
    command += [args.nsqd_tcp_address, "--topic", f"{args.topic}-load", "--seconds"]
    command += [str(int(seconds) + 1)]
    return subprocess.Popen(command, stdout=subprocess.DEVNULL)  # noqa: S603 - our own script


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--nsqd-tcp-address", default="127.0.0.1:4150")
    parser.add_argument("--topic", default="timeouts")
    parser.add_argument("--count", type=int, default=300, help="messages (≤ max-rdy-count)")
    parser.add_argument("--msg-timeout-ms", type=int, default=1000)
    parser.add_argument("--spread", type=float, default=3.0, help="seconds to publish over")
    parser.add_argument("--load", action="store_true", help="MPUB load during the run")
    parser.add_argument("--broker-pid", type=int, help="report the broker's peak RSS")
    args = parser.parse_args()
    host, _, port = args.nsqd_tcp_address.rpartition(":")
    load = start_load(args) if args.load else None
    if load is not None:
        time.sleep(1.0)  # let the load generator connect and reach steady state
    try:
        lateness = sorted(measure(args, (host, int(port))))
    finally:
        if load is not None:
            load.terminate()
            load.wait()
    count = len(lateness)

    def at(fraction: float) -> float:
        return lateness[min(count - 1, int(fraction * count))] / MS

    print(
        f"timeouts {count} x {args.msg_timeout_ms} ms{' under MPUB load' if load else ''}: "
        f"late by p50 {at(0.5):.2f} ms  p99 {at(0.99):.2f} ms  max {lateness[-1] / MS:.2f} ms"
        f"  (early: min {lateness[0] / MS:.2f} ms)"
    )
    if args.broker_pid:
        print(
            f"broker peak RSS {BrokerProbe(args.broker_pid).sample().hwm_kib / 1024:.1f} MiB (VmHWM)"
        )


if __name__ == "__main__":
    main()
