"""Load generator for NSQ's TCP protocol V2: PUB, MPUB, consume and idle connections.

Point it at trionsq, at any nsqd, or at ``benchmarks/sink.py`` (which measures the
generator's own ceiling)::

    .venv/bin/python benchmarks/loadgen.py mpub --nsqd-tcp-address 127.0.0.1:4150 -p 2

Each connection is its own OS process (multiprocessing, spawn context) using plain
blocking sockets. Workers connect and handshake first, then all start together on one
Event and run for ``--seconds`` or until ``--count`` messages, whichever comes first.
Every frame a worker writes is encoded once before the clock starts; replies are
parsed by a lean counting parser (``--parser lean``, the default) or by the project's
``ClientConnection`` (``--parser codec``). The parent aggregates what the workers send
back through a Queue and prints msgs/s, MB/s, round-trip percentiles, the generator's
CPU use and, with ``--broker-pid``, the broker's CPU use and memory (/proc).
``benchmarks/README.md`` explains every figure.
"""

from __future__ import annotations

import argparse
import array
import json
import math
import multiprocessing
import os
import queue
import resource
import selectors
import signal
import socket
import struct
import sys
import time
from collections import deque
from itertools import repeat
from typing import TYPE_CHECKING, Final, Protocol, TypeVar

import attrs

from trionsq.protocol import MAGIC_V2, IdentifyRequest, Mpub, MpubExt, Nop, Pub, Rdy, Sub
from trionsq.protocol.client import (
    ClientConnection,
    ErrorReply,
    MessageFrame,
    Response,
    decode_error_reply,
    encode_command,
    encode_identify,
)
from trionsq.protocol.commands import ExtMessage, SubOrdered

if TYPE_CHECKING:
    from collections.abc import Callable, Sequence
    from multiprocessing.process import BaseProcess
    from multiprocessing.queues import Queue
    from multiprocessing.synchronize import Event

RECV_SIZE: Final = 256 * 1024
"""Bytes asked of one ``recv``."""
POLL_SECONDS: Final = 0.5
"""A blocked ``recv`` wakes up this often to look at the deadline (SO_RCVTIMEO)."""
SEND_STALL_SECONDS: Final = 30
"""A ``sendall`` that makes no progress for this long ends the worker (SO_SNDTIMEO)."""
MAX_FRAME_SIZE: Final = 16 * 1024 * 1024
GRACE_SECONDS: Final = 15.0
"""How long after ``--seconds`` the parent waits for reports before stopping workers."""
MAX_SECONDS: Final = 3600.0

NOP: Final = encode_command(Nop())
OK_FRAME: Final = struct.pack(">Ii", 6, 0) + b"OK"
HEARTBEAT: Final = b"_heartbeat_"
FRAME_TYPE_RESPONSE: Final = 0
FRAME_TYPE_ERROR: Final = 1
FRAME_TYPE_MESSAGE: Final = 2
MESSAGE_OVERHEAD: Final = 30
"""Frame type (4) + timestamp (8) + attempts (2) + id (16): a frame's ``size`` minus its body."""

_FRAME_HEAD: Final = struct.Struct(">Ii")
_TIMEVAL: Final = struct.Struct("@ll")


class ServerError(Exception):
    """The server sent a fatal error frame."""


# ---------------------------------------------------------------------- messages


@attrs.frozen
class WorkerConfig:
    """Everything one worker process needs (pickled to the child)."""

    mode: str
    index: int
    host: str
    port: int
    topic: str
    channel: str
    seconds: float
    count: int
    """Messages this worker sends or receives at most (idle: unused)."""
    size: int
    batch: int
    inflight: int
    rdy: int
    parser: str
    heartbeat_ms: int
    output_buffer_size: int
    output_buffer_timeout: int
    connections: int
    """Connections this worker opens (1 except in idle mode)."""
    connect_timeout: float
    start_timeout: float
    max_samples: int
    spin_us: int
    tags: int = 0
    """mpub: publish with MPUB_EXT, tagging bodies tag0..tag<N-1> and one in N+1
    untagged, in turn (an ext topic's tag dispatch)."""
    desired_tag: str | None = None
    """consume: IDENTIFY with extend_support and this desired_tag ("" = untagged)."""
    ordered_partition: int | None = None
    """consume: SUB_ORDERED on this partition (one message in flight per partition);
    mpub: the partition to publish to."""
    ordered_window: int = 0
    """consume: IDENTIFY ``ordered_window`` (trionsq's extension: this many messages of
    the ordered partition in flight at once); 0: not sent."""
    group_member: str = ""
    """consume: IDENTIFY ``group_member`` (trionsq's consumer groups); "": not sent."""
    processes: int = 1
    topics: int = 1
    """pub: round robin over this many topics, ``<topic>-<n>`` with n zero-padded
    (names of one length, so every PUB encodes to the same size)."""
    max_msgs_per_sec: int = 0
    """consume: IDENTIFY ``max_msgs_per_sec`` (trionsq's rate limit); 0: not sent."""
    max_bytes_per_sec: int = 0
    """consume: IDENTIFY ``max_bytes_per_sec``; 0: not sent."""


@attrs.define
class Ready:
    """A worker is connected and waiting for the start signal (or could not connect)."""

    index: int
    error: str | None = None


@attrs.define
class Result:
    """What one worker did between the start signal and the end of its loop."""

    index: int
    messages: int = 0
    commands: int = 0
    """PUB or MPUB commands acknowledged with OK (publish modes)."""
    payload_bytes: int = 0
    """Message bodies published or received."""
    bytes_out: int = 0
    bytes_in: int = 0
    heartbeats: int = 0
    """Heartbeats answered with NOP."""
    non_fatal_errors: int = 0
    connections: int = 0
    lost_connections: int = 0
    started: float = 0.0
    """``time.monotonic()`` at the start signal (CLOCK_MONOTONIC is system-wide)."""
    finished: float = 0.0
    cpu_seconds: float = 0.0
    latencies_ns: bytes = b""
    """Round-trip times as an ``array('q')`` of nanoseconds (publish modes)."""
    error: str | None = None


Report = Ready | Result


