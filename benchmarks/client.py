"""NSQ clients side by side on one broker: trionsq.client (Trio), its blocking client
(threads), pynsq (tornado), gnsq (gevent) and ansq (asyncio), each publishing one
message per call, publishing in MPUB batches and consuming with a no-op handler
(issues 16 and 31).

Not a timed test; prints one table. By default it starts its own in-memory broker
(``trionsq serve --in-memory`` on 127.0.0.1, ports picked by the kernel) pinned to
CPU 0 and runs every measurement in a fresh process pinned to CPU 1, so the clients
get one core each and the broker the other. Every phase is its own process: gevent
monkey-patches, tornado and asyncio bring their loops, and none may leak into the
next client's figures. The runners are ``benchmarks/client_runners/run_<client>.py``.

Each client, with the same count of 200-byte bodies per phase, on a fresh topic:

- **publish single**: one PUB per message, each answered before its caller goes on,
  ``--concurrency`` (64) at a time, the way each library's users get concurrency:
  64 Trio tasks sharing one ``open_producer``; 64 threads sharing one blocking
  ``connect_producer`` (trionsq-blocking); 64 asyncio tasks sharing one ansq
  ``create_writer``; 64 greenlets sharing one gnsq ``Producer`` (blocking
  ``publish``); for pynsq, whose ``Writer.pub`` only calls back, 64 ``pub`` calls
  outstanding, each callback sending the next (its natural pipelined use). p50/p99 are
  each publish's round trip from call to answer, so they include the wait behind the
  other 63 on the one connection (nearest rank, every sample).
- **MPUB**: ``--batch`` (200) bodies per MPUB, one outstanding at a time.
- **consume**: the topic and channel ``bench`` are created over HTTP and filled with
  the count by MPUB from this process (trionsq.client, untimed); then the client
  subscribes with max_in_flight ``--max-in-flight`` (2500) and FINs each message with
  no other work, in each library's usual way: trionsq ``message.finish()`` in an
  ``async for``; pynsq ``Reader`` with a handler returning True and gnsq ``Consumer``
  with a handler returning None (both FIN for it); ansq ``reader.messages()`` and
  ``await message.fin()``, its reader given RDY 2500 by hand (``create_reader``
  keeps RDY 1 and ``set_max_in_flight`` is not implemented). The clock runs from
  before the consumer connects to the count-th message handled, so it includes
  connecting, SUB and each library's RDY ramp-up (a few ms).

Everything else stays at each library's defaults (output buffering, heartbeats). After
each publish phase the broker's ``message_count`` is checked against the count, and
every topic is deleted after its phase so later phases meet an empty broker. MB/s is
body bytes (10^6) per second. Peak RSS is the largest ``VmHWM`` of the client's three
processes (its interpreter and library included). A second table gives each phase's
CPU time per message, the runner's (from parsing its job, after its imports, to its
result) and, when the benchmark started
the broker, the broker's (from /proc): the rates move with whatever else the two cores
run, CPU per message much less, so it is the figure to compare old and new code by on
a shared machine. Usage::

    .venv/bin/python benchmarks/client.py                        # all five, 200,000
    .venv/bin/python benchmarks/client.py --count 50000 --clients trionsq,ansq
    .venv/bin/python benchmarks/client.py --nsqd-tcp-address 127.0.0.1:4150 \\
        --nsqd-http-address 127.0.0.1:4151                       # a running broker
"""

from __future__ import annotations

import argparse
import json
import os
import re
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.parse
import urllib.request
from contextlib import contextmanager, suppress
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Final

import trio

from trionsq.client import open_producer

if TYPE_CHECKING:
    from collections.abc import Iterator

CLIENTS: Final = ("trionsq", "trionsq-blocking", "pynsq", "gnsq", "ansq")
RUNNERS: Final = Path(__file__).resolve().parent / "client_runners"
CHANNEL: Final = "bench"
LISTENING: Final = re.compile(r"(TCP|HTTP): listening on (127\.0\.0\.1:\d+)")
FILL_TASKS: Final = 4
MIB: Final = 1024


class BenchError(RuntimeError):
    """A runner failed or the broker did not answer as the benchmark needs."""


@dataclass
class Phase:
    """One runner's JSON line."""

    messages: int
    seconds: float
    p50_ms: float | None
    p99_ms: float | None
    peak_rss_kib: int
    cpu_seconds: float
    broker_cpu_us: float | None = None

    @property
    def client_cpu_us(self) -> float:
        return self.cpu_seconds / self.messages * 1e6

    @property
    def rate(self) -> float:
        return self.messages / self.seconds


