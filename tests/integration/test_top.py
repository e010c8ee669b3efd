"""``trionsq top`` against a real broker's admin stream (docs/admin.md): what it
shows, how fast it redraws under a flood of events, how it ends (close codes, AUTH,
no broker), and the ``trionsq top --once`` command as a subprocess."""

from __future__ import annotations

import io
import os
import pty
import re
import select
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import TYPE_CHECKING, Final

import attrs
import httpx
import pytest
import trio
from rich.console import Console

from trionsq import NsqdConfig, serve_nsqd
from trionsq.top import (
    MIN_RENDER_INTERVAL,
    CannotConnect,
    StreamClosed,
    TopState,
    follow,
    stream_url,
)

from ..auth_server import grant, refusing_address, start_auth_server

if TYPE_CHECKING:
    from collections.abc import Callable

    from trionsq.nursery_tree import BoundAddresses

GUARD: Final = 15.0
"""Longest any one follow may take."""
TRIONSQ: Final = str(Path(sys.executable).with_name("trionsq"))


def http_url(addresses: BoundAddresses) -> str:
    assert addresses.http is not None
    host, port = addresses.http
    return f"http://{host}:{port}"


def recording(*, terminal: bool = False) -> Console:
    """A console that keeps what it printed; ``terminal``: every redraw is written."""
    return Console(
        record=True, width=120, file=io.StringIO(), force_terminal=terminal, color_system=None
    )


async def prepare(addresses: BoundAddresses, *, messages: int = 3) -> None:
    """Topic ``orders`` with channels ``billing`` and ``audit``, ``messages`` published."""
    async with httpx.AsyncClient(base_url=http_url(addresses)) as http:
        (await http.post("/topic/create", params={"topic": "orders"})).raise_for_status()
        for channel in ("billing", "audit"):
            answer = await http.post(
                "/channel/create", params={"topic": "orders", "channel": channel}
            )
            answer.raise_for_status()
        for index in range(messages):
            answer = await http.post("/pub", params={"topic": "orders"}, content=b"m%d" % index)
            answer.raise_for_status()


def line_of(text: str, name: str) -> list[str]:
    """The words of the rendered row whose name is ``name``."""
    for line in text.splitlines():
        words = line.replace("├", " ").replace("└", " ").split()
        if words and words[0] == name:
            return words
    raise AssertionError(f"no row {name!r} in:\n{text}")


async def follow_in_background(
    nursery: trio.Nursery, url: str, **options: object
) -> Callable[[], TopState]:
    """Start ``follow`` (returns once its first snapshot is in); the returned
    function gives its final state after it has ended."""
    result: list[TopState] = []

    async def run(task_status: trio.TaskStatus[None]) -> None:
        result.append(await follow(url, task_status=task_status, **options))  # type: ignore[arg-type]

    await nursery.start(run)
    return lambda: result[0]


# ---------------------------------------------------------------------- what it shows


async def test_follow_shows_topics_channels_and_depth(nsqd: BoundAddresses) -> None:
    await prepare(nsqd, messages=3)
    console = recording()
    with trio.fail_after(GUARD):
        state = await follow(
            stream_url(http_url(nsqd), snapshot_interval_ms=100),
            console=console,
            max_snapshots=2,
        )
    assert state.snapshots == 2
    text = console.export_text()
    assert "nsqd 1.3.0" in text
    assert "health OK" in text
    assert line_of(text, "orders")[1] == "0"  # the messages went on to the channels
    assert line_of(text, "billing")[1:3] == ["3", "0"]  # depth, in-flight
    assert line_of(text, "audit")[1:3] == ["3", "0"]


