"""Storage faults against the ``nsqd`` command: a full disk, a read-only data path and
no descriptors left. Each broker runs in its own mount namespace on a small tmpfs
(``unshare -m``; the tests run as root here and on CI), so the faults are real ones
from the kernel, and the remedy (more space, writable again, descriptors freed) is
applied to the live broker with ``nsenter``.

What must hold (issue 14): the publisher gets nsqd's error with the reason, every
other client is served, /ping says NOK while storing fails and OK once it works
again, publishing resumes, nothing acknowledged is lost, and the process never exits.
"""

from __future__ import annotations

import os
import re
import resource
import signal
import subprocess
import sys
from contextlib import asynccontextmanager
from pathlib import Path
from typing import TYPE_CHECKING, TypeVar

import trio

from trionsq.http.client import http_request
from trionsq.protocol import Fin, Mpub, Pub, Rdy, Sub
from trionsq.protocol.client import ErrorReply, MessageFrame, Response
from trionsq.testing import ProtocolClient

if TYPE_CHECKING:
    from collections.abc import AsyncIterator

    from trionsq.protocol.client import Frame

NSQD = Path(sys.executable).parent / "nsqd"
LISTENING = re.compile(rb"(TCP|HTTP): listening on 127\.0\.0\.1:(\d+)")
WAIT = 20.0


class BrokerProcess:
    """A broker command running as a subprocess: its stderr collected, the ports it
    listens on, HTTP requests to it."""

    def __init__(self, process: trio.Process) -> None:
        self.process = process
        self.stderr = b""
        self.tcp = ("127.0.0.1", 0)
        self.http_address = ""

    async def read_stderr(self) -> None:
        assert self.process.stderr is not None
        async for chunk in self.process.stderr:
            self.stderr += chunk

    async def wait_listening(self) -> None:
        with trio.fail_after(WAIT):
            while len(LISTENING.findall(self.stderr)) < 2:
                assert self.process.returncode is None, self.stderr.decode()
                await trio.sleep(0.02)
        ports = {proto: int(port) for proto, port in LISTENING.findall(self.stderr)}
        self.tcp = ("127.0.0.1", ports[b"TCP"])
        self.http_address = f"127.0.0.1:{ports[b'HTTP']}"

    async def http(self, method: str, target: str, body: bytes = b"") -> tuple[int, bytes]:
        reply = await http_request(
            method, self.http_address, target, body=body, connect_timeout=5, request_timeout=10
        )
        return reply.status, reply.body

    async def ping(self) -> tuple[int, bytes]:
        return await self.http("GET", "/ping")

    async def process_stop(self) -> int:
        """SIGTERM, as a service manager stops it; the exit code."""
        self.process.send_signal(signal.SIGTERM)
        with trio.fail_after(WAIT):
            return await self.process.wait()

    def open_descriptors(self) -> int:
        return len(os.listdir(f"/proc/{self.process.pid}/fd"))


Running = TypeVar("Running", bound=BrokerProcess)


@asynccontextmanager
async def listening(broker: Running) -> AsyncIterator[Running]:
    """``broker`` once it listens (its stderr read meanwhile); killed at the end."""
    process = broker.process
    try:
        async with trio.open_nursery() as nursery:
            nursery.start_soon(broker.read_stderr)
            await broker.wait_listening()
            yield broker
            nursery.cancel_scope.cancel()
    finally:
        if process.returncode is None:
            process.kill()
            with trio.move_on_after(10):
                await process.wait()


class NamespacedNsqd(BrokerProcess):
    """``nsqd`` on a tmpfs of its own, in a mount namespace of its own."""

    def __init__(self, process: trio.Process, mount: Path) -> None:
        super().__init__(process)
        self.mount = mount

    def remount(self, options: str) -> None:
        """Change the tmpfs under the running broker (its namespace, its mount)."""
        pid = str(self.process.pid)
        command = ["nsenter", "-t", pid, "-m", "mount", "-o", f"remount,{options}", "tmpfs"]
        subprocess.run([*command, str(self.mount)], check=True, timeout=10)  # noqa: S603


@asynccontextmanager
async def namespaced_nsqd(
    tmp_path: Path, size: str, *flags: str, before: str = "", after: str = ""
) -> AsyncIterator[NamespacedNsqd]:
    """Mount a ``size`` tmpfs, run ``before`` (shell), start nsqd on it with ``flags``
    (``after`` goes in front of the command, e.g. a prlimit); killed at the end."""
    mount = tmp_path / "data"
    mount.mkdir()
    script = (
        f"mount -t tmpfs -o size={size} tmpfs {mount} && {before or 'true'} && exec {after} "
        f"{NSQD} --data-path={mount} --tcp-address=127.0.0.1:0 --http-address=127.0.0.1:0 "
        + " ".join(flags)
    )
    process = await trio.lowlevel.open_process(
        ["unshare", "-m", "sh", "-c", script],
        stdin=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
    )
    async with listening(NamespacedNsqd(process, mount)) as broker:
        yield broker


async def frame(client: ProtocolClient) -> Frame:
    frames = await client.read(1)
    assert frames, "the broker closed the connection"
    return frames[0]