@dataclass
class ClientResult:
    client: str
    phases: dict[str, Phase] = field(default_factory=dict)
    errors: list[str] = field(default_factory=list)
    wall_seconds: float = 0.0


@contextmanager
def own_broker(pin: list[str]) -> Iterator[tuple[str, str, int | None]]:
    """An in-memory ``trionsq serve`` on ports the kernel picks, read back from its
    log (and its pid, for its CPU time); its stderr goes to a file so a chatty broker
    never blocks on a pipe."""
    with tempfile.TemporaryDirectory(prefix="trionsq-client-bench-") as data:
        log_path = Path(data) / "broker.log"
        with log_path.open("wb") as log:
            process = subprocess.Popen(  # noqa: S603 - the broker under test
                [
                    *pin,
                    sys.executable,
                    "-c",
                    "from trionsq.cli import main; main()",
                    "serve",
                    "--in-memory",
                    f"--data-path={data}",
                    "--tcp-address=127.0.0.1:0",
                    "--http-address=127.0.0.1:0",
                ],
                stdout=subprocess.DEVNULL,
                stderr=log,
            )
            try:
                yield (*_listening(process, log_path), process.pid)
            finally:
                process.terminate()
                try:
                    process.wait(timeout=10)
                except subprocess.TimeoutExpired:
                    process.kill()
                    process.wait()


def _listening(process: subprocess.Popen[bytes], log_path: Path) -> tuple[str, str]:
    deadline = time.monotonic() + 30
    while True:
        found = {match[1]: match[2] for match in LISTENING.finditer(log_path.read_text())}
        if "TCP" in found and "HTTP" in found:
            return found["TCP"], found["HTTP"]
        if process.poll() is not None or time.monotonic() > deadline:
            raise BenchError(f"the broker did not start: {log_path.read_text()}")
        time.sleep(0.02)


def http(address: str, path: str, method: str = "POST", **query: str) -> bytes:
    """One request to the broker's HTTP API (topic set-up, checks and clean-up)."""
    url = f"http://{address}{path}?{urllib.parse.urlencode(query)}"
    request = urllib.request.Request(url, method=method)
    try:
        with urllib.request.urlopen(request, timeout=30) as response:  # noqa: S310 - http:// built here
            body: bytes = response.read()
            return body
    except OSError as error:  # URLError and HTTPError are OSErrors
        raise BenchError(f"broker HTTP {method} {address}{path}: {error}") from error


def message_count(http_address: str, topic: str) -> int:
    body = http(
        http_address,
        "/stats",
        "GET",
        format="json",
        topic=topic,
        include_clients="false",
        include_mem="false",
    )
    for entry in json.loads(body).get("topics") or []:
        if entry["topic_name"] == topic:
            return int(entry["message_count"])
    return 0


async def fill(address: str, topic: str, count: int, size: int, batch: int) -> None:
    """``count`` bodies by MPUB from a few tasks at once: fast, and not measured."""
    bodies = [b"x" * size] * batch
    full, rest = divmod(count, batch)
    async with open_producer(address) as producer:

        async def publish_share(share: int) -> None:
            for _ in range(share):
                await producer.publish_many(topic, bodies)

        async with trio.open_nursery() as nursery:
            for task in range(FILL_TASKS):
                nursery.start_soon(publish_share, len(range(task, full, FILL_TASKS)))
        if rest:
            await producer.publish_many(topic, bodies[:rest])


def cpu_seconds(pid: int | None) -> float | None:
    """A process's user+system CPU time so far, from /proc (None where it is not ours)."""
    if pid is None:
        return None
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()
    except OSError:
        return None
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def run_phase(
    client: str, phase: str, topic: str, arguments: argparse.Namespace, pin: list[str]
) -> Phase:
    command = [
        *pin,
        sys.executable,
        str(RUNNERS / f"run_{client.replace('-', '_')}.py"),
        phase,
        f"--nsqd-tcp-address={arguments.nsqd_tcp_address}",
        f"--topic={topic}",
        f"--count={arguments.count}",
        f"--size={arguments.size}",
        f"--concurrency={arguments.concurrency}",
        f"--batch={arguments.batch}",
        f"--max-in-flight={arguments.max_in_flight}",
    ]
    broker_before = cpu_seconds(arguments.broker_pid)
    try:
        done = subprocess.run(  # noqa: S603 - our own runner scripts
            command, capture_output=True, text=True, timeout=arguments.phase_timeout, check=False
        )
    except subprocess.TimeoutExpired as error:
        raise BenchError(f"no result in {arguments.phase_timeout:.0f} s") from error
    lines = done.stdout.strip().splitlines()
    if done.returncode or not lines:
        tail = " | ".join(done.stderr.strip().splitlines()[-5:])
        raise BenchError(f"runner exited {done.returncode}: {tail}")
    outcome = Phase(**json.loads(lines[-1]))
    if broker_before is not None and (broker_after := cpu_seconds(arguments.broker_pid)):
        outcome.broker_cpu_us = (broker_after - broker_before) / outcome.messages * 1e6
    return outcome