async def test_follow_shows_events_between_snapshots(nsqd: BoundAddresses) -> None:
    await prepare(nsqd, messages=1)
    console = recording()

    def paused(state: TopState) -> bool:
        return any(line.kind == "channel_paused" for line in state.events)

    with trio.fail_after(GUARD):
        async with trio.open_nursery() as nursery:
            final = await follow_in_background(
                nursery,
                stream_url(http_url(nsqd), snapshot_interval_ms=60_000),  # one snapshot only
                console=console,
                stop_when=paused,
            )
            async with httpx.AsyncClient(base_url=http_url(nsqd)) as http:
                answer = await http.post(
                    "/channel/pause", params={"topic": "orders", "channel": "billing"}
                )
                answer.raise_for_status()
    state = final()
    assert state.snapshots == 1
    text = console.export_text()
    assert "billing (paused)" in text
    assert re.search(r"channel_paused +orders/billing", text), text


async def test_follow_filters_topics(nsqd: BoundAddresses) -> None:
    await prepare(nsqd)
    async with httpx.AsyncClient(base_url=http_url(nsqd)) as http:
        (await http.post("/topic/create", params={"topic": "other"})).raise_for_status()
    with trio.fail_after(GUARD):
        state = await follow(
            stream_url(http_url(nsqd), topics=["other"], snapshot_interval_ms=100),
            max_snapshots=1,
        )
    assert [topic.name for topic in state.topics] == ["other"]


async def test_a_flood_of_events_is_drawn_a_few_times_a_second(nsqd: BoundAddresses) -> None:
    """3,000 events in about a second: every one reaches the state, ~4 redraws a second."""
    await prepare(nsqd, messages=0)
    console = recording(terminal=True)
    flood = 3000

    def finished(state: TopState) -> bool:
        return any(line.text == "orders/finished" for line in state.events)

    with trio.fail_after(GUARD):
        async with trio.open_nursery() as nursery:
            final = await follow_in_background(
                nursery,
                stream_url(http_url(nsqd), snapshot_interval_ms=60_000),
                console=console,
                stop_when=finished,
            )
            started = trio.current_time()
            for index in range(flood):
                nsqd.broker.set_topic_paused("orders", paused=index % 2 == 0)
                if index % 100 == 99:
                    await trio.sleep(0.03)  # bursts of 100: far below the 10,000 queue
            await nsqd.broker.create_channel("orders", "finished")
        elapsed = trio.current_time() - started
    state = final()
    assert state.missed == 0
    assert state.last_seq >= flood + 2  # hello, snapshot, the flood and the marker
    renders = console.export_text().count("trionsq top ")
    assert 1 <= renders <= 3 + elapsed / MIN_RENDER_INTERVAL, (renders, elapsed)


# ---------------------------------------------------------------------- how it ends


async def test_a_subscriber_that_falls_behind_is_told_it_is_too_slow(
    nsqd: BoundAddresses,
) -> None:
    """More events at once than the broker queues for one subscriber: code 4008."""
    await prepare(nsqd, messages=0)
    too_slow = pytest.RaisesExc(StreamClosed, match="too slow", check=lambda e: e.code == 4008)
    with trio.fail_after(GUARD), pytest.RaisesGroup(too_slow):
        async with trio.open_nursery() as nursery:
            await follow_in_background(
                nursery, stream_url(http_url(nsqd), snapshot_interval_ms=60_000)
            )
            for index in range(10_050):  # no checkpoint: the writer cannot drain
                nsqd.broker.set_topic_paused("orders", paused=index % 2 == 0)
            await trio.sleep_forever()


async def test_a_broker_shutting_down_ends_the_stream() -> None:
    broker_scope = trio.CancelScope()

    async def broker(*, task_status: trio.TaskStatus[BoundAddresses]) -> None:
        with broker_scope:
            await serve_nsqd(NsqdConfig.loopback(), task_status=task_status)

    with trio.fail_after(GUARD), pytest.RaisesGroup(StreamClosed) as caught:
        async with trio.open_nursery() as nursery:
            addresses: BoundAddresses = await nursery.start(broker)
            await follow_in_background(
                nursery, stream_url(http_url(addresses), snapshot_interval_ms=60_000)
            )
            broker_scope.cancel()
    (closed,) = caught.value.exceptions
    assert isinstance(closed, StreamClosed)
    # docs/admin.md says 1000; the broker's stream drops the socket when it stops (1006)
    expected = {1000: "the broker is shutting down", 1006: "the connection was lost"}
    assert closed.code in expected, closed
    assert expected[closed.code] in str(closed)