async def closed(client: ProtocolClient) -> bool:
    """Whether the broker closed the connection (EOF with nothing more)."""
    with trio.fail_after(WAIT):
        return not await client.stream.receive_some(4096)


async def publish_until_refused(client: ProtocolClient, topic: str) -> tuple[list[bytes], Frame]:
    """PUB numbered 1 KB bodies one at a time until one is not OK; the acknowledged
    bodies and the refusal."""
    acked: list[bytes] = []
    while True:
        body = f"{len(acked):08d}".encode() + b"x" * 1016
        await client.send(Pub(topic, body))
        reply = await frame(client)
        if not (isinstance(reply, Response) and reply.is_ok):
            return acked, reply
        acked.append(body)
        assert len(acked) < 100_000, "the disk never filled"


async def consume(client: ProtocolClient, seen: set[bytes], expected: set[bytes]) -> None:
    """Read and FIN into ``seen`` until every expected body is there (RDY given)."""
    with trio.fail_after(WAIT):
        while not expected <= seen:
            reply = await frame(client)
            if isinstance(reply, MessageFrame):
                seen.add(reply.message.body)
                await client.send(Fin(reply.message.id))


def refusal_text(reply: Frame) -> str:
    assert isinstance(reply, ErrorReply), reply
    return reply.error.text


async def wait_healthy(broker: NamespacedNsqd) -> None:
    """/ping says OK again: every kind of write has worked since (the channel states
    and metadata are tried once a second)."""
    answer = (0, b"")
    with trio.move_on_after(WAIT):
        while True:
            answer = await broker.ping()
            if answer == (200, b"OK"):
                return
            await trio.sleep(0.1)
    raise AssertionError(f"still unhealthy: {answer}")


def assert_ok(reply: Frame) -> None:
    assert isinstance(reply, Response), reply
    assert reply.is_ok, reply


async def test_a_full_disk_refuses_publishes_with_the_reason_and_resumes_when_space_returns(
    tmp_path: Path,
) -> None:
    async with namespaced_nsqd(tmp_path, "1m", "--max-bytes-per-file=65536") as broker:
        consumer = await ProtocolClient.connect(broker.tcp)
        await consumer.send(Sub("t", "c"))
        assert isinstance(await frame(consumer), Response)
        producer = await ProtocolClient.connect(broker.tcp)

        acked, refusal = await publish_until_refused(producer, "t")
        assert len(acked) > 500  # most of the megabyte held messages
        assert re.fullmatch(
            r"E_PUB_FAILED PUB failed t-0\.\d{6}\.log: no space left on device",
            refusal_text(refusal),
        )
        assert await closed(producer)  # nsqd's PUB failure is fatal
        await producer.stream.aclose()

        # the other verbs get theirs; HTTP a 500 with the reason; /ping says why
        batch = await ProtocolClient.connect(broker.tcp)
        await batch.send(Mpub("t", (b"a" * 4000,) * 20))
        assert refusal_text(await frame(batch)).startswith("E_MPUB_FAILED MPUB failed t-0.")
        status, body = await broker.http("POST", "/pub?topic=t", b"b" * 4000)
        assert status == 500
        assert re.fullmatch(
            rb'\{"message":"PUB_FAILED t-0\.\d{6}\.log: no space left on device"\}', body
        )
        status, body = await broker.ping()
        assert status == 500
        assert re.fullmatch(rb"NOK - \S+: no space left on device", body), body
        status, body = await broker.http("GET", "/stats?format=json")
        assert status == 200
        assert b'"health":"NOK - ' in body

        # the consumer is served meanwhile: everything acknowledged, each FIN taken
        await consumer.send(Rdy(200))
        seen: set[bytes] = set()
        await consume(consumer, seen, set(acked[:300]))
        await trio.sleep(1.5)  # a persister tick with states that cannot be written
        assert broker.process.returncode is None

        broker.remount("size=16m")
        producer = await ProtocolClient.connect(broker.tcp)
        await producer.send(Pub("t", b"after the disk grew"))
        assert_ok(await frame(producer))
        await wait_healthy(broker)

        await consume(consumer, seen, {*acked, b"after the disk grew"})  # nothing lost
        for client in (consumer, producer, batch):
            await client.stream.aclose()
        assert await broker.process_stop() == 0
    assert b"Traceback" not in broker.stderr
    errors = [line for line in broker.stderr.splitlines() if b" ERROR: " in line]
    assert 1 <= len(errors) <= 2, errors  # appending; channel states and metadata
    assert all(b"(logged once until it succeeds again)" in line for line in errors), errors