# ---------------------------------------------------------------------- readers
#
# A reader owns one connection's receive buffer: ``receive(sock)`` does one
# ``recv_into`` and returns what it completed. ``recv_into`` a preallocated buffer
# matters: ``sock.recv(256 KiB)`` allocates (and for large sizes maps) a fresh buffer
# on every call, which halved the PUB round-trip rate here.


class ReplyReader(Protocol):
    """A publisher's replies (OK, any other response, or a non-fatal error) and heartbeats."""

    non_fatal: int

    def receive(self, sock: socket.socket, flags: int = 0) -> tuple[int, int, int]:
        """One read: (bytes read, 0 = EOF; replies; heartbeats). Raises on a fatal error.

        Non-fatal errors are replies too (counted in ``non_fatal``), so the window of
        outstanding commands stays in step.
        """
        ...


class MessageReader(Protocol):
    """A consumer's stream: message ids to FIN, body bytes, heartbeats."""

    non_fatal: int

    def receive(
        self, sock: socket.socket, flags: int = 0
    ) -> tuple[int, list[bytes | bytearray], int, int]:
        """One read: (bytes read, 0 = EOF; message ids; body bytes; heartbeats)."""
        ...


def _error_frame(data: bytes | bytearray) -> int:
    """Decode an error frame; raise when fatal, return 1 (to count it) when not."""
    error = decode_error_reply(bytes(data))
    if error.fatal:
        raise ServerError(error.text)
    return 1


def _bad_size(size: int) -> ServerError:
    return ServerError(f"bad frame size {size} from the server")


class RecvBuffer:
    """A preallocated receive buffer holding ``fill`` bytes from offset 0."""

    def __init__(self, size: int = RECV_SIZE) -> None:
        self.data = bytearray(size)
        self.view = memoryview(self.data)
        self.fill = 0

    def recv(self, sock: socket.socket, flags: int = 0) -> int:
        """Append one ``recv_into``; 0 means EOF."""
        n = sock.recv_into(self.view[self.fill :], 0, flags)
        self.fill += n
        return n

    def consume(self, pos: int) -> None:
        """Drop the ``pos`` parsed bytes; keep the incomplete frame after them in front.

        When that frame is larger than the buffer (a huge message), the buffer grows.
        """
        rest = self.fill - pos
        self.fill = rest
        if not rest:
            return
        if pos:
            self.data[:rest] = bytes(self.view[pos : pos + rest])
        if rest >= 4:
            need = 4 + int.from_bytes(self.data[:4], "big")
            if need > len(self.data):
                self.view.release()
                self.data.extend(bytes(need - len(self.data)))
                self.view = memoryview(self.data)


class LeanReplies:
    """Counting parser for OK replies: no object per frame, a fast path for one OK."""

    def __init__(self, buffer_size: int = 64 * 1024) -> None:
        self.non_fatal = 0
        self.buffer = RecvBuffer(buffer_size)

    def receive(self, sock: socket.socket, flags: int = 0) -> tuple[int, int, int]:
        buffer = self.buffer
        n = buffer.recv(sock, flags)
        data = buffer.data
        end = buffer.fill
        if end == 10 and data.startswith(OK_FRAME):
            buffer.fill = 0
            return n, 1, 0
        unpack = _FRAME_HEAD.unpack_from
        pos = oks = heartbeats = 0
        while end - pos >= 8:
            size, kind = unpack(data, pos)
            if not 4 <= size <= MAX_FRAME_SIZE:
                raise _bad_size(size)
            stop = pos + 4 + size
            if stop > end:
                break
            if kind == FRAME_TYPE_RESPONSE:
                if size == 15 and data[pos + 8 : stop] == HEARTBEAT:
                    heartbeats += 1
                else:
                    oks += 1
            elif kind == FRAME_TYPE_ERROR:  # a non-fatal one still answers a command
                self.non_fatal += _error_frame(data[pos + 8 : stop])
                oks += 1
            else:
                raise ServerError(f"unexpected frame type {kind} on a publishing connection")
            pos = stop
        buffer.consume(pos)
        return n, oks, heartbeats


class CodecReplies:
    """The same count through the project's ``ClientConnection`` (an object per frame)."""

    def __init__(self) -> None:
        self.non_fatal = 0
        self._conn = ClientConnection(max_frame_size=MAX_FRAME_SIZE)
        self._view = memoryview(bytearray(RECV_SIZE))

    def receive(self, sock: socket.socket, flags: int = 0) -> tuple[int, int, int]:
        n = sock.recv_into(self._view, 0, flags)
        if not n:
            return 0, 0, 0
        oks = heartbeats = 0
        for frame in self._conn.receive_data(self._view[:n]):
            if type(frame) is Response:
                if frame.is_heartbeat:
                    heartbeats += 1
                else:
                    oks += 1
            elif type(frame) is ErrorReply:
                if frame.fatal:
                    raise ServerError(frame.error.text)
                self.non_fatal += 1
                oks += 1
            else:
                raise ServerError("unexpected message frame on a publishing connection")
        return n, oks, heartbeats


class LeanMessages:
    """Counting parser for a consumer: slices each message id, builds nothing else."""

    def __init__(self) -> None:
        self.non_fatal = 0
        self.buffer = RecvBuffer()

    def receive(
        self, sock: socket.socket, flags: int = 0
    ) -> tuple[int, list[bytes | bytearray], int, int]:
        buffer = self.buffer
        n = buffer.recv(sock, flags)
        data = buffer.data
        end = buffer.fill
        ids: list[bytes | bytearray] = []
        append = ids.append
        unpack = _FRAME_HEAD.unpack_from
        pos = payload = heartbeats = 0
        while end - pos >= 8:
            size, kind = unpack(data, pos)
            if not 4 <= size <= MAX_FRAME_SIZE:
                raise _bad_size(size)
            stop = pos + 4 + size
            if stop > end:
                break
            if kind == FRAME_TYPE_MESSAGE:
                if size < MESSAGE_OVERHEAD:
                    raise ServerError(f"message frame of {size} bytes is too short")
                append(data[pos + 18 : pos + 34])
                payload += size - MESSAGE_OVERHEAD
            elif kind == FRAME_TYPE_RESPONSE:
                if data[pos + 8 : stop] == HEARTBEAT:
                    heartbeats += 1
            elif kind == FRAME_TYPE_ERROR:
                self.non_fatal += _error_frame(data[pos + 8 : stop])
            else:
                raise ServerError(f"unknown frame type {kind}")
            pos = stop
        buffer.consume(pos)
        return n, ids, payload, heartbeats


