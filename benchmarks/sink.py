"""A minimal NSQ TCP V2 server that only exists to measure ``loadgen.py``'s ceiling.

It accepts V2 connections and parses everything with trionsq's ``ServerConnection``:
IDENTIFY gets ``OK`` (or the negotiated JSON), PUB and MPUB get ``OK`` and are counted
(bodies are dropped), SUB gets ``OK``, and a subscribed connection is streamed
pre-encoded message frames as fast as its RDY window allows: at most RDY messages
unfinished, each FIN (or REQ) opening room for one more. Heartbeats are sent at the
negotiated interval; NOP, TOUCH and the rest are accepted and ignored. No topics, no
storage, no ids table: every figure loadgen reports against the sink is the ceiling
of loadgen plus this loop, not of a broker.

Plain blocking sockets and one thread per connection. It stops by itself after
``--seconds`` (default 600) or on SIGINT/SIGTERM, then prints its counters::

    .venv/bin/python benchmarks/sink.py --address 127.0.0.1:4150 --report-seconds 1
"""

from __future__ import annotations

import argparse
import os
import resource
import signal
import socket
import struct
import sys
import threading
import time
from typing import TYPE_CHECKING, Final

import attrs

from trionsq.protocol import (
    CLOSE_WAIT_FRAME,
    HEARTBEAT_FRAME,
    OK_FRAME,
    Cls,
    Fin,
    Identify,
    Mpub,
    Nop,
    ProtocolError,
    Pub,
    Rdy,
    Req,
    ServerConnection,
    ServerSettings,
    Sub,
    SubAdvanced,
    SubOrdered,
    Touch,
    encode_message_frame,
    error_frame,
    hex_id,
    response_frame,
)
from trionsq.protocol.identify import encode_identify_response

if TYPE_CHECKING:
    from collections.abc import Sequence
    from types import FrameType

RECV_SIZE: Final = 256 * 1024
FIRST_RECV_SIZE: Final = 16 * 1024
"""Idle connections keep a small buffer; one that fills it moves to RECV_SIZE."""
POOL_FRAMES: Final = 8192
"""Pre-encoded message frames streamed in a ring (ids repeat; the sink never checks)."""
MAX_STREAM: Final = 2500
"""Frames written per write at most (nsqd's max RDY)."""
IDLE_WAKE_SECONDS: Final = 1.0
"""Without heartbeats, a blocked recv still wakes this often to notice shutdown."""
SETTINGS: Final = ServerSettings(version="trionsq-sink", deflate=False, snappy=False)
_TIMEVAL: Final = struct.Struct("@ll")
SUBSCRIBES: Final = (Sub, SubOrdered, SubAdvanced)


@attrs.define
class Counters:
    """One connection's counts (plain ints: written by its thread, read by the reporter)."""

    pub: int = 0
    mpub: int = 0
    published: int = 0
    """Messages in PUB and MPUB bodies."""
    published_bytes: int = 0
    streamed: int = 0
    """Message frames sent to consumers."""
    finished: int = 0
    """FIN and REQ received."""
    heartbeats: int = 0
    errors: int = 0
    bytes_in: int = 0
    bytes_out: int = 0


class MessagePool:
    """``POOL_FRAMES`` equal message frames in one bytes object, handed out as slices."""

    def __init__(self, size: int) -> None:
        body = b"m" * size
        now = time.time_ns()
        frames = [encode_message_frame(now, 1, hex_id(i), body) for i in range(POOL_FRAMES)]
        self.frame_size = len(frames[0])
        self.view = memoryview(b"".join(frames))

    def take(self, start: int, count: int) -> list[memoryview]:
        """``count`` frames starting at frame ``start`` (wrapping around the ring)."""
        size = self.frame_size
        first = min(count, POOL_FRAMES - start)
        parts = [self.view[start * size : (start + first) * size]]
        if first < count:
            parts.append(self.view[: (count - first) * size])
        return parts


def set_recv_timeout(sock: socket.socket, seconds: float) -> None:
    """Kernel recv timeout (SO_RCVTIMEO) on a blocking socket: one syscall per recv."""
    whole = int(seconds)
    sock.setsockopt(
        socket.SOL_SOCKET, socket.SO_RCVTIMEO, _TIMEVAL.pack(whole, int((seconds - whole) * 1e6))
    )


