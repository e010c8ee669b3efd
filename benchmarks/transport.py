"""MPUB and consume throughput over IDENTIFY's upgrades (TLS, snappy, deflate).

Against a running broker, e.g. one started with a certificate::

    taskset -c 0 .venv/bin/trionsq serve --tls-cert cert.pem --tls-key key.pem &
    taskset -c 1 .venv/bin/python benchmarks/transport.py mpub --tls --ca-file ca.pem \\
        --broker-pid $!

One connection, blocking sockets, the client's layers in Python (``ssl`` and the
project's codecs), so the generator may be the limit: compare modes on the same
machine, and plain against ``benchmarks/loadgen.py``'s figures with care. ``mpub``
keeps ``--window`` MPUBs of ``--batch`` messages in flight for ``--seconds``;
``consume`` fills a topic first (plain connection), then reads it with RDY 2500 and
FINs every message. Prints msgs/s, MB/s (bodies) and the broker's RSS (/proc).
"""

from __future__ import annotations

import argparse
import json
import socket
import ssl
import struct
import time
from typing import Final

import attrs

from trionsq.protocol import MAGIC_V2, IdentifyRequest, Mpub, Rdy, Sub
from trionsq.protocol.client import (
    ClientConnection,
    MessageFrame,
    Response,
    encode_command,
    encode_identify,
)
from trionsq.protocol.compression import (
    DeflateDecoder,
    DeflateEncoder,
    SnappyDecoder,
    SnappyEncoder,
)

_SIZE: Final = struct.Struct(">i")
_OK_FRAME: Final = b"\x00\x00\x00\x06\x00\x00\x00\x00OK"


class BenchError(RuntimeError):
    """The broker did not answer as a benchmark run needs."""


class Connection:
    """A blocking client that follows the upgrades the broker agrees to."""

    def __init__(self, address: tuple[str, int], request: IdentifyRequest, ca_file: str) -> None:
        self.sock: socket.socket | ssl.SSLSocket = socket.create_connection(address)
        self.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self.encoder: SnappyEncoder | DeflateEncoder | None = None
        self.decoder: SnappyDecoder | DeflateDecoder | None = None
        self.held = b""
        self.sock.sendall(
            MAGIC_V2 + encode_identify(attrs.evolve(request, feature_negotiation=True))
        )
        negotiated = json.loads(self._frame()[4:])
        if negotiated["tls_v1"]:
            context = ssl.create_default_context(cafile=ca_file or None)
            if not ca_file:
                context.check_hostname = False
                context.verify_mode = ssl.CERT_NONE
            self.sock = context.wrap_socket(self.sock, server_hostname=address[0])
            if self._frame() != _OK_FRAME[4:]:
                raise BenchError("no OK after the TLS handshake")
        if negotiated["snappy"]:
            self.encoder, self.decoder = SnappyEncoder(), SnappyDecoder()
        elif negotiated["deflate"]:
            level = negotiated["deflate_level"]
            self.encoder, self.decoder = DeflateEncoder(level), DeflateDecoder()
        if self.decoder is not None:
            self.held = self.decoder.decode(self.held)
            while not self.held.startswith(_OK_FRAME):
                self.held += self.receive()
            self.held = self.held[len(_OK_FRAME) :]
        self.negotiated = negotiated

    def _frame(self) -> bytes:
        while len(self.held) < 4 or len(self.held) < 4 + _SIZE.unpack_from(self.held)[0]:
            data = self.sock.recv(65536)
            if not data:
                raise BenchError("closed by the broker")
            self.held += data
        end = 4 + _SIZE.unpack_from(self.held)[0]
        frame, self.held = self.held[4:end], self.held[end:]
        return frame

    def send(self, data: bytes) -> None:
        self.sock.sendall(self.encoder.encode(data) if self.encoder is not None else data)

    def receive(self) -> bytes:
        data = self.sock.recv(262144)
        if not data:
            raise BenchError("closed by the broker")
        decoder = self.decoder
        if decoder is None:
            return data
        out = decoder.decode(data)
        while isinstance(decoder, DeflateDecoder) and decoder.pending:
            out += decoder.decode(b"")
        return out


