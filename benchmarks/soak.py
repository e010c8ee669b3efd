"""Hostile and well-behaved clients side by side against one broker, for N minutes.

The promise it checks: no client takes the broker down, freezes it or makes it grow
without bound, and the well-behaved clients lose and duplicate nothing meanwhile::

    .venv/bin/python benchmarks/soak.py --minutes 3 --workers 30
    .venv/bin/python benchmarks/soak.py --nsqd /path/to/go/nsqd --minutes 1   # compare

It starts the broker command (``--nsqd``, default ``.venv/bin/nsqd``) on free loopback
ports with a fresh data directory, then runs, each in its own OS process so one side's
load does not delay another side's clock:

- a **pinger**: ``GET /ping`` on a keep-alive connection every 50 ms, timing each;
- the **good pair**: a producer sending one PUB per round trip (sequence-numbered
  bodies, timing each) and a consumer at RDY 200 that FINs everything; at the end the
  consumer drains, and every acknowledged body must have arrived exactly once;
- **hostile workers** (``--workers`` minus the three above, as threads spread over
  ``--hostile-processes`` processes), each doing one attack after another with
  ``--pace`` seconds between: garbage after the magic, a bad magic, a 2 GiB size
  prefix, deflate and snappy bombs (``--bomb-mib`` MiB of ``NOP`` commands, then a PUB
  whose answer ends the attack), IDENTIFY nested 1,000 levels deep, slowloris, bursts of
  connections opened and dropped, a consumer that never reads, nonsense commands,
  malformed HTTP requests, and admin stream websockets dropped at a random step of
  their handshake (before the 101, after it, after the hello, mid frame, after an op).

It prints the broker's RSS every ``--rss-every`` seconds, then: losses and duplicates
of the good pair, publish latency percentiles, /ping latency percentiles and worst,
attacks by kind (with the bombs' time from first byte to their PUB's answer), and
whether the broker is still alive. The exit status is 1 when anything was lost or
duplicated, /ping missed an answer or took longer than ``--ping-limit`` (100 ms), or
the broker died.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import multiprocessing
import queue
import random
import shutil
import socket
import struct
import subprocess
import sys
import tempfile
import threading
import time
from collections import Counter
from pathlib import Path
from typing import TYPE_CHECKING, Final

import attrs

from trionsq.protocol import MAGIC_V2, Fin, IdentifyRequest, Nop, Pub, Sub
from trionsq.protocol.client import (
    ClientConnection,
    ErrorReply,
    Frame,
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

if TYPE_CHECKING:
    from collections.abc import Callable

GOOD_TOPIC: Final = "soak_good"
BOMB_TOPIC: Final = "soak_bomb"
STUCK_TOPIC: Final = "soak_stuck"
PING: Final = b"GET /ping HTTP/1.1\r\nHost: soak\r\n\r\n"
WEBSOCKET_UPGRADE: Final = (
    b"GET /admin/stream%s HTTP/1.1\r\nHost: soak\r\nUpgrade: websocket\r\n"
    b"Connection: Upgrade\r\nSec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\n"
    b"Sec-WebSocket-Version: 13\r\n\r\n"
)
PING_EVERY: Final = 0.05
ATTACK_TIMEOUT: Final = 30.0


# ------------------------------------------------------------------ results


@attrs.frozen
class PingResult:
    latencies: list[float]
    failures: int
    connects: int


@attrs.frozen
class GoodResult:
    acked: int
    lost: int
    duplicates: int
    redelivered: int
    latencies: list[float]
    errors: list[str]


@attrs.frozen
class HostileResult:
    done: dict[str, int]
    failed: dict[str, int]
    bombs: list[float]


Result = PingResult | GoodResult | HostileResult


# ------------------------------------------------------------------ helpers


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


def percentile(values: list[float], fraction: float) -> float:
    if not values:
        return float("nan")
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(fraction * len(ordered)))]


def rss_mib(pid: int) -> float:
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    except OSError:
        pass
    return float("nan")


def connect(address: tuple[str, int], timeout: float = ATTACK_TIMEOUT) -> socket.socket:
    sock = socket.create_connection(address, timeout=timeout)
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    return sock


def recv_exact(sock: socket.socket, size: int) -> bytes:
    """Exactly ``size`` bytes, so nothing after them is taken from the socket."""
    data = b""
    while len(data) < size:
        chunk = sock.recv(size - len(data))
        if not chunk:
            raise ConnectionError("closed by the broker")
        data += chunk
    return data


class FrameReader:
    """Blocking frame reads on a V2 connection, optionally through a decompressor."""

    def __init__(self, sock: socket.socket) -> None:
        self.sock = sock
        self.codec = ClientConnection()
        self.frames: list[Frame] = []
        self.inflate: Callable[[bytes], bytes] | None = None

    def next(self) -> Frame:
        """The next frame; heartbeats are answered and skipped. EOF raises."""
        while True:
            while self.frames:
                frame = self.frames.pop(0)
                if isinstance(frame, Response) and frame.is_heartbeat:
                    self.sock.sendall(encode_command(Nop()))
                    continue
                return frame
            data = self.sock.recv(65536)
            if not data:
                raise ConnectionError("closed by the broker")
            if self.inflate is not None:
                data = self.inflate(data)
            self.frames.extend(self.codec.receive_data(data))


# ------------------------------------------------------------------ pinger


def pinger(http: tuple[str, int], deadline: float, results: multiprocessing.Queue[Result]) -> None:
    latencies: list[float] = []
    failures = 0
    reconnects = 0
    sock: socket.socket | None = None
    while time.time() < deadline:
        started = time.perf_counter()
        try:
            if sock is None:
                sock = connect(http, timeout=5.0)
                reconnects += 1
            sock.sendall(PING)
            reply = b""
            while b"\r\n\r\nOK" not in reply and b"\r\n\r\nNOK" not in reply:
                chunk = sock.recv(4096)
                if not chunk:
                    raise ConnectionError("closed")
                reply += chunk
            latencies.append(time.perf_counter() - started)
            if not reply.startswith(b"HTTP/1.1 200"):
                failures += 1
        except OSError:
            failures += 1
            if sock is not None:
                sock.close()
            sock = None
        time.sleep(max(0.0, PING_EVERY - (time.perf_counter() - started)))
    results.put(PingResult(latencies, failures, reconnects))


# ------------------------------------------------------------------ the good pair


def good_pair(
    tcp: tuple[str, int], deadline: float, results: multiprocessing.Queue[Result]
) -> None:
    acked: list[int] = []
    latencies: list[float] = []
    errors: list[str] = []
    deliveries: Counter[int] = Counter()
    redelivered = 0
    producer_done = threading.Event()

    def consume() -> None:
        nonlocal redelivered
        sock = connect(tcp, timeout=60.0)
        reader = FrameReader(sock)
        sock.sendall(MAGIC_V2 + encode_command(Sub(GOOD_TOPIC, "soak")) + b"RDY 200\n")
        reader.next()  # OK to SUB
        drain_until: float | None = None
        sock.settimeout(0.5)
        while True:
            if producer_done.is_set():
                if all(deliveries[n] for n in acked):
                    break
                drain_until = drain_until or time.time() + 15.0
                if time.time() > drain_until:
                    break
            try:
                frame = reader.next()
            except TimeoutError:
                continue
            if isinstance(frame, MessageFrame):
                message = frame.message
                deliveries[int(message.body)] += 1
                if message.attempts > 1:
                    redelivered += 1
                sock.sendall(encode_command(Fin(message.id)))
            elif isinstance(frame, ErrorReply):
                errors.append(f"consumer: {frame.code}")
        sock.close()

    consumer = threading.Thread(target=consume)
    consumer.start()
    time.sleep(0.2)  # the channel exists before the first publish
    sock = connect(tcp, timeout=60.0)
    reader = FrameReader(sock)
    sock.sendall(MAGIC_V2)
    sequence = 0
    while time.time() < deadline:
        started = time.perf_counter()
        sock.sendall(encode_command(Pub(GOOD_TOPIC, b"%d" % sequence)))
        frame = reader.next()
        if isinstance(frame, Response) and frame.is_ok:
            latencies.append(time.perf_counter() - started)
            acked.append(sequence)
        else:
            errors.append(f"producer: {frame}")
        sequence += 1
    sock.close()
    producer_done.set()
    consumer.join()
    results.put(
        GoodResult(
            acked=len(acked),
            lost=sum(1 for n in acked if not deliveries[n]),
            duplicates=sum(count - 1 for count in deliveries.values() if count > 1),
            redelivered=redelivered,
            latencies=latencies,
            errors=errors[:20],
        )
    )


# ------------------------------------------------------------------ hostile clients


class Attacks:
    """One hostile process's attacks; the bombs are compressed once per process."""

    def __init__(self, tcp: tuple[str, int], http: tuple[str, int], bomb_mib: int) -> None:
        self.tcp = tcp
        self.http = http
        self.nops = b"NOP\n" * (bomb_mib * 1024 * 1024 // 4)
        self.bomb_times: list[float] = []
        self.kinds: list[tuple[str, Callable[[random.Random], None]]] = [
            ("garbage", self.garbage),
            ("bad_magic", self.bad_magic),
            ("huge_size", self.huge_size),
            ("deflate_bomb", self.deflate_bomb),
            ("snappy_bomb", self.snappy_bomb),
            ("deep_json", self.deep_json),
            ("slowloris", self.slowloris),
            ("churn", self.churn),
            ("stuck_consumer", self.stuck_consumer),
            ("nonsense", self.nonsense),
            ("http_garbage", self.http_garbage),
            ("websocket_churn", self.websocket_churn),
        ]

    @staticmethod
    def _read_to_close(sock: socket.socket, limit: float = 10.0) -> None:
        sock.settimeout(limit)
        while sock.recv(65536):
            pass

    def garbage(self, rng: random.Random) -> None:
        with connect(self.tcp) as sock:
            sock.sendall(MAGIC_V2 + rng.randbytes(rng.randint(1, 4096)))
            self._read_to_close(sock)

    def bad_magic(self, rng: random.Random) -> None:
        with connect(self.tcp) as sock:
            sock.sendall(rng.randbytes(4) + b"PUB x\n")
            self._read_to_close(sock)

    def huge_size(self, rng: random.Random) -> None:
        with connect(self.tcp) as sock:
            verb = rng.choice([b"PUB", b"MPUB", b"IDENTIFY"])
            line = verb + (b"\n" if verb == b"IDENTIFY" else b" " + BOMB_TOPIC.encode() + b"\n")
            sock.sendall(MAGIC_V2 + line + struct.pack(">I", 2**31 - 1) + b"x" * 100)
            self._read_to_close(sock)

    def _bomb(
        self,
        identify: IdentifyRequest,
        encode: Callable[[bytes], bytes],
        inflate: Callable[[bytes], bytes],
    ) -> None:
        with connect(self.tcp) as sock:
            sock.sendall(MAGIC_V2 + encode_identify(identify))
            (size,) = struct.unpack(">I", recv_exact(sock, 4))
            recv_exact(sock, size)  # the JSON answer, uncompressed; the rest is compressed
            reader = FrameReader(sock)
            reader.inflate = inflate
            payload = encode(self.nops + encode_command(Pub(BOMB_TOPIC, b"after the bomb")))
            started = time.perf_counter()
            sock.sendall(payload)
            answers = 0
            while answers < 2:  # OK to the upgrade, then OK to the PUB
                frame = reader.next()
                if not (isinstance(frame, Response) and frame.is_ok):
                    raise RuntimeError(f"bomb answered {frame}")
                answers += 1
            self.bomb_times.append(time.perf_counter() - started)

    def deflate_bomb(self, rng: random.Random) -> None:
        level = rng.randint(1, 9)
        decoder = DeflateDecoder()
        self._bomb(
            IdentifyRequest(feature_negotiation=True, deflate=True, deflate_level=level),
            DeflateEncoder(level).encode,
            decoder.decode,
        )

    def snappy_bomb(self, rng: random.Random) -> None:
        decoder = SnappyDecoder()
        self._bomb(
            IdentifyRequest(feature_negotiation=True, snappy=True),
            SnappyEncoder().encode,
            decoder.decode,
        )

    def deep_json(self, rng: random.Random) -> None:
        depth = rng.randint(500, 1100)
        body = b'{"client_id":' + b"[" * depth + b"]" * depth + b"}"
        with connect(self.tcp) as sock:
            sock.sendall(MAGIC_V2 + b"IDENTIFY\n" + struct.pack(">I", len(body)) + body)
            self._read_to_close(sock)

    def slowloris(self, rng: random.Random) -> None:
        with connect(self.tcp) as sock:
            sock.sendall(MAGIC_V2 + b"PUB " + BOMB_TOPIC.encode() + b"\n" + struct.pack(">I", 100))
            for _ in range(rng.randint(1, 5)):
                time.sleep(1.0)
                sock.sendall(b"x")

    def churn(self, rng: random.Random) -> None:
        socks = []
        for _ in range(rng.randint(10, 100)):
            sock = connect(self.tcp)
            if rng.random() < 0.5:
                sock.sendall(MAGIC_V2)
            socks.append(sock)
        for sock in socks:
            if rng.random() < 0.5:  # a reset instead of a clean close
                sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
            sock.close()

    def stuck_consumer(self, rng: random.Random) -> None:
        with connect(self.tcp) as producer, connect(self.tcp) as stuck:
            stuck.sendall(MAGIC_V2 + encode_command(Sub(STUCK_TOPIC, "stuck")) + b"RDY 100\n")
            producer.sendall(MAGIC_V2)
            reader = FrameReader(producer)
            for _ in range(20):
                producer.sendall(encode_command(Pub(STUCK_TOPIC, rng.randbytes(10_000))))
                reader.next()
            time.sleep(rng.uniform(0.5, 3.0))  # never reads what it asked for

    def nonsense(self, rng: random.Random) -> None:
        lines = [
            b"FIN " + rng.randbytes(16) + b"\n",
            b"REQ 0123456789abcdef 10\n",
            b"RDY 999999999\n",
            b"TOUCH 0123456789abcdef\n",
            b"SUB bad/topic ch\n",
            b"SUB " + b"t" * 100 + b" ch\n",
            b"WHAT is this\n",
            b"DPUB t -5\n",
            b"AUTH\n" + struct.pack(">I", 3) + b"abc",
            b"CLS\n",
        ]
        with connect(self.tcp) as sock:
            sock.sendall(MAGIC_V2 + b"".join(rng.sample(lines, rng.randint(1, len(lines)))))
            self._read_to_close(sock)

    def http_garbage(self, rng: random.Random) -> None:
        requests = [
            b"GET /ping HTTP/9.9\r\nHost: x\r\n\r\n",
            rng.randbytes(rng.randint(1, 2000)),
            b"GET /" + b"a" * 20_000 + b" HTTP/1.1\r\nHost: x\r\n\r\n",
            b"GET /ping HTTP/1.1\r\n" + b"X-Big: " + b"b" * 100_000 + b"\r\n\r\n",
            b"POST /pub?topic=" + BOMB_TOPIC.encode() + b" HTTP/1.1\r\nHost: x\r\n"
            b"Content-Length: 1000000\r\n\r\npartial",
            b"POST /pub_ext?topic="
            + BOMB_TOPIC.encode()
            + b"&ext="
            + b"%5B" * 600
            + b"%5D" * 600
            + b" HTTP/1.1\r\nHost: x\r\nContent-Length: 1\r\n\r\nx",
            b"POST /mpub?topic=" + BOMB_TOPIC.encode() + b"&binary=true HTTP/1.1\r\nHost: x\r\n"
            b"Content-Length: 8\r\n\r\n\xff\xff\xff\xff\x00\x00\x00\x01",
        ]
        with connect(self.http) as sock:
            sock.sendall(rng.choice(requests))
            sock.shutdown(socket.SHUT_WR)
            self._read_to_close(sock)

    def websocket_churn(self, rng: random.Random) -> None:
        """Admin stream websockets dropped (closed or reset) at a random step: before
        the 101, after it, after the hello, mid frame, after an op (issue 30: the first
        of these ended the broker)."""
        op = masked_frame(b'{"op": "topic.pause", "topic": "%s"}' % BOMB_TOPIC.encode())
        for _ in range(rng.randint(5, 30)):
            query = rng.choice([b"", b"?snapshot_interval_ms=100", b"?events=topic"])
            step = rng.randint(0, 4)
            with connect(self.http, timeout=2.0) as sock:
                sock.sendall(WEBSOCKET_UPGRADE % query)
                if step >= 1:  # the 101, then (step 2 on) the hello
                    self._read_until(sock, b"\r\n\r\n" if step == 1 else b'"hello"')
                if step >= 3:
                    sock.sendall(op if step == 4 else op[: rng.randint(1, len(op) - 1)])
                if rng.random() < 0.5:
                    sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))

    @staticmethod
    def _read_until(sock: socket.socket, marker: bytes) -> None:
        """Read until ``marker`` came (in all that was read), the socket closed or
        its timeout passed."""
        seen = b""
        with contextlib.suppress(TimeoutError):
            while marker not in seen and (chunk := sock.recv(65536)):
                seen += chunk