class CodecMessages:
    """The consumer's parse through ``ClientConnection`` (a Message object per message)."""

    def __init__(self) -> None:
        self.non_fatal = 0
        self._conn = ClientConnection(max_frame_size=MAX_FRAME_SIZE)
        self._view = memoryview(bytearray(RECV_SIZE))

    def receive(
        self, sock: socket.socket, flags: int = 0
    ) -> tuple[int, list[bytes | bytearray], int, int]:
        n = sock.recv_into(self._view, 0, flags)
        ids: list[bytes | bytearray] = []
        payload = heartbeats = 0
        if not n:
            return 0, ids, 0, 0
        for frame in self._conn.receive_data(self._view[:n]):
            if type(frame) is MessageFrame:
                ids.append(frame.message.id)
                payload += len(frame.message.body)
            elif type(frame) is Response:
                if frame.is_heartbeat:
                    heartbeats += 1
            elif type(frame) is ErrorReply:
                if frame.fatal:
                    raise ServerError(frame.error.text)
                self.non_fatal += 1
        return n, ids, payload, heartbeats


_T = TypeVar("_T")


def spin_receive(
    receive: Callable[[socket.socket, int], _T], sock: socket.socket, spin_ns: int
) -> _T:
    """Poll with MSG_DONTWAIT for up to ``spin_ns``, then block (``--spin-us``).

    A blocked reader's core may go idle, and waking it costs tens of microseconds on a
    virtual machine; spinning keeps it awake for the answer, as Go's scheduler does
    before it parks a goroutine.
    """
    clock = time.perf_counter_ns
    end = clock() + spin_ns
    while True:
        try:
            return receive(sock, socket.MSG_DONTWAIT)
        except BlockingIOError:
            if clock() >= end:
                return receive(sock, 0)


def reply_reader(kind: str) -> ReplyReader:
    return CodecReplies() if kind == "codec" else LeanReplies()


def message_reader(kind: str) -> MessageReader:
    return CodecMessages() if kind == "codec" else LeanMessages()


# ---------------------------------------------------------------------- connections