def measure(client: str, arguments: argparse.Namespace, pin: list[str]) -> ClientResult:
    """The three phases of one client, each on a topic of its own, deleted after."""
    result = ClientResult(client)
    started = time.perf_counter()
    prefix = f"client-bench-{client}-{time.time_ns()}"
    http_address, count = arguments.nsqd_http_address, arguments.count
    for phase in ("pub", "mpub", "consume"):
        topic = f"{prefix}-{phase}"
        try:
            if phase == "consume":
                http(http_address, "/topic/create", topic=topic)
                http(http_address, "/channel/create", topic=topic, channel=CHANNEL)
                trio.run(
                    fill, arguments.nsqd_tcp_address, topic, count, arguments.size, arguments.batch
                )
            outcome = result.phases[phase] = run_phase(client, phase, topic, arguments, pin)
            print(f"  {client:16} {phase:8} {outcome.rate:12,.0f} msg/s", flush=True)
            if phase != "consume" and (stored := message_count(http_address, topic)) != count:
                raise BenchError(f"the broker holds {stored:,} messages, not {count:,}")
        except (BenchError, OSError) as error:
            result.errors.append(f"{phase}: {error}")
            print(f"  {client:16} {phase:8} error: {error}", flush=True)
        finally:
            with suppress(BenchError):  # never created: a runner that failed to connect
                http(http_address, "/topic/delete", topic=topic)
    result.wall_seconds = time.perf_counter() - started
    return result


def _cell(value: float | None, spec: str, width: int) -> str:
    return f"{'-' if value is None else format(value, spec):>{width}}"


def _row(result: ClientResult, size: int) -> str:
    pub, mpub, consume = (result.phases.get(name) for name in ("pub", "mpub", "consume"))
    rss = max((phase.peak_rss_kib for phase in result.phases.values()), default=None)
    return " ".join(
        [
            f"{result.client:16}",
            _cell(pub.rate if pub else None, ",.0f", 10),
            _cell(pub.p50_ms if pub else None, ".2f", 7),
            _cell(pub.p99_ms if pub else None, ".2f", 7),
            _cell(mpub.rate if mpub else None, ",.0f", 11),
            _cell(consume.rate if consume else None, ",.0f", 14),
            _cell(consume.rate * size / 1e6 if consume else None, ".1f", 13),
            _cell(rss / MIB if rss is not None else None, ".1f", 13),
            _cell(result.wall_seconds, ".1f", 7),
        ]
    )


def _cpu_row(result: ClientResult) -> str:
    """CPU time per message of the runner and of the broker (our own broker only):
    a figure a shared machine moves less than the rates."""
    cells = [f"{result.client:16}"]
    for name, width in (("pub", 11), ("mpub", 12), ("consume", 15)):
        phase = result.phases.get(name)
        cells.append(_cell(phase.client_cpu_us if phase else None, ".2f", width))
        cells.append(_cell(phase.broker_cpu_us if phase else None, ".2f", 7))
    return " ".join(cells)


def print_table(results: list[ClientResult], size: int) -> None:
    print(
        f"\n{'client':16} {'pub msg/s':>10} {'p50 ms':>7} {'p99 ms':>7} {'MPUB msg/s':>11}"
        f" {'consume msg/s':>14} {'consume MB/s':>13} {'peak RSS MiB':>13} {'wall s':>7}"
    )
    for result in results:
        print(_row(result, size))
    print(
        f"\n{'CPU us/msg':16} {'pub client':>11} {'broker':>7} {'MPUB client':>12} {'broker':>7}"
        f" {'consume client':>15} {'broker':>7}"
    )
    for result in results:
        print(_cpu_row(result))
    for result in results:
        for error in result.errors:
            print(f"{result.client}: {error}")