def masked_frame(payload: bytes) -> bytes:
    """A client's masked text frame (RFC 6455 §5.2), payload under 126 bytes."""
    mask = random.randbytes(4)
    masked = bytes(b ^ mask[i % 4] for i, b in enumerate(payload))
    return struct.pack(">BB", 0x81, 0x80 | len(payload)) + mask + masked


def hostile(
    tcp: tuple[str, int],
    http: tuple[str, int],
    threads: int,
    pace: float,
    bomb_mib: int,
    deadline: float,
    seed: int,
    results: multiprocessing.Queue[Result],
) -> None:
    attacks = Attacks(tcp, http, bomb_mib)
    done: Counter[str] = Counter()
    failed: Counter[str] = Counter()
    lock = threading.Lock()

    def worker(index: int) -> None:
        rng = random.Random(seed * 1000 + index)
        while time.time() < deadline:
            kind, attack = rng.choice(attacks.kinds)
            outcome = kind
            try:
                attack(rng)
            except (OSError, ConnectionError):
                pass  # being cut off is the broker's right answer to most of these
            except Exception as error:  # counted and reported, not hidden
                outcome = f"{kind}: {type(error).__name__}: {error}"[:200]
                with lock:
                    failed[outcome] += 1
            with lock:
                done[kind] += 1
            time.sleep(pace)

    workers = [threading.Thread(target=worker, args=(i,)) for i in range(threads)]
    for thread in workers:
        thread.start()
    for thread in workers:
        thread.join()
    results.put(HostileResult(dict(done), dict(failed), attacks.bomb_times))