def raise_fd_limit() -> None:
    """Lift the soft open-files limit to the hard one (idle mode holds many sockets)."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft < hard:
        resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))


def expect_response(sock: socket.socket, codec: ClientConnection) -> Response:
    """Read until the server answers a handshake command; heartbeats get a NOP."""
    while True:
        data = sock.recv(RECV_SIZE)
        if not data:
            raise ConnectionError("the server closed the connection during the handshake")
        answer: Response | None = None
        for frame in codec.receive_data(data):
            if isinstance(frame, ErrorReply):
                raise ServerError(frame.error.text)
            if isinstance(frame, MessageFrame):
                raise ServerError("message frame before RDY")
            if frame.is_heartbeat:
                sock.sendall(NOP)
            elif answer is None:
                answer = frame
        if answer is not None:
            return answer


def connect(cfg: WorkerConfig, client_id: str) -> socket.socket:
    """Connect, send the magic and IDENTIFY, wait for its answer (OK or JSON)."""
    sock = socket.create_connection((cfg.host, cfg.port), timeout=cfg.connect_timeout)
    try:
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        youzan = cfg.desired_tag is not None
        request = IdentifyRequest(
            client_id=client_id,
            hostname=socket.gethostname(),
            user_agent="trionsq-loadgen/0.1",
            heartbeat_interval=cfg.heartbeat_ms,
            output_buffer_size=cfg.output_buffer_size,
            output_buffer_timeout=cfg.output_buffer_timeout,
            feature_negotiation=youzan or cfg.ordered_window > 0,
            extend_support=youzan,
            desired_tag=cfg.desired_tag or "",
            ordered_window=cfg.ordered_window,
            group_member=cfg.group_member,
            max_msgs_per_sec=cfg.max_msgs_per_sec,
            max_bytes_per_sec=cfg.max_bytes_per_sec,
        )
        sock.sendall(MAGIC_V2 + encode_identify(request))
        expect_response(sock, ClientConnection())
    except BaseException:
        sock.close()
        raise
    return sock


def tagged(body: bytes, count: int, tags: int) -> tuple[ExtMessage, ...]:
    """``count`` bodies whose JSON headers cycle through tag0..tag<tags-1> and none."""
    headers = [b'{"##client_dispatch_tag":"tag%d"}' % i for i in range(tags)] + [b"{}"]
    return tuple(ExtMessage(headers[i % len(headers)], body) for i in range(count))


def go_blocking(sock: socket.socket) -> None:
    """Blocking mode without Python's poll-before-every-recv, bounded by kernel timeouts.

    ``settimeout`` makes CPython poll() before each recv; SO_RCVTIMEO keeps one syscall
    per recv and still wakes the loop (BlockingIOError) to check its deadline.
    """
    sock.settimeout(None)
    whole = int(POLL_SECONDS)
    sock.setsockopt(
        socket.SOL_SOCKET,
        socket.SO_RCVTIMEO,
        _TIMEVAL.pack(whole, int((POLL_SECONDS - whole) * 1_000_000)),
    )
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_SNDTIMEO, _TIMEVAL.pack(SEND_STALL_SECONDS, 0))


# ---------------------------------------------------------------------- workers


class Worker(Protocol):
    def run(self, result: Result, deadline: float) -> None: ...

    def close(self) -> None: ...


class Publisher:
    """pub / mpub: keep ``inflight`` commands outstanding, count OKs, time each one."""

    def __init__(self, cfg: WorkerConfig) -> None:
        self.cfg = cfg
        body = b"x" * cfg.size
        self.rotation = 1
        """Distinct commands sent in turn (pub over --topics)."""
        if cfg.mode == "pub":
            commands = [encode_command(Pub(name, body)) for name in topic_names(cfg)]
            self.command = commands[0]
            self.rotation = len(commands)
            self.per_command = 1
        elif cfg.tags:
            self.command = encode_command(MpubExt(cfg.topic, tagged(body, cfg.batch, cfg.tags)))
            self.per_command = cfg.batch
        else:
            mpub = Mpub(cfg.topic, (body,) * cfg.batch, cfg.ordered_partition)
            self.command = encode_command(mpub)
            self.per_command = cfg.batch
        self.total = max(1, math.ceil(cfg.count / self.per_command))
        self.window = max(1, min(cfg.inflight, self.total))
        # every write is a slice of this one pre-encoded run of commands (the topics
        # in turn, then as many again as a write may take past the last one)
        if self.rotation > 1:
            turn = b"".join(commands)
            self.blob = memoryview(turn * (1 + math.ceil(self.window / self.rotation)))
        else:
            self.blob = memoryview(self.command * self.window)
        self.sock = connect(cfg, f"loadgen-{cfg.mode}-{cfg.index}")
        go_blocking(self.sock)

    def run(self, result: Result, deadline: float) -> None:
        sock = self.sock
        sendall = sock.sendall
        blob = self.blob
        length = len(self.command)
        total = self.total
        reader = reply_reader(self.cfg.parser)
        receive = reader.receive
        now = time.perf_counter_ns
        deadline_ns = now() + int((deadline - time.monotonic()) * 1e9)
        cap = self.cfg.max_samples
        spin_ns = self.cfg.spin_us * 1000
        latencies = array.array("q")
        record = latencies.append
        pending: deque[int] = deque()
        popleft = pending.popleft
        acked = heartbeats = bytes_in = nops = 0
        sent = self.window
        rotation = self.rotation
        at = 0  # the next command's place in the rotation
        try:
            t = now()
            sendall(blob[: sent * length])
            at = sent % rotation
            pending.extend(repeat(t, sent))
            while acked < total:
                try:
                    if spin_ns:
                        n, oks, beats = spin_receive(receive, sock, spin_ns)
                    else:
                        n, oks, beats = receive(sock)
                except BlockingIOError:
                    if now() >= deadline_ns:
                        break
                    continue
                if not n:
                    raise ConnectionError("the server closed the connection")
                bytes_in += n
                if beats:
                    heartbeats += beats
                    sendall(NOP * beats)
                    nops += beats
                if not oks:
                    continue
                t = now()
                acked += oks
                if len(latencies) < cap:
                    for _ in range(oks):
                        record(t - popleft())
                else:
                    for _ in range(oks):
                        popleft()
                if t >= deadline_ns:
                    break
                more = min(oks, total - sent)
                if more:
                    sendall(blob[at * length : (at + more) * length])
                    at = (at + more) % rotation
                    pending.extend(repeat(t, more))
                    sent += more
        finally:
            result.commands = acked - reader.non_fatal  # refused ones were answered too
            result.messages = result.commands * self.per_command
            result.payload_bytes = result.messages * self.cfg.size
            result.bytes_out = sent * length + nops * len(NOP)
            result.bytes_in = bytes_in
            result.heartbeats = heartbeats
            result.non_fatal_errors = reader.non_fatal
            result.connections = 1
            result.latencies_ns = latencies.tobytes()

    def close(self) -> None:
        self.sock.close()


def topic_names(cfg: WorkerConfig) -> list[str]:
    """The topics a publisher uses: ``--topic`` alone, or ``<topic>-<n>`` for each of
    ``--topics``, n zero-padded, starting at a different one in each worker."""
    if cfg.topics <= 1:
        return [cfg.topic]
    width = len(str(cfg.topics - 1))
    start = cfg.index * cfg.topics // max(cfg.processes, 1)
    order = [*range(start, cfg.topics), *range(start)]
    return [f"{cfg.topic}-{n:0{width}d}" for n in order]


class Consumer:
    """consume: SUB, RDY, FIN every message (one write of FINs per read)."""

    def __init__(self, cfg: WorkerConfig) -> None:
        self.cfg = cfg
        self.sock = connect(cfg, f"loadgen-consume-{cfg.index}")
        if cfg.ordered_partition is None:
            subscribe: Sub | SubOrdered = Sub(cfg.topic, cfg.channel)
        else:
            subscribe = SubOrdered(cfg.topic, cfg.channel, cfg.ordered_partition)
        self.sock.sendall(encode_command(subscribe))
        expect_response(self.sock, ClientConnection())
        self.rdy = encode_command(Rdy(cfg.rdy))
        go_blocking(self.sock)

    def run(self, result: Result, deadline: float) -> None:
        sock = self.sock
        sendall = sock.sendall
        reader = message_reader(self.cfg.parser)
        receive = reader.receive
        now = time.monotonic
        count = self.cfg.count
        spin_ns = self.cfg.spin_us * 1000
        received = payload = heartbeats = bytes_in = bytes_out = 0
        try:
            sendall(self.rdy)
            bytes_out = len(self.rdy)
            while received < count:
                try:
                    if spin_ns:
                        n, ids, body_bytes, beats = spin_receive(receive, sock, spin_ns)
                    else:
                        n, ids, body_bytes, beats = receive(sock)
                except BlockingIOError:
                    if now() >= deadline:
                        break
                    continue
                if not n:
                    raise ConnectionError("the server closed the connection")
                bytes_in += n
                if ids:
                    out = b"FIN " + b"\nFIN ".join(ids) + b"\n"
                    if beats:
                        out += NOP * beats
                    sendall(out)
                    bytes_out += len(out)
                    received += len(ids)
                    payload += body_bytes
                elif beats:
                    sendall(NOP * beats)
                    bytes_out += beats * len(NOP)
                heartbeats += beats
                if now() >= deadline:
                    break
        finally:
            result.messages = received
            result.payload_bytes = payload
            result.bytes_in = bytes_in
            result.bytes_out = bytes_out
            result.heartbeats = heartbeats
            result.non_fatal_errors = reader.non_fatal
            result.connections = 1

    def close(self) -> None:
        self.sock.close()


class IdleHolder:
    """idle: hold many identified connections, answer heartbeats, notice losses."""

    def __init__(self, cfg: WorkerConfig) -> None:
        raise_fd_limit()
        self.cfg = cfg
        self.socks: list[socket.socket] = []
        try:
            for n in range(cfg.connections):
                self.socks.append(connect(cfg, f"loadgen-idle-{cfg.index}-{n}"))
        except BaseException:
            self.close()
            raise

    def run(self, result: Result, deadline: float) -> None:
        selector = selectors.DefaultSelector()
        parsers: dict[int, tuple[socket.socket, LeanReplies]] = {}
        for sock in self.socks:
            sock.setblocking(False)
            selector.register(sock, selectors.EVENT_READ)
            parsers[sock.fileno()] = (sock, LeanReplies(4096))
        live = len(self.socks)
        heartbeats = bytes_in = 0
        try:
            while live and (left := deadline - time.monotonic()) > 0:
                for key, _ in selector.select(min(left, POLL_SECONDS)):
                    sock, parser = parsers[key.fd]
                    try:
                        n, _, beats = parser.receive(sock)
                    except BlockingIOError:
                        continue
                    except (OSError, ServerError):
                        n = 0
                    if not n:
                        selector.unregister(sock)
                        live -= 1
                        continue
                    bytes_in += n
                    if beats:
                        heartbeats += beats
                        sock.sendall(NOP * beats)
        finally:
            selector.close()
            result.connections = len(self.socks)
            result.lost_connections = len(self.socks) - live
            result.heartbeats = heartbeats
            result.bytes_in = bytes_in
            result.bytes_out = heartbeats * len(NOP)
            result.non_fatal_errors = sum(p.non_fatal for _, p in parsers.values())

    def close(self) -> None:
        for sock in self.socks:
            sock.close()


def make_worker(cfg: WorkerConfig) -> Worker:
    if cfg.mode in ("pub", "mpub"):
        return Publisher(cfg)
    if cfg.mode == "consume":
        return Consumer(cfg)
    return IdleHolder(cfg)


def describe(exc: BaseException) -> str:
    return f"{type(exc).__name__}: {exc}"


def worker_main(
    cfg: WorkerConfig,
    reports: Queue[Report],
    go: Event,
    abort: Event,
) -> None:
    """One worker process: connect, report ready, wait for the start, run, report."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # the parent handles Ctrl-C
    try:
        worker = make_worker(cfg)
    except Exception as exc:
        reports.put(Ready(cfg.index, describe(exc)))
        return
    try:
        reports.put(Ready(cfg.index))
        if not go.wait(cfg.start_timeout) or abort.is_set():
            return
        result = Result(cfg.index)
        cpu = time.process_time()
        result.started = time.monotonic()
        try:
            worker.run(result, result.started + cfg.seconds)
        except Exception as exc:
            result.error = describe(exc)
        result.finished = time.monotonic()
        result.cpu_seconds = time.process_time() - cpu
        reports.put(result)
    finally:
        worker.close()