async def test_a_read_only_data_path_refuses_publishes_and_resumes_once_writable(
    tmp_path: Path,
) -> None:
    data = tmp_path / "data"
    async with namespaced_nsqd(
        tmp_path, "4m", before=f"mount -o remount,ro tmpfs {data}"
    ) as broker:
        consumer = await ProtocolClient.connect(broker.tcp)
        await consumer.send(Sub("t", "c"), Rdy(10))
        assert isinstance(await frame(consumer), Response)
        assert await broker.ping() == (200, b"OK")  # nothing has failed yet

        upstream = await ProtocolClient.connect(broker.tcp)
        await upstream.send(Pub("t", b"refused"))
        assert refusal_text(await frame(upstream)) == (
            "E_PUB_FAILED PUB failed t-0.000000.log: read-only file system"
        )
        assert await closed(upstream)
        await upstream.stream.aclose()
        # Youzan's PUB naming a partition: the same reason, and the connection stays
        youzan = await ProtocolClient.connect(broker.tcp)
        await youzan.send(Pub("t", b"refused too", partition=0))
        assert refusal_text(await frame(youzan)) == (
            "E_PUB_FAILED t-0.000000.log: read-only file system"
        )
        assert await broker.ping() == (500, b"NOK - t-0.000000.log: read-only file system")
        await trio.sleep(1.5)  # a persister tick: metadata cannot be written either
        assert broker.process.returncode is None

        broker.remount("rw")
        await youzan.send(Pub("t", b"stored", partition=0))
        assert_ok(await frame(youzan))
        seen: set[bytes] = set()
        await consume(consumer, seen, {b"stored"})
        assert seen == {b"stored"}
        await wait_healthy(broker)
        for client in (consumer, youzan):
            await client.stream.aclose()
        assert await broker.process_stop() == 0
    assert b"Traceback" not in broker.stderr


def lowest_free_descriptor(pid: int) -> int:
    """The descriptor number the process's next open would get."""
    used = {int(name) for name in os.listdir(f"/proc/{pid}/fd")}
    return next(number for number in range(len(used) + 1) if number not in used)


def limit_descriptors(pid: int, soft: int, hard: int) -> None:
    """Set a running process's open-file limit (as ``prlimit --pid`` does)."""
    resource.prlimit(pid, resource.RLIMIT_NOFILE, (soft, hard))


async def test_no_descriptors_left_refuses_what_needs_one_and_serves_the_rest(
    tmp_path: Path,
) -> None:
    """The open-file limit lowered under the running broker to the descriptors it
    has (as if something else in the process had taken the rest; the broker's own
    budget keeps its files and connections below the limit, docs/storage.md): a
    cold read waits and retries, a publish that needs a new file is refused with
    the reason, established clients go on; descriptors back bring everything back,
    nothing lost."""
    limit = 160
    async with namespaced_nsqd(
        tmp_path, "16m", "--mem-queue-size=0", after=f"prlimit --nofile={limit}:{limit}"
    ) as broker:
        pid = broker.process.pid
        producer = await ProtocolClient.connect(broker.tcp)
        backlog = [f"{n:06d}".encode() for n in range(3000)]  # beyond the 1,024 in memory
        for start in range(0, len(backlog), 500):
            await producer.send(Mpub("base", tuple(backlog[start : start + 500])))
            assert_ok(await frame(producer))
        consumer = await ProtocolClient.connect(broker.tcp)
        youzan = await ProtocolClient.connect(broker.tcp)

        await trio.sleep(1.5)  # the persister and syncer are done with what changed
        limit_descriptors(pid, lowest_free_descriptor(pid), limit)

        # a channel behind the memory tail must open a segment to read: it waits
        await consumer.send(Sub("base", "c"), Rdy(500))
        assert isinstance(await frame(consumer), Response)
        with trio.move_on_after(2.5):
            early = await consumer.read(1)
            raise AssertionError(f"delivered without a descriptor to read with: {early}")
        assert b"reading a log segment failed: base-0.000000.log: too many open files" in (
            broker.stderr
        )
        # an append to the open segment needs none; a new topic's first one does
        await youzan.send(Pub("base", b"appended", partition=0))
        assert_ok(await frame(youzan))
        await youzan.send(Pub("newtopic", b"needs a segment"))
        assert re.fullmatch(  # the file it failed on: the data directory, or the segment
            r"E_PUB_FAILED PUB failed \S+: too many open files", refusal_text(await frame(youzan))
        )
        assert broker.process.returncode is None

        limit_descriptors(pid, limit, limit)
        seen: set[bytes] = set()
        await consume(consumer, seen, {*backlog, b"appended"})
        await producer.send(Pub("newtopic", b"now it has one"))
        assert_ok(await frame(producer))
        await wait_healthy(broker)
        for client in (consumer, producer, youzan):
            await client.stream.aclose()
        assert await broker.process_stop() == 0
    assert b"Traceback" not in broker.stderr
    assert b"accept returned EMFILE" not in broker.stderr


async def test_the_open_file_soft_limit_is_raised_to_the_hard_one_at_start(
    tmp_path: Path,
) -> None:
    """As nsqd (a Go program) does: a 1,024 soft limit would cap topics and clients."""
    async with namespaced_nsqd(tmp_path, "1m", after="prlimit --nofile=256:4096") as broker:
        limits = await trio.Path(f"/proc/{broker.process.pid}/limits").read_text()
        assert re.search(r"^Max open files\s+4096\s+4096\s+files", limits, re.MULTILINE), limits
        assert await broker.process_stop() == 0