# ------------------------------------------------------------------ the run


def start_broker(
    command: str, data_path: str
) -> tuple[subprocess.Popen[bytes], tuple[str, int], tuple[str, int]]:
    tcp = ("127.0.0.1", free_port())
    http = ("127.0.0.1", free_port())
    broker = subprocess.Popen(  # noqa: S603 - the command under test
        [
            command,
            f"--tcp-address={tcp[0]}:{tcp[1]}",
            f"--http-address={http[0]}:{http[1]}",
            f"--data-path={data_path}",
        ],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    limit = time.time() + 30
    while time.time() < limit:
        try:
            with socket.create_connection(http, timeout=1) as sock:
                sock.sendall(b"GET /ping HTTP/1.0\r\n\r\n")
                if b"OK" in sock.recv(1024):
                    return broker, tcp, http
        except OSError:
            time.sleep(0.02)
    broker.kill()
    raise SystemExit(f"{command} did not answer /ping within 30 s")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--nsqd", default=str(Path(sys.executable).with_name("nsqd")))
    parser.add_argument("--minutes", type=float, default=3.0)
    parser.add_argument(
        "--workers", type=int, default=30, help="all clients, the 3 good ones included"
    )
    parser.add_argument("--hostile-processes", type=int, default=2)
    parser.add_argument(
        "--pace", type=float, default=0.1, help="seconds between a worker's attacks"
    )
    parser.add_argument("--bomb-mib", type=int, default=16)
    parser.add_argument("--rss-every", type=float, default=10.0)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument(
        "--ping-limit", type=float, default=0.1, help="worst /ping seconds that still passes"
    )
    args = parser.parse_args()
    hostile_threads = max(args.workers - 3, 0)
    data_path = tempfile.mkdtemp(prefix="soak-")
    broker, tcp, http = start_broker(args.nsqd, data_path)
    print(
        f"{args.nsqd} pid {broker.pid}: 1 pinger, 1 producer + 1 consumer, "
        f"{hostile_threads} hostile workers, {args.minutes:g} min, pace {args.pace:g} s, "
        f"bombs {args.bomb_mib} MiB",
        flush=True,
    )
    context = multiprocessing.get_context("spawn")
    results: multiprocessing.Queue[Result] = context.Queue()
    deadline = time.time() + args.minutes * 60
    processes = [
        context.Process(target=pinger, args=(http, deadline, results)),
        context.Process(target=good_pair, args=(tcp, deadline, results)),
    ]
    spread = [hostile_threads // args.hostile_processes] * args.hostile_processes
    for i in range(hostile_threads % args.hostile_processes):
        spread[i] += 1
    for index, threads in enumerate(spread):
        if threads:
            processes.append(
                context.Process(
                    target=hostile,
                    args=(
                        tcp,
                        http,
                        threads,
                        args.pace,
                        args.bomb_mib,
                        deadline,
                        args.seed + index,
                        results,
                    ),
                )
            )
    for process in processes:
        process.start()
    started = time.time()
    rss: list[tuple[float, float]] = [(0.0, rss_mib(broker.pid))]
    print(f"  t=   0 s  RSS {rss[0][1]:7.1f} MiB", flush=True)
    gathered: list[Result] = []
    while len(gathered) < len(processes):
        try:
            gathered.append(results.get(timeout=args.rss_every))
            continue
        except queue.Empty:
            pass
        if broker.poll() is not None:
            print(f"  the broker exited with {broker.returncode}", flush=True)
        sample = (time.time() - started, rss_mib(broker.pid))
        rss.append(sample)
        print(f"  t={sample[0]:4.0f} s  RSS {sample[1]:7.1f} MiB", flush=True)
        if time.time() > deadline + 120:
            print("  workers still running 120 s after the end: giving up on them", flush=True)
            break
    for process in processes:
        process.join(timeout=5)
        if process.is_alive():
            process.kill()
    alive = broker.poll() is None
    rss.append((time.time() - started, rss_mib(broker.pid)))
    ok = report(gathered, rss, alive, broker.returncode, args.ping_limit)
    if alive:
        broker.terminate()
        broker.wait(timeout=30)
    shutil.rmtree(data_path, ignore_errors=True)
    print(json.dumps({"ok": ok}))
    return 0 if ok else 1


def ms(seconds: float) -> str:
    return f"{seconds * 1e3:.2f} ms"


def report(
    gathered: list[Result],
    rss: list[tuple[float, float]],
    alive: bool,
    exit_code: int | None,
    ping_limit: float,
) -> bool:
    """Print the results; whether the run kept every promise."""
    ok = alive
    print("\nresults")
    goods = [result for result in gathered if isinstance(result, GoodResult)]
    for good in goods:
        lat = good.latencies
        print(
            f"  good pair: {good.acked} acknowledged, lost {good.lost}, duplicated "
            f"{good.duplicates} (redelivered {good.redelivered}); publish latency "
            f"p50 {ms(percentile(lat, 0.5))}, p99 {ms(percentile(lat, 0.99))}, "
            f"max {ms(max(lat, default=0))}"
        )
        if good.errors:
            print(f"    errors: {good.errors}")
        ok = ok and good.lost == 0 and good.duplicates == 0 and not good.errors
    if not goods:
        print("  good pair: no result (it hung or crashed)")
        ok = False
    for ping in (result for result in gathered if isinstance(result, PingResult)):
        lat = ping.latencies
        print(
            f"  /ping: {len(lat)} answered, {ping.failures} failed, {ping.connects} connects; "
            f"latency p50 {ms(percentile(lat, 0.5))}, p99 {ms(percentile(lat, 0.99))}, "
            f"worst {ms(max(lat, default=0))}"
        )
        ok = ok and ping.failures == 0 and max(lat, default=0) <= ping_limit
    done: Counter[str] = Counter()
    failed: Counter[str] = Counter()
    bombs: list[float] = []
    for part in (result for result in gathered if isinstance(result, HostileResult)):
        done.update(part.done)
        failed.update(part.failed)
        bombs += part.bombs
    kinds = ", ".join(f"{kind} {count}" for kind, count in sorted(done.items()))
    print(f"  attacks: {sum(done.values())} ({kinds})")
    if bombs:
        print(
            f"  bombs answered: {len(bombs)}, first byte -> PUB answered p50 "
            f"{percentile(bombs, 0.5):.2f} s, max {max(bombs):.2f} s"
        )
    for outcome, count in failed.most_common(10):
        print(f"  unexpected: {count} x {outcome}")
    values = [mib for _, mib in rss]
    print(f"  RSS: start {values[0]:.1f} MiB, max {max(values):.1f} MiB, end {values[-1]:.1f} MiB")
    print(f"  broker {'alive' if alive else f'DIED (exit {exit_code})'}")
    return ok


if __name__ == "__main__":
    sys.exit(main())