# ---------------------------------------------------------------------- broker probe


@attrs.frozen
class BrokerSample:
    at: float
    rss_kib: int
    hwm_kib: int
    cpu_seconds: float


class BrokerProbe:
    """Reads another process's memory and CPU time from /proc (Linux)."""

    def __init__(self, pid: int) -> None:
        self.pid = pid
        self.peak_rss_kib = 0
        self._ticks = os.sysconf("SC_CLK_TCK")

    def sample(self) -> BrokerSample:
        fields: dict[str, int] = {}
        with open(f"/proc/{self.pid}/status", encoding="ascii") as status:
            for line in status:
                name, _, value = line.partition(":")
                if name in ("VmRSS", "VmHWM"):
                    fields[name] = int(value.split()[0])
        with open(f"/proc/{self.pid}/stat", encoding="ascii") as stat:
            after_name = stat.read().rsplit(")", 1)[1].split()
        # fields 14 and 15 (utime, stime) are the 12th and 13th after the name
        cpu = (int(after_name[11]) + int(after_name[12])) / self._ticks
        rss = fields.get("VmRSS", 0)
        self.peak_rss_kib = max(self.peak_rss_kib, rss)
        return BrokerSample(time.monotonic(), rss, fields.get("VmHWM", 0), cpu)


# ---------------------------------------------------------------------- parent


def split(total: int, parts: int) -> list[int]:
    """``total`` spread over ``parts`` as evenly as integers allow."""
    base, extra = divmod(total, parts)
    return [base + (1 if i < extra else 0) for i in range(parts)]