@pytest.mark.parametrize("secret", [None, "wrong"])
async def test_auth_without_a_valid_secret(nursery: trio.Nursery, secret: str | None) -> None:
    server = await start_auth_server(nursery, {"good": grant()})
    addresses: BoundAddresses = await nursery.start(
        serve_nsqd, NsqdConfig.loopback(auth_http_addresses=(server.address,))
    )
    with trio.fail_after(GUARD), pytest.raises(StreamClosed) as caught:
        await follow(stream_url(http_url(addresses)), auth_secret=secret, max_snapshots=1)
    assert caught.value.code == 4001
    expected = "refused the auth secret" if secret else "needs an auth secret (--auth-secret)"
    assert expected in str(caught.value)


async def test_auth_with_a_valid_secret(nursery: trio.Nursery) -> None:
    server = await start_auth_server(nursery, {"good": grant()})
    addresses: BoundAddresses = await nursery.start(
        serve_nsqd, NsqdConfig.loopback(auth_http_addresses=(server.address,))
    )
    with trio.fail_after(GUARD):
        state = await follow(stream_url(http_url(addresses)), auth_secret="good", max_snapshots=1)  # noqa: S106
    assert state.broker is not None
    assert state.broker.auth_required
    assert state.snapshots == 1
    assert server.secrets_seen() == ["good"]


async def test_nothing_listening_is_a_connect_error() -> None:
    with (
        refusing_address() as address,
        trio.fail_after(GUARD),
        pytest.raises(CannotConnect, match=r"cannot connect to ws://.*: .*refused"),
    ):
        await follow(stream_url(address), max_snapshots=1)


async def test_an_http_server_without_the_stream_is_a_connect_error(
    nsqd: BoundAddresses,
) -> None:
    url = stream_url(http_url(nsqd)).replace("/admin/stream", "/no/stream/here")
    with trio.fail_after(GUARD), pytest.raises(CannotConnect, match="HTTP 404"):
        await follow(url, max_snapshots=1)


# ---------------------------------------------------------------------- the command


NO_HTTP: Final = attrs.evolve(NsqdConfig.loopback(), http_address="")


@pytest.fixture
def nsqd_config(request: pytest.FixtureRequest) -> NsqdConfig:
    config: NsqdConfig = getattr(request, "param", NsqdConfig.loopback())
    return config