def main(arguments: argparse.Namespace) -> None:
    clients = [name.strip() for name in arguments.clients.split(",") if name.strip()]
    if unknown := set(clients) - set(CLIENTS):
        raise SystemExit(f"unknown clients: {', '.join(sorted(unknown))} (from {CLIENTS})")
    broker_pin = [] if arguments.no_pin else ["taskset", "-c", arguments.broker_cpu]
    client_pin = [] if arguments.no_pin else ["taskset", "-c", arguments.client_cpu]
    own = arguments.nsqd_tcp_address is None
    broker = own_broker(broker_pin) if own else _given(arguments)
    started, load_before = time.perf_counter(), os.getloadavg()
    with broker as (tcp_address, http_address, arguments.broker_pid):
        arguments.nsqd_tcp_address, arguments.nsqd_http_address = tcp_address, http_address
        print(
            f"{arguments.count:,} messages of {arguments.size} bytes per phase;"
            f" {'an in-memory trionsq broker started here' if own else 'a running broker'}"
            f" at {tcp_address} (HTTP {http_address});"
            f" broker on CPU {'-' if arguments.no_pin or not own else arguments.broker_cpu},"
            f" clients on CPU {'-' if arguments.no_pin else arguments.client_cpu}",
            flush=True,
        )
        rounds: list[list[ClientResult]] = []
        for number in range(arguments.rounds):  # the clients in turn, round after round
            if arguments.rounds > 1:
                print(f"round {number + 1} of {arguments.rounds}", flush=True)
            rounds.append([measure(client, arguments, client_pin) for client in clients])
    for number, results in enumerate(rounds, 1):
        if arguments.rounds > 1:
            print(f"\nround {number}:", end="")
        print_table(results, arguments.size)
    if arguments.rounds > 1:
        print("\nmedian of each figure over the rounds:", end="")
        print_table(
            [median_result(by_client) for by_client in zip(*rounds, strict=True)], arguments.size
        )
    print(
        f"\ntotal {time.perf_counter() - started:.1f} s; load average before"
        f" {load_before[0]:.2f}, after {os.getloadavg()[0]:.2f} (1 min; anything else"
        " running on the two cores shows in the figures)"
    )
    if arguments.json:
        print(
            json.dumps(
                [
                    {
                        result.client: {
                            "phases": {name: vars(phase) for name, phase in result.phases.items()},
                            "errors": result.errors,
                            "wall_seconds": result.wall_seconds,
                        }
                        for result in results
                    }
                    for results in rounds
                ]
            )
        )


def median_result(results: tuple[ClientResult, ...]) -> ClientResult:
    """One client's rounds as one row: each phase's median rate (and its latencies
    and peak RSS from that round), the median wall time, every error."""
    merged = ClientResult(results[0].client)
    for name in ("pub", "mpub", "consume"):
        phases = sorted(
            (result.phases[name] for result in results if name in result.phases),
            key=lambda phase: phase.rate,
        )
        if phases:
            merged.phases[name] = phases[len(phases) // 2]
    merged.errors = [error for result in results for error in result.errors]
    merged.wall_seconds = statistics.median(result.wall_seconds for result in results)
    return merged


@contextmanager
def _given(arguments: argparse.Namespace) -> Iterator[tuple[str, str, int | None]]:
    """A running broker: its HTTP address defaults to the TCP host on port 4151 (its
    CPU time is not read: it may not be this machine's)."""
    host = arguments.nsqd_tcp_address.rpartition(":")[0]
    yield arguments.nsqd_tcp_address, arguments.nsqd_http_address or f"{host}:4151", None


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--nsqd-tcp-address", help="a running broker (default: start one)")
    parser.add_argument("--nsqd-http-address", help="its HTTP (default: TCP host, port 4151)")
    parser.add_argument("--clients", default=",".join(CLIENTS))
    parser.add_argument("--count", type=int, default=200_000, help="messages per phase")
    parser.add_argument("--size", type=int, default=200, help="body bytes")
    parser.add_argument("--concurrency", type=int, default=64, help="single publishes at once")
    parser.add_argument("--batch", type=int, default=200, help="bodies per MPUB")
    parser.add_argument("--max-in-flight", type=int, default=2500)
    parser.add_argument("--broker-cpu", default="0")
    parser.add_argument("--client-cpu", default="1")
    parser.add_argument("--no-pin", action="store_true", help="run without taskset")
    parser.add_argument("--phase-timeout", type=float, default=300.0, help="seconds")
    parser.add_argument("--rounds", type=int, default=1, help="the clients in turn, this often")
    parser.add_argument("--json", action="store_true", help="also print results as JSON")
    main(parser.parse_args())