def build_configs(args: argparse.Namespace) -> list[WorkerConfig]:
    host, _, port = args.nsqd_tcp_address.rpartition(":")
    mode: str = args.mode
    processes: int = args.processes
    channels: int = getattr(args, "channels", 1)
    connections = [1] * processes
    if mode == "idle":
        processes = min(processes, args.connections)
        connections = split(args.connections, processes)
        counts = [0] * processes
    elif mode == "consume":
        # every channel sees every message: --count is per channel, shared by its consumers
        shares = [split(args.count, len(range(k, processes, channels))) for k in range(channels)]
        counts = [shares[i % channels][i // channels] for i in range(processes)]
    else:
        counts = split(args.count, processes)
    ordered: int = getattr(args, "ordered_partitions", 0) or getattr(args, "partitions", 0)
    desired: str | None = getattr(args, "desired_tags", None)
    desired_tags = desired.split(",") if desired is not None else []
    if desired_tags and len(desired_tags) != processes:
        raise SystemExit("--desired-tags needs one entry per process (-p)")
    configs = []
    for i in range(processes):
        channel: str = getattr(args, "channel", "loadgen")
        if channels > 1:
            channel = f"{channel}{i % channels}"
        configs.append(
            WorkerConfig(
                mode=mode,
                index=i,
                host=host or "127.0.0.1",
                port=int(port),
                topic=args.topic,
                channel=channel,
                seconds=args.seconds,
                count=max(1, counts[i]),
                size=args.size,
                batch=getattr(args, "batch", 1),
                inflight=getattr(args, "inflight", 1),
                rdy=getattr(args, "rdy", 0),
                parser=args.parser,
                heartbeat_ms=args.heartbeat_ms,
                output_buffer_size=getattr(args, "output_buffer_size", 0),
                output_buffer_timeout=getattr(args, "output_buffer_timeout", 0),
                connections=connections[i],
                connect_timeout=args.connect_timeout,
                start_timeout=args.start_timeout,
                max_samples=args.max_samples,
                spin_us=args.spin_us,
                tags=getattr(args, "tags", 0),
                desired_tag=desired_tags[i] if desired_tags else None,
                ordered_partition=i % ordered if ordered else None,
                ordered_window=getattr(args, "ordered_window", 0),
                group_member=getattr(args, "group_member", ""),
                topics=getattr(args, "topics", 1),
                processes=processes,
                max_msgs_per_sec=getattr(args, "max_msgs_per_sec", 0),
                max_bytes_per_sec=getattr(args, "max_bytes_per_sec", 0),
            )
        )
    return configs


@attrs.define
class Outcome:
    """Everything the parent learned, ready to print."""

    results: list[Result] = attrs.field(factory=list)
    errors: list[str] = attrs.field(factory=list)
    before: BrokerSample | None = None
    connected: BrokerSample | None = None
    start: BrokerSample | None = None
    after: BrokerSample | None = None
    peak_rss_kib: int = 0


def collect_ready(
    reports: Queue[Report],
    procs: Sequence[BaseProcess],
    timeout: float,
) -> list[str]:
    """Wait for every worker's Ready; return the errors (connect failures, deaths)."""
    errors: list[str] = []
    ready = 0
    deadline = time.monotonic() + timeout
    while ready < len(procs):
        left = deadline - time.monotonic()
        if left <= 0:
            errors.append(f"only {ready} of {len(procs)} workers ready after {timeout:.0f} s")
            break
        try:
            report = reports.get(timeout=min(left, 0.5))
        except queue.Empty:
            dead = [p for p in procs if p.exitcode is not None]
            if dead and reports.empty():
                errors.append(f"{len(dead)} worker(s) exited before connecting (see stderr)")
                break
            continue
        if isinstance(report, Ready):
            ready += 1
            if report.error is not None:
                errors.append(f"worker {report.index}: {report.error}")
    return errors


def run_load(args: argparse.Namespace) -> Outcome:
    configs = build_configs(args)
    ctx = multiprocessing.get_context("spawn")
    reports: Queue[Report] = ctx.Queue()
    go = ctx.Event()
    abort = ctx.Event()
    probe = BrokerProbe(args.broker_pid) if args.broker_pid else None
    outcome = Outcome()
    if probe is not None:
        outcome.before = probe.sample()
    procs = [
        ctx.Process(
            target=worker_main,
            args=(cfg, reports, go, abort),
            name=f"loadgen-{cfg.mode}-{cfg.index}",
            daemon=True,
        )
        for cfg in configs
    ]
    try:
        for proc in procs:
            proc.start()
        errors = collect_ready(reports, procs, args.start_timeout)
        if errors:
            outcome.errors = errors
            abort.set()
            go.set()
            return outcome
        if probe is not None:
            outcome.connected = outcome.start = probe.sample()
        go.set()
        hard_deadline = time.monotonic() + args.seconds + GRACE_SECONDS
        while len(outcome.results) < len(procs) and time.monotonic() < hard_deadline:
            try:
                report = reports.get(timeout=0.25)
            except queue.Empty:
                if all(p.exitcode is not None for p in procs) and reports.empty():
                    break
            else:
                if isinstance(report, Result):
                    outcome.results.append(report)
            if probe is not None:
                probe.sample()
        if len(outcome.results) < len(procs):
            outcome.errors.append(f"{len(procs) - len(outcome.results)} worker(s) sent no result")
        if probe is not None:
            outcome.after = probe.sample()
            outcome.peak_rss_kib = probe.peak_rss_kib
        return outcome
    finally:
        abort.set()
        go.set()
        for proc in procs:
            proc.join(timeout=5)
        for proc in procs:
            if proc.is_alive():
                proc.terminate()
                proc.join(timeout=2)


# ---------------------------------------------------------------------- report


def percentile(ordered: Sequence[int], fraction: float) -> int:
    """Nearest-rank percentile of a sorted sequence."""
    return ordered[min(len(ordered) - 1, max(0, math.ceil(fraction * len(ordered)) - 1))]


def fmt_ns(ns: float) -> str:
    if ns < 1_000_000:
        return f"{ns / 1000:.1f} µs"
    return f"{ns / 1_000_000:.2f} ms"


def fmt_kib(kib: int) -> str:
    return f"{kib / 1024:.1f} MiB"


def summarize(args: argparse.Namespace, outcome: Outcome) -> dict[str, object]:
    """The figures as one flat dict (also printed as JSON with --json)."""
    results = outcome.results
    summary: dict[str, object] = {
        "mode": args.mode,
        "address": args.nsqd_tcp_address,
        "processes": args.processes,
        "errors": outcome.errors + [f"worker {r.index}: {r.error}" for r in results if r.error],
    }
    if not results:
        return summary
    started = min(r.started for r in results)
    finished = max(r.finished for r in results)
    elapsed = max(finished - started, 1e-9)
    messages = sum(r.messages for r in results)
    summary.update(
        elapsed_s=round(elapsed, 3),
        messages=messages,
        commands=sum(r.commands for r in results),
        msgs_per_s=round(messages / elapsed),
        payload_mb_per_s=round(sum(r.payload_bytes for r in results) / elapsed / 1e6, 2),
        wire_out_mb_per_s=round(sum(r.bytes_out for r in results) / elapsed / 1e6, 2),
        wire_in_mb_per_s=round(sum(r.bytes_in for r in results) / elapsed / 1e6, 2),
        per_worker_msgs_per_s=[
            round(r.messages / max(r.finished - r.started, 1e-9)) for r in results
        ],
        worker_cpu_pct=[
            round(100 * r.cpu_seconds / max(r.finished - r.started, 1e-9)) for r in results
        ],
        heartbeats_answered=sum(r.heartbeats for r in results),
        non_fatal_errors=sum(r.non_fatal_errors for r in results),
        connections=sum(r.connections for r in results),
        lost_connections=sum(r.lost_connections for r in results),
    )
    samples = array.array("q")
    for r in results:
        samples.frombytes(r.latencies_ns)
    if samples:
        ordered = sorted(samples)
        summary.update(
            latency_samples=len(ordered),
            latency_p50_us=round(percentile(ordered, 0.50) / 1000, 1),
            latency_p99_us=round(percentile(ordered, 0.99) / 1000, 1),
            latency_max_us=round(ordered[-1] / 1000, 1),
        )
    if outcome.before is not None and outcome.after is not None:
        start = outcome.start or outcome.before
        window = max(outcome.after.at - start.at, 1e-9)
        summary.update(
            broker_pid=args.broker_pid,
            broker_cpu_pct=round(100 * (outcome.after.cpu_seconds - start.cpu_seconds) / window),
            broker_rss_before_kib=outcome.before.rss_kib,
            broker_rss_connected_kib=(outcome.connected or outcome.before).rss_kib,
            broker_rss_after_kib=outcome.after.rss_kib,
            broker_rss_peak_sampled_kib=outcome.peak_rss_kib,
            broker_vmhwm_kib=outcome.after.hwm_kib,
        )
    return summary


def print_summary(args: argparse.Namespace, s: dict[str, object]) -> None:
    mode = args.mode
    settings = f"processes={s['processes']} size={args.size}B parser={args.parser}"
    if mode == "mpub":
        settings += f" batch={args.batch} inflight-batches={args.inflight}"
    elif mode == "pub":
        settings += f" inflight={args.inflight} topics={args.topics}"
    elif mode == "consume":
        settings += f" rdy={args.rdy} channels={args.channels}"
    elif mode == "idle":
        settings = f"connections={args.connections} processes={s['processes']}"
        settings += f" heartbeat-ms={args.heartbeat_ms}"
    print(f"loadgen {mode} -> {args.nsqd_tcp_address} topic={args.topic} {settings}")
    if "elapsed_s" in s:
        print(f"  elapsed        {s['elapsed_s']:.3f} s (first worker start to last finish)")
        if mode == "idle":
            print(
                f"  connections    {s['connections']} held, {s['lost_connections']} lost, "
                f"{s['heartbeats_answered']} heartbeats answered"
            )
        else:
            unit = {"pub": "PUB", "mpub": "MPUB"}.get(mode)
            commands = f" in {s['commands']:,} {unit}" if unit else ""
            print(f"  messages       {s['messages']:,}{commands}")
            print(
                f"  throughput     {s['msgs_per_s']:,} msg/s   "
                f"{s['payload_mb_per_s']} MB/s payload   "
                f"wire {s['wire_out_mb_per_s']} MB/s out, {s['wire_in_mb_per_s']} MB/s in"
            )
            print(f"  per worker     {s['per_worker_msgs_per_s']} msg/s")
        if "latency_samples" in s:
            what = {"pub": "PUB", "mpub": "MPUB"}.get(mode, mode)
            p50 = float(str(s["latency_p50_us"])) * 1000
            p99 = float(str(s["latency_p99_us"])) * 1000
            top = float(str(s["latency_max_us"])) * 1000
            print(
                f"  {what} round trip  p50 {fmt_ns(p50)}   p99 {fmt_ns(p99)}   "
                f"max {fmt_ns(top)}   ({s['latency_samples']:,} samples)"
            )
        print(f"  generator CPU  {s['worker_cpu_pct']} % of one core per worker")
        if mode != "idle":
            print(
                f"  heartbeats     {s['heartbeats_answered']} answered; "
                f"non-fatal errors {s['non_fatal_errors']}"
            )
    if "broker_pid" in s:
        print(
            f"  broker pid {s['broker_pid']}: CPU {s['broker_cpu_pct']} % of one core during the run"
        )
        print(
            f"  broker memory  RSS {fmt_kib(int(str(s['broker_rss_before_kib'])))} before, "
            f"{fmt_kib(int(str(s['broker_rss_connected_kib'])))} connected, "
            f"{fmt_kib(int(str(s['broker_rss_after_kib'])))} after; "
            f"peak sampled {fmt_kib(int(str(s['broker_rss_peak_sampled_kib'])))}; "
            f"VmHWM {fmt_kib(int(str(s['broker_vmhwm_kib'])))} (lifetime peak)"
        )
    errors = s["errors"]
    if isinstance(errors, list) and errors:
        print("  ERRORS")
        for error in errors:
            print(f"    {error}")


# ---------------------------------------------------------------------- CLI


def positive_int(text: str) -> int:
    value = int(text)
    if value <= 0:
        raise argparse.ArgumentTypeError(f"{text} is not a positive integer")
    return value


def seconds_type(text: str) -> float:
    value = float(text)
    if not 0 < value <= MAX_SECONDS:
        raise argparse.ArgumentTypeError(f"seconds must be in (0, {MAX_SECONDS:.0f}]")
    return value


def address_type(text: str) -> str:
    host, sep, port = text.rpartition(":")
    if not sep or not port.isdigit() or not 0 < int(port) < 65536:
        raise argparse.ArgumentTypeError(f"{text!r} is not HOST:PORT")
    return text if host else f"127.0.0.1{sep}{port}"


def build_parser() -> argparse.ArgumentParser:
    common = argparse.ArgumentParser(add_help=False)
    group = common.add_argument_group("common options")
    group.add_argument(
        "--nsqd-tcp-address",
        type=address_type,
        default="127.0.0.1:4150",
        metavar="HOST:PORT",
        help="the broker's (or sink's) TCP address (default %(default)s)",
    )
    group.add_argument(
        "--topic", default="loadgen", metavar="NAME", help="topic (default %(default)s)"
    )
    group.add_argument(
        "-p",
        "--processes",
        type=positive_int,
        metavar="N",
        help="worker processes, one connection each (idle: processes sharing the "
        "connections); default 1, idle 4",
    )
    group.add_argument(
        "--seconds",
        type=seconds_type,
        default=5.0,
        metavar="S",
        help="run time after the coordinated start (default %(default)s)",
    )
    group.add_argument(
        "--count",
        type=positive_int,
        default=100_000_000,
        metavar="N",
        help="stop after this many messages in total, split over the processes (consume: "
        "per channel); default %(default)s, so usually --seconds ends the run",
    )
    group.add_argument(
        "--size",
        type=positive_int,
        default=200,
        metavar="BYTES",
        help="message body bytes (default %(default)s)",
    )
    group.add_argument(
        "--broker-pid",
        type=positive_int,
        metavar="PID",
        help="report this process's CPU use, RSS before/after and peak (VmHWM) from /proc",
    )
    group.add_argument(
        "--parser",
        choices=("lean", "codec"),
        default="lean",
        help="reply parser: lean counting parser, or trionsq's ClientConnection "
        "(default %(default)s)",
    )
    group.add_argument(
        "--heartbeat-ms",
        type=int,
        metavar="MS",
        help="IDENTIFY heartbeat_interval in ms: 0 = server default, -1 = off; "
        "default 0, idle 1000",
    )
    group.add_argument(
        "--connect-timeout",
        type=float,
        default=5.0,
        metavar="S",
        help="per connection (default %(default)s)",
    )
    group.add_argument(
        "--start-timeout",
        type=float,
        default=60.0,
        metavar="S",
        help="how long workers may take to connect before the run is abandoned "
        "(default %(default)s)",
    )
    group.add_argument(
        "--max-samples",
        type=positive_int,
        default=2_000_000,
        metavar="N",
        help="latency samples kept per worker (default %(default)s)",
    )
    group.add_argument(
        "--spin-us",
        type=int,
        default=0,
        metavar="US",
        help="poll for a reply this many microseconds before blocking (pub, mpub, "
        "consume; default 0 = block at once; see README)",
    )
    group.add_argument("--json", action="store_true", help="also print the figures as JSON")

    parser = argparse.ArgumentParser(
        prog="loadgen.py",
        description="Load generator for NSQ's TCP protocol V2 (trionsq, nsqd, or benchmarks/sink.py).",
        epilog="Example: loadgen.py mpub -p 2 --seconds 5 --broker-pid $(pgrep -n nsqd)",
    )
    modes = parser.add_subparsers(dest="mode", required=True, metavar="MODE")

    pub = modes.add_parser("pub", parents=[common], help="one PUB per round trip; latency per PUB")
    pub.add_argument(
        "--inflight",
        type=positive_int,
        default=1,
        metavar="N",
        help="PUBs outstanding per connection (default %(default)s = strict round trips)",
    )
    pub.add_argument(
        "--topics",
        type=positive_int,
        default=1,
        metavar="N",
        help="PUB to N topics in turn, <topic>-<n> (default %(default)s: --topic alone)",
    )

    mpub = modes.add_parser(
        "mpub", parents=[common], help="MPUB batches, pipelined; latency per MPUB"
    )
    mpub.add_argument(
        "--batch",
        type=positive_int,
        default=200,
        metavar="N",
        help="bodies per MPUB (default %(default)s)",
    )
    mpub.add_argument(
        "--inflight-batches",
        "--inflight",
        dest="inflight",
        type=positive_int,
        default=4,
        metavar="N",
        help="MPUBs outstanding per connection (default %(default)s)",
    )
    mpub.add_argument(
        "--partitions",
        type=int,
        default=0,
        metavar="N",
        help="MPUB <topic> <partition>, process i to partition i %% N (default 0: none)",
    )
    mpub.add_argument(
        "--tags",
        type=int,
        default=0,
        metavar="N",
        help="MPUB_EXT with ##client_dispatch_tag tag0..tagN-1 and untagged bodies in turn "
        "(the topic must be an ext topic; default 0: plain MPUB)",
    )

    consume = modes.add_parser(
        "consume", parents=[common], help="SUB, RDY, FIN every message; msgs/s and MB/s"
    )
    consume.add_argument(
        "--channel", default="loadgen", metavar="NAME", help="channel (default %(default)s)"
    )
    consume.add_argument(
        "--channels",
        type=positive_int,
        default=1,
        metavar="N",
        help="spread the processes over this many channels <channel>0..N-1 "
        "(fan-out; default %(default)s = all on --channel)",
    )
    consume.add_argument(
        "--rdy",
        type=positive_int,
        default=200,
        metavar="N",
        help="RDY per connection (default %(default)s)",
    )
    consume.add_argument(
        "--ordered-partitions",
        type=int,
        default=0,
        metavar="N",
        help="SUB_ORDERED, process i on partition i %% N (the topic needs N partitions; "
        "default 0: plain SUB)",
    )
    consume.add_argument(
        "--ordered-window",
        type=int,
        default=0,
        metavar="N",
        help="with --ordered-partitions: IDENTIFY ordered_window N, so N messages of a "
        "partition may be in flight at once, in order (trionsq's extension; default 0: "
        "not sent, one at a time)",
    )
    consume.add_argument(
        "--max-msgs-per-sec",
        type=int,
        default=0,
        metavar="N",
        help="IDENTIFY max_msgs_per_sec N: each connection's own rate limit (trionsq's "
        "extension; default 0: not sent)",
    )
    consume.add_argument(
        "--max-bytes-per-sec",
        type=int,
        default=0,
        metavar="N",
        help="IDENTIFY max_bytes_per_sec N (trionsq's extension; default 0: not sent)",
    )
    consume.add_argument(
        "--desired-tags",
        metavar="T0,T1,...",
        help="IDENTIFY extend_support with one desired_tag per process, in order "
        '(an empty entry: untagged), e.g. "tag0,tag1,tag2,tag3,,,,"',
    )
    consume.add_argument(
        "--group-member",
        default="",
        metavar="NAME",
        help="IDENTIFY group_member NAME: join the channel's consumer group (trionsq)",
    )
    consume.add_argument(
        "--output-buffer-size",
        type=int,
        default=0,
        metavar="BYTES",
        help="IDENTIFY output_buffer_size (0 = server default)",
    )
    consume.add_argument(
        "--output-buffer-timeout",
        type=int,
        default=0,
        metavar="MS",
        help="IDENTIFY output_buffer_timeout ms (0 = server default)",
    )

    idle = modes.add_parser(
        "idle",
        parents=[common],
        help="hold N identified connections that only answer heartbeats; broker RSS",
    )
    idle.add_argument(
        "--connections",
        type=positive_int,
        default=1000,
        metavar="N",
        help="connections in total (default %(default)s)",
    )
    return parser


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = build_parser()
    args = parser.parse_args(argv)
    idle = args.mode == "idle"
    if args.processes is None:
        args.processes = 4 if idle else 1
    if args.heartbeat_ms is None:
        args.heartbeat_ms = 1000 if idle else 0
    if args.mode == "consume" and args.processes < args.channels:
        parser.error("--channels needs at least one process per channel")
    return args


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    try:
        outcome = run_load(args)
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        return 130
    summary = summarize(args, outcome)
    print_summary(args, summary)
    if args.json:
        print(json.dumps(summary))
    return 1 if summary["errors"] else 0


if __name__ == "__main__":
    sys.exit(main())