def _rss(pid: int) -> str:
    if not pid:
        return "n/a"
    fields = {}
    with open(f"/proc/{pid}/status") as status:
        for line in status:
            key, _, value = line.partition(":")
            fields[key] = value.strip()
    return f"{fields.get('VmRSS', '?')} (peak {fields.get('VmHWM', '?')})"


def _request(args: argparse.Namespace) -> IdentifyRequest:
    return IdentifyRequest(
        tls_v1=args.tls, snappy=args.snappy, deflate=args.deflate, deflate_level=args.level
    )


def run_mpub(args: argparse.Namespace, address: tuple[str, int]) -> tuple[int, float]:
    conn = Connection(address, _request(args), args.ca_file)
    body = b"x" * args.size
    frame = encode_command(Mpub(args.topic, (body,) * args.batch))
    parser = ClientConnection()
    sent = answered = 0
    started = time.perf_counter()
    deadline = started + args.seconds
    while True:
        now = time.perf_counter()
        while sent - answered < args.window and now < deadline:
            conn.send(frame)
            sent += 1
        if answered == sent:
            break
        for reply in parser.receive_data(conn.receive()):
            if not (isinstance(reply, Response) and reply.is_ok):
                raise BenchError(f"MPUB refused: {reply}")
            answered += 1
    return answered * args.batch, time.perf_counter() - started


def run_consume(args: argparse.Namespace, address: tuple[str, int]) -> tuple[int, float]:
    filler = Connection(address, IdentifyRequest(), "")
    body = b"x" * args.size
    frame = encode_command(Mpub(args.topic, (body,) * args.batch))
    batches = max(1, args.count // args.batch)
    parser = ClientConnection()
    for _ in range(batches):
        filler.send(frame)
        parser.receive_data(filler.receive())
    total = batches * args.batch
    conn = Connection(address, _request(args), args.ca_file)
    conn.send(encode_command(Sub(args.topic, "bench")) + encode_command(Rdy(2500)))
    parser = ClientConnection()
    received = 0
    started = time.perf_counter()
    while received < total:
        fins = []
        for frame_ in parser.receive_data(conn.receive()):
            if isinstance(frame_, MessageFrame):
                fins.append(b"FIN " + frame_.message.id + b"\n")
                received += 1
        if fins:
            conn.send(b"".join(fins))
    return received, time.perf_counter() - started


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("mode", choices=["mpub", "consume"])
    parser.add_argument("--nsqd-tcp-address", default="127.0.0.1:4150")
    parser.add_argument("--topic", default="")
    parser.add_argument("--tls", action="store_true")
    parser.add_argument("--ca-file", default="", help="verify the broker (default: no check)")
    parser.add_argument("--snappy", action="store_true")
    parser.add_argument("--deflate", action="store_true")
    parser.add_argument("--level", type=int, default=6, help="deflate level")
    parser.add_argument("--size", type=int, default=200, help="body bytes")
    parser.add_argument("--batch", type=int, default=200, help="messages per MPUB")
    parser.add_argument("--window", type=int, default=4, help="MPUBs in flight")
    parser.add_argument("--seconds", type=float, default=5.0)
    parser.add_argument("--count", type=int, default=500_000, help="consume: messages")
    parser.add_argument("--broker-pid", type=int, default=0)
    args = parser.parse_args()
    host, _, port = args.nsqd_tcp_address.rpartition(":")
    address = (host, int(port))
    features = [f for f in ("tls", "snappy", "deflate") if getattr(args, f)] or ["plain"]
    args.topic = args.topic or f"bench_{args.mode}_{'_'.join(features)}_{time.time_ns()}"
    run = run_mpub if args.mode == "mpub" else run_consume
    messages, elapsed = run(args, address)
    rate = messages / elapsed
    print(
        f"{args.mode} {'+'.join(features)}: {messages} msgs in {elapsed:.2f}s: "
        f"{rate:,.0f} msgs/s, {rate * args.size / 1e6:.1f} MB/s; broker RSS {_rss(args.broker_pid)}"
    )


if __name__ == "__main__":
    main()