def serve_connection(
    sock: socket.socket, counters: Counters, pool: MessagePool, stop: threading.Event
) -> None:
    """One client: parse with ServerConnection, answer, stream within RDY, heartbeat."""
    conn = ServerConnection(SETTINGS)
    sock.settimeout(None)
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    heartbeat = conn.negotiated.heartbeat_interval_ms / 1000
    set_recv_timeout(sock, min(heartbeat / 2, IDLE_WAKE_SECONDS))
    next_heartbeat = time.monotonic() + heartbeat
    subscribed = False
    rdy = in_flight = cursor = 0
    view = memoryview(bytearray(FIRST_RECV_SIZE))
    recv_into = sock.recv_into
    sendall = sock.sendall
    c = counters
    try:
        while not stop.is_set():
            out: list[bytes | memoryview] = []
            fatal = False
            try:
                n = recv_into(view)  # into a reused buffer: no allocation per read
            except BlockingIOError:
                n = -1  # SO_RCVTIMEO: time to look at heartbeats and shutdown
            if n >= 0:
                if not n:
                    return
                c.bytes_in += n
                data = view[:n].tobytes()
                if n == len(view) < RECV_SIZE:  # a busy connection: read more at a time
                    view = memoryview(bytearray(RECV_SIZE))
                for event in conn.receive_data(data):
                    if isinstance(event, Fin):
                        in_flight -= 1
                        c.finished += 1
                    elif isinstance(event, Mpub):
                        c.mpub += 1
                        c.published += len(event.bodies)
                        c.published_bytes += sum(map(len, event.bodies))
                        out.append(OK_FRAME)
                    elif isinstance(event, Pub):
                        c.pub += 1
                        c.published += 1
                        c.published_bytes += len(event.body)
                        out.append(OK_FRAME)
                    elif isinstance(event, Rdy):
                        rdy = event.count
                    elif isinstance(event, Nop | Touch):
                        pass
                    elif isinstance(event, Req):
                        in_flight -= 1
                        c.finished += 1
                    elif isinstance(event, ProtocolError):
                        c.errors += 1
                        out.append(error_frame(event))
                        fatal = fatal or event.fatal
                    elif isinstance(event, Identify):
                        response = event.response
                        if response is None:
                            out.append(OK_FRAME)
                        else:
                            out.append(response_frame(encode_identify_response(response)))
                        heartbeat = event.settings.heartbeat_interval_ms / 1000
                        wake = heartbeat / 2 if heartbeat else IDLE_WAKE_SECONDS
                        set_recv_timeout(sock, min(wake, IDLE_WAKE_SECONDS))
                        next_heartbeat = time.monotonic() + heartbeat
                    elif isinstance(event, SUBSCRIBES):
                        subscribed = True
                        out.append(OK_FRAME)
                    elif isinstance(event, Cls):
                        rdy = 0
                        out.append(CLOSE_WAIT_FRAME)
                    else:  # DPUB, INTERNAL_CREATE_TOPIC, the Youzan publishes: plain OK
                        out.append(OK_FRAME)
            if in_flight < 0:  # FINs for ids never sent: the sink does not check ids
                in_flight = 0
            if subscribed and rdy > in_flight and not fatal:
                room = min(rdy - in_flight, MAX_STREAM)
                out.extend(pool.take(cursor, room))
                cursor = (cursor + room) % POOL_FRAMES
                in_flight += room
                c.streamed += room
            if heartbeat:
                now = time.monotonic()
                if now >= next_heartbeat:
                    out.append(HEARTBEAT_FRAME)
                    c.heartbeats += 1
                    next_heartbeat = now + heartbeat
            if out:
                payload = b"".join(out)
                sendall(payload)
                c.bytes_out += len(payload)
            if fatal:
                return
    except OSError:
        return
    finally:
        sock.close()


@attrs.define
class Totals(Counters):
    """Every connection's counters added up, plus how many connections there were."""

    connections: int = 0
    open: int = 0