def run_top(*arguments: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(  # noqa: S603 - our own command
        [TRIONSQ, "top", *arguments],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
        env={"COLUMNS": "120", "PATH": str(Path(sys.executable).parent), "TERM": "dumb"},
    )


def test_top_once_prints_the_topics(nsqd_thread: BoundAddresses) -> None:
    url = http_url(nsqd_thread)
    with httpx.Client(base_url=url) as http:
        http.post("/topic/create", params={"topic": "orders"}).raise_for_status()
        http.post("/channel/create", params={"topic": "orders", "channel": "billing"})
        for body in (b"a", b"b"):
            http.post("/pub", params={"topic": "orders"}, content=body).raise_for_status()
    assert nsqd_thread.http is not None
    host, port = nsqd_thread.http
    done = run_top("--once", "--http-address", f"{host}:{port}", "--sort", "name")
    assert done.returncode == 0, done.stderr
    assert done.stderr == ""
    assert line_of(done.stdout, "orders")[1] == "0"
    assert line_of(done.stdout, "billing")[1] == "2"
    assert "health OK" in done.stdout


@pytest.mark.parametrize("nsqd_config", [NO_HTTP], indirect=True)
def test_top_once_at_a_broker_without_http_fails_in_one_line(
    nsqd_thread: BoundAddresses,
) -> None:
    assert nsqd_thread.http is None
    host, port = nsqd_thread.tcp  # what answers there speaks NSQ's TCP protocol, not HTTP
    done = run_top("--once", "--http-address", f"{host}:{port}")
    assert done.returncode == 1
    assert done.stdout == ""
    assert done.stderr.startswith("trionsq top: ")
    assert done.stderr.count("\n") == 1, done.stderr
    assert "Traceback" not in done.stderr


def test_top_once_with_nothing_listening_fails_in_one_line() -> None:
    with refusing_address() as address:
        done = run_top("--once", "--http-address", address)
    assert done.returncode == 1
    assert re.fullmatch(r"trionsq top: cannot connect to ws://\S+: .*refused\n", done.stderr)


@pytest.mark.parametrize(
    ("arguments", "message"),
    [
        (["--interval", "10ms"], "at least 100ms"),
        (["--interval", "soon"], "invalid duration"),
        (["--sort", "size"], "'size' is not one of"),
    ],
)
def test_top_refuses_bad_options(arguments: list[str], message: str) -> None:
    done = run_top(*arguments)
    assert done.returncode == 2
    assert message in done.stderr


# --- issue 31, item 8 ------------------------------------------------------------


def test_top_once_shows_rates_from_two_snapshots(nsqd_thread: BoundAddresses) -> None:
    """A rate is the change between two snapshots: one alone shows every rate as 0."""
    url = http_url(nsqd_thread)
    stop = threading.Event()

    def publish_until_stopped() -> None:
        with httpx.Client(base_url=url) as http:
            http.post("/topic/create", params={"topic": "busy"}).raise_for_status()
            http.post("/channel/create", params={"topic": "busy", "channel": "c"})
            while not stop.is_set():
                http.post("/mpub", params={"topic": "busy"}, content=b"a\nb\nc\nd")

    publisher = threading.Thread(target=publish_until_stopped)
    publisher.start()
    try:
        assert nsqd_thread.http is not None
        host, port = nsqd_thread.http
        done = run_top("--once", "--interval", "200ms", "--http-address", f"{host}:{port}")
    finally:
        stop.set()
        publisher.join()
    assert done.returncode == 0, done.stderr
    _name, _depth, rate, *_ = line_of(done.stdout, "busy")
    assert float(rate.replace(",", "")) > 0, done.stdout
    channel = line_of(done.stdout, "c")
    assert float(channel[4].replace(",", "")) > 0, done.stdout  # its msg/s


def test_q_quits_top_without_echoing_it(nsqd_thread: BoundAddresses) -> None:
    """In a terminal, ``q`` ends ``trionsq top`` at once (exit 0) and, as in top(1),
    no key typed is echoed over the view."""
    assert nsqd_thread.http is not None
    host, port = nsqd_thread.http
    leader, follower = pty.openpty()
    process = subprocess.Popen(  # noqa: S603 - our own command
        [TRIONSQ, "top", "--http-address", f"{host}:{port}"],
        stdin=follower,
        stdout=follower,
        stderr=follower,
        env={
            "COLUMNS": "120",
            "LINES": "40",
            "PATH": str(Path(sys.executable).parent),
            "TERM": "xterm",
        },
        close_fds=True,
    )
    os.close(follower)
    seen = bytearray()

    def read_for(seconds: float) -> None:
        end = time.monotonic() + seconds
        while (left := end - time.monotonic()) > 0:
            ready, _, _ = select.select([leader], [], [], left)
            if not ready:
                return
            try:
                chunk = os.read(leader, 65536)
            except OSError:  # the process closed the terminal
                return
            if not chunk:
                return
            seen.extend(chunk)

    try:
        deadline = time.monotonic() + 15
        while b"topics, by" not in seen and time.monotonic() < deadline:
            read_for(0.2)
        assert b"topics, by" in seen, seen.decode(errors="replace")
        before = len(seen)
        os.write(leader, b"zz")  # no key of top's: ignored, and not shown
        read_for(0.5)
        assert b"z" not in seen[before:], seen[before:].decode(errors="replace")
        assert process.poll() is None
        os.write(leader, b"q")
        read_for(0.2)
        assert process.wait(timeout=5) == 0
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()
        os.close(leader)