class Sink:
    """The listener, its connection threads and their counters."""

    def __init__(self, host: str, port: int, size: int) -> None:
        self.pool = MessagePool(size)
        self.stop = threading.Event()
        self.listener = socket.create_server((host, port), backlog=4096)
        self.listener.settimeout(0.5)
        self.counters: list[Counters] = []
        self.threads: list[threading.Thread] = []

    def totals(self) -> Totals:
        totals = Totals(
            connections=len(self.counters), open=sum(t.is_alive() for t in self.threads)
        )
        for counters in list(self.counters):
            for f in attrs.fields(Counters):
                name = f.name
                setattr(totals, name, getattr(totals, name) + getattr(counters, name))
        return totals

    def serve(self, seconds: float, report_seconds: float, max_connections: int) -> None:
        end = time.monotonic() + seconds
        next_report = time.monotonic() + report_seconds if report_seconds else float("inf")
        last = self.totals()
        last_at = time.monotonic()
        while not self.stop.is_set() and time.monotonic() < end:
            try:
                sock, _ = self.listener.accept()
            except TimeoutError:
                sock = None
            if sock is not None:
                if sum(t.is_alive() for t in self.threads) >= max_connections:
                    sock.close()
                else:
                    counters = Counters()
                    thread = threading.Thread(
                        target=serve_connection,
                        args=(sock, counters, self.pool, self.stop),
                        name=f"sink-conn-{len(self.threads)}",
                        daemon=True,
                    )
                    self.counters.append(counters)
                    self.threads.append(thread)
                    thread.start()
            now = time.monotonic()
            if now >= next_report:
                current = self.totals()
                report_rates(last, current, now - last_at)
                last, last_at = current, now
                next_report = now + report_seconds
        self.stop.set()
        self.listener.close()
        for thread in self.threads:
            thread.join(timeout=2)

    def shutdown(self, signum: int, frame: FrameType | None) -> None:
        self.stop.set()


def report_rates(before: Totals, after: Totals, seconds: float) -> None:
    published = (after.published - before.published) / seconds
    streamed = (after.streamed - before.streamed) / seconds
    finished = (after.finished - before.finished) / seconds
    commands = (after.pub - before.pub + after.mpub - before.mpub) / seconds
    print(
        f"sink: {after.open} open, published {published:,.0f} msg/s "
        f"({commands:,.0f} cmd/s), streamed {streamed:,.0f} msg/s, FIN {finished:,.0f}/s, "
        f"cpu {100 * cpu_seconds_delta() / seconds:.0f}%",
        flush=True,
    )


_last_cpu = [time.process_time()]


def cpu_seconds_delta() -> float:
    now = time.process_time()
    delta = now - _last_cpu[0]
    _last_cpu[0] = now
    return delta


def print_totals(totals: Totals, elapsed: float) -> None:
    print(
        f"sink totals after {elapsed:.1f} s: {totals.connections} connections, "
        f"{totals.pub:,} PUB, {totals.mpub:,} MPUB, {totals.published:,} messages published "
        f"({totals.published_bytes / 1e6:,.1f} MB), {totals.streamed:,} streamed, "
        f"{totals.finished:,} FIN/REQ, {totals.heartbeats:,} heartbeats, "
        f"{totals.errors} errors; {totals.bytes_in / 1e6:,.1f} MB in, "
        f"{totals.bytes_out / 1e6:,.1f} MB out",
        flush=True,
    )


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="sink.py",
        description="Minimal NSQ TCP V2 sink: OKs publishes, streams messages within RDY. "
        "For measuring loadgen.py's own ceiling.",
    )
    parser.add_argument(
        "--address",
        default="127.0.0.1:4150",
        metavar="HOST:PORT",
        help="listen address (default %(default)s; port 0 picks a free port)",
    )
    parser.add_argument(
        "--size",
        type=int,
        default=200,
        metavar="BYTES",
        help="body bytes of the streamed messages (default %(default)s)",
    )
    parser.add_argument(
        "--seconds",
        type=float,
        default=600.0,
        metavar="S",
        help="stop by itself after this long (default %(default)s)",
    )
    parser.add_argument(
        "--report-seconds",
        type=float,
        default=0.0,
        metavar="S",
        help="print rates every N seconds (default off)",
    )
    parser.add_argument(
        "--max-connections",
        type=int,
        default=5000,
        metavar="N",
        help="refuse connections beyond this many open ones (default %(default)s)",
    )
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    host, _, port = args.address.rpartition(":")
    if not port.isdigit() or args.seconds <= 0 or args.size <= 0:
        print("need --address HOST:PORT and positive --seconds and --size", file=sys.stderr)
        return 2
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft < hard:
        resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
    threading.stack_size(512 * 1024)
    sink = Sink(host or "127.0.0.1", int(port), args.size)
    signal.signal(signal.SIGTERM, sink.shutdown)
    signal.signal(signal.SIGINT, sink.shutdown)
    bound = sink.listener.getsockname()
    print(f"sink listening on {bound[0]}:{bound[1]} pid {os.getpid()}", flush=True)
    started = time.monotonic()
    sink.serve(args.seconds, args.report_seconds, args.max_connections)
    print_totals(sink.totals(), time.monotonic() - started)
    return 0


if __name__ == "__main__":
    sys.exit(main())
