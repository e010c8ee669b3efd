"""The admin page (docs/admin.md) in a real browser against real brokers.

Debian's chromium, driven by playwright (which must never download a browser of its
own): ``make`` installs chromium before the suite runs, and a machine without it fails
here rather than skipping, so a green run always means the page was really seen
working. Every wait is one of playwright's ``expect`` waits, which return as soon as the
page shows the awaited thing.
"""

from __future__ import annotations

import os
import re
import socket
import time
from contextlib import contextmanager
from typing import TYPE_CHECKING

import httpx
import pytest
import trio
from playwright.sync_api import expect, sync_playwright

from trionsq.config import NsqdConfig
from trionsq.nursery_tree import serve_nsqd

from ..auth_server import grant, start_auth_server
from ..integration.fake_go_nsqd import FakeGoNsqd

if TYPE_CHECKING:
    from collections.abc import Iterator
    from pathlib import Path

    from playwright.sync_api import Page

    from trionsq.lookupd.server import LookupdAddresses
    from trionsq.nursery_tree import BoundAddresses
    from trionsq.testing import NsqCluster

CHROMIUM = "/usr/bin/chromium"
CHROMIUM_ARGS = [
    "--headless=new",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]


@contextmanager
def browser_page() -> Iterator[Page]:
    """A page of a fresh headless chromium (a new empty profile), closed afterwards.

    Playwright's objects belong to the thread that made them: open and use this in
    one thread.
    """
    if not os.path.exists(CHROMIUM):
        pytest.fail(f"{CHROMIUM} is missing: `make {CHROMIUM}` installs it", pytrace=False)
    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        try:
            page = browser.new_page(viewport={"width": 1400, "height": 1000})
            errors: list[str] = []
            page.on("pageerror", lambda error: errors.append(str(error)))
            yield page
            assert errors == [], f"the page's script failed: {errors}"
        finally:
            browser.close()


def http_of(addresses: BoundAddresses) -> tuple[str, int]:
    assert addresses.http is not None
    return addresses.http


def http_url(address: tuple[str, int], path: str) -> str:
    host, port = address
    return f"http://{host}:{port}{path}"


def post(address: tuple[str, int], path: str, body: bytes = b"") -> None:
    response = httpx.post(http_url(address, path), content=body)
    assert response.status_code == 200, response.text


def topic_stats(address: tuple[str, int], topic: str) -> dict[str, object]:
    stats = httpx.get(http_url(address, f"/stats?format=json&topic={topic}")).json()
    (found,) = [t for t in stats["topics"] if t["topic_name"] == topic]
    return found  # type: ignore[no-any-return]


def confirm(page: Page, button: str, expected_text: str) -> None:
    """Click an action, check the in-page confirmation names what it does, say yes."""
    page.get_by_test_id(button).click()
    expect(page.get_by_test_id("confirm-dialog")).to_be_visible()
    expect(page.get_by_test_id("confirm-text")).to_contain_text(expected_text)
    page.get_by_test_id("confirm-yes").click()
    expect(page.get_by_test_id("confirm-dialog")).to_be_hidden()


def test_broker_page_follows_the_stream_and_pauses(
    nsqd_thread: BoundAddresses, tmp_path: Path
) -> None:
    http = http_of(nsqd_thread)
    broker = f"{http[0]}:{http[1]}"
    started = time.monotonic()
    with browser_page() as page:
        page.goto(http_url(http, "/admin"))
        expect(page.get_by_test_id("page-mode")).to_have_text("broker")
        expect(page.get_by_test_id(f"broker-status-{broker}")).to_have_text("connected")
        expect(page.get_by_test_id(f"broker-host-{broker}")).to_have_text(socket.gethostname())
        expect(page.get_by_test_id(f"broker-health-{broker}")).to_have_text("OK")

        # a topic created after the page loaded shows up without a reload
        post(http, "/topic/create?topic=orders")
        expect(page.get_by_test_id("topic-orders")).to_be_visible()
        expect(page.get_by_test_id("topic-depth-orders")).to_have_text("0")
        expect(page.locator('[data-testid="event"][data-type="topic_created"]')).to_have_count(1)

        post(http, "/mpub?topic=orders", b"\n".join(b"message %d" % i for i in range(25)))
        expect(page.get_by_test_id("topic-depth-orders")).to_have_text("25")
        expect(page.get_by_test_id("topic-messages-orders")).to_have_text("25")

        # a channel and a consumer (a raw protocol V2 client with RDY 0)
        post(http, "/channel/create?topic=orders&channel=billing")
        channel = "orders/billing"
        expect(page.get_by_test_id(f"channel-{channel}")).to_be_visible()
        expect(page.get_by_test_id(f"channel-depth-{channel}")).to_have_text("25")
        expect(page.get_by_test_id("topic-depth-orders")).to_have_text("0")
        with socket.create_connection(nsqd_thread.tcp, timeout=5) as consumer:
            consumer.sendall(b"  V2SUB orders billing\n")
            assert consumer.recv(64).endswith(b"OK")
            expect(page.get_by_test_id(f"channel-clients-{channel}")).to_have_text("1")
            expect(page.get_by_test_id(f"channel-consumers-{channel}")).to_contain_text("127.0.0.1")

            # cancelling the confirmation does nothing
            page.get_by_test_id("delete-topic-orders").click()
            page.get_by_test_id("confirm-no").click()
            expect(page.get_by_test_id("confirm-dialog")).to_be_hidden()

            confirm(page, "pause-topic-orders", "Pause topic “orders”")
            expect(page.get_by_test_id("topic-paused-orders")).to_be_visible()
            expect(page.get_by_test_id("toast").last).to_have_text("topic.pause orders: ok")
            expect(page.get_by_test_id("unpause-topic-orders")).to_be_visible()
            assert topic_stats(http, "orders")["paused"] is True

            confirm(page, f"pause-channel-{channel}", "Pause channel “billing”")
            expect(page.get_by_test_id(f"channel-paused-{channel}")).to_be_visible()
            channels = topic_stats(http, "orders")["channels"]
            assert isinstance(channels, list)
            assert [c["paused"] for c in channels] == [True]

            shot = tmp_path / "admin_page.png"
            page.screenshot(path=shot, full_page=True)
            print(f"\nadmin page screenshot: {shot}")  # noqa: T201 - pytest -s shows it
        expect(page.get_by_test_id(f"channel-clients-{channel}")).to_have_text("0")
        assert topic_stats(http, "orders")["paused"] is True
    print(f"browser test took {time.monotonic() - started:.1f}s")  # noqa: T201


@pytest.mark.nsq_cluster(brokers=2, lookupds=1)
async def test_lookupd_page_shows_every_broker(nsq_cluster: NsqCluster, tmp_path: Path) -> None:
    cluster = nsq_cluster
    async with httpx.AsyncClient() as client:
        for index, topics in ((0, ("alpha", "shared")), (1, ("beta", "shared"))):
            for topic in topics:
                url = http_url(http_of(cluster.brokers[index]), f"/topic/create?topic={topic}")
                assert (await client.post(url)).status_code == 200
    await cluster.wait_registered()
    # the browser waits in a worker thread while this thread's Trio loop runs the cluster
    await trio.to_thread.run_sync(drive_cluster_page, cluster, tmp_path)


def drive_cluster_page(cluster: NsqCluster, tmp_path: Path) -> None:
    """The browser's side, in a worker thread; the cluster is reached over sockets, or
    through the Trio thread (``trio.from_thread``) to stop and start a broker."""
    started = time.monotonic()
    lookupd = cluster.lookupds[0].http
    brokers = [http_of(broker) for broker in cluster.brokers]
    keys = [f"127.0.0.1:{http[1]}" for http in brokers]  # the cluster's broadcast address
    with browser_page() as page:
        page.goto(http_url(lookupd, "/admin"))
        expect(page.get_by_test_id("page-mode")).to_have_text("cluster")
        for key in keys:
            expect(page.get_by_test_id(f"broker-status-{key}")).to_have_text("connected")
        for topic in ("alpha", "beta", "shared"):
            expect(page.get_by_test_id(f"topic-{topic}")).to_be_visible()
        expect(page.get_by_test_id(f"topic-broker-alpha@{keys[0]}")).to_be_visible()
        expect(page.get_by_test_id(f"topic-broker-beta@{keys[1]}")).to_be_visible()
        for key in keys:
            expect(page.get_by_test_id(f"topic-broker-shared@{key}")).to_be_visible()

        # one topic merged across brokers: its depth is the sum of theirs
        post(brokers[0], "/mpub?topic=shared", b"a\nb\nc")
        post(brokers[1], "/mpub?topic=shared", b"d\ne\nf\ng")
        expect(page.get_by_test_id(f"topic-broker-depth-shared@{keys[0]}")).to_have_text("3")
        expect(page.get_by_test_id(f"topic-broker-depth-shared@{keys[1]}")).to_have_text("4")
        expect(page.get_by_test_id("topic-depth-shared")).to_have_text("7")

        # a topic created later on the second broker appears, from its stream
        post(brokers[1], "/topic/create?topic=gamma")
        expect(page.get_by_test_id(f"topic-broker-gamma@{keys[1]}")).to_be_visible()

        # a pause of the merged topic goes to every broker holding it
        confirm(page, "pause-topic-shared", "On brokers")
        expect(page.get_by_test_id("topic-paused-shared")).to_have_text("paused")
        for http in brokers:
            assert topic_stats(http, "shared")["paused"] is True
        page.screenshot(path=tmp_path / "admin_cluster.png", full_page=True)
        print(f"\ncluster page screenshot: {tmp_path / 'admin_cluster.png'}")  # noqa: T201

        # a broker that goes away is retried with backoff, and followed again once back
        trio.from_thread.run(lambda: cluster.stop_broker(1, wait=False))
        expect(page.get_by_test_id(f"broker-status-{keys[1]}")).to_contain_text("retrying")
        lost = page.locator(f'[data-testid="event"][data-type="broker_lost"]:has-text("{keys[1]}")')
        expect(lost).to_have_count(1)  # the event log says so, once
        expect(page.get_by_test_id(f"topic-broker-shared@{keys[1]}")).to_have_class("stale")
        reason = page.get_by_test_id(f"broker-detail-{keys[1]}")
        expect(reason).to_have_text(re.compile(r"^.+ \(\d{4}\)$"))  # why, and the close code
        trio.from_thread.run(lambda: cluster.start_broker(1))
        expect(page.get_by_test_id(f"broker-status-{keys[1]}")).to_have_text("connected")
        expect(page.get_by_test_id(f"broker-status-{keys[0]}")).to_have_text("connected")
        back = page.locator(f'[data-testid="event"][data-type="broker_back"]:has-text("{keys[1]}")')
        expect(back).to_have_count(1)
    print(f"cluster browser test took {time.monotonic() - started:.1f}s")  # noqa: T201


async def run_go_nsqd(
    lookupd: LookupdAddresses,
    *,
    task_status: trio.TaskStatus[tuple[FakeGoNsqd, trio.CancelScope]] = trio.TASK_STATUS_IGNORED,
) -> None:
    """A fake Go nsqd the test can stop by cancelling the scope it hands back."""
    with trio.CancelScope() as scope:
        async with trio.open_nursery() as inner:
            go = await inner.start(FakeGoNsqd().serve, lookupd)
            task_status.started((go, scope))


@pytest.mark.nsq_cluster(brokers=1, lookupds=1)
async def test_lookupd_page_polls_a_go_nsqd_that_has_no_stream(
    nsq_cluster: NsqCluster, nursery: trio.Nursery, tmp_path: Path
) -> None:
    """Go nsqd has no /admin/stream: the page shows it from its /stats (through the
    lookupd, polled) instead of "cannot connect" for ever, with rates from the change
    between two answers, read-only; when it goes, the event log says so."""
    go, stop = await nursery.start(run_go_nsqd, nsq_cluster.lookupds[0])
    await nsq_cluster.wait_registered()
    await trio.to_thread.run_sync(drive_go_nsqd_page, nsq_cluster, go, stop, tmp_path)


def drive_go_nsqd_page(
    cluster: NsqCluster, go: FakeGoNsqd, stop: trio.CancelScope, tmp_path: Path
) -> None:
    lookupd = cluster.lookupds[0].http
    trionsq = f"127.0.0.1:{http_of(cluster.brokers[0])[1]}"
    with browser_page() as page:
        page.goto(http_url(lookupd, "/admin"))
        expect(page.get_by_test_id("page-mode")).to_have_text("cluster")
        expect(page.get_by_test_id(f"broker-status-{trionsq}")).to_have_text("connected")
        expect(page.get_by_test_id(f"broker-status-{go.key}")).to_have_text("polled")
        expect(page.get_by_test_id(f"broker-mode-{go.key}")).to_have_text("READ-ONLY")
        expect(page.get_by_test_id(f"broker-version-{go.key}")).to_have_text("nsqd 1.3.0")
        expect(page.get_by_test_id(f"broker-health-{go.key}")).to_have_text("OK")
        expect(page.get_by_test_id(f"topic-broker-depth-gotopic@{go.key}")).to_have_text("5")
        rate = page.get_by_test_id(f"topic-broker-rate-gotopic@{go.key}")
        expect(rate).not_to_have_text("0")  # 100 messages more at each answer
        expect(page.get_by_test_id("channel-depth-gotopic/c")).to_have_text("7")
        page.screenshot(path=tmp_path / "admin_go_nsqd.png", full_page=True)
        print(f"\nGo nsqd page screenshot: {tmp_path / 'admin_go_nsqd.png'}")  # noqa: T201

        trio.from_thread.run_sync(stop.cancel)  # it stops answering and leaves lookupd
        expect(page.get_by_test_id(f"broker-status-{go.key}")).not_to_have_text("polled")
        lost = page.locator(f'[data-testid="event"][data-type="broker_lost"]:has-text("{go.key}")')
        expect(lost).to_have_count(1)


async def test_broker_page_asks_for_the_auth_secret(nursery: trio.Nursery) -> None:
    server = await start_auth_server(nursery, {"operator": grant()})
    config = NsqdConfig.loopback(auth_http_addresses=(server.address,))
    broker: BoundAddresses = await nursery.start(serve_nsqd, config)
    broker.broker.topic("orders")
    await trio.to_thread.run_sync(drive_auth_page, http_of(broker))


def drive_auth_page(http: tuple[str, int]) -> None:
    key = f"{http[0]}:{http[1]}"
    with browser_page() as page:
        page.goto(http_url(http, "/admin"))
        # asked at once from hello's auth_required, not after the broker's wait for a secret
        expect(page.get_by_test_id("auth-form")).to_be_visible()
        expect(page.get_by_test_id(f"broker-status-{key}")).to_have_text("needs auth")
        expect(page.get_by_test_id("topic-orders")).to_have_count(0)

        page.get_by_test_id("auth-secret").fill("wrong")
        page.get_by_test_id("auth-submit").click()
        expect(page.get_by_test_id("auth-why")).to_contain_text(
            "the auth secret was refused (4001)"
        )
        expect(page.get_by_test_id("toast").first).to_contain_text("E_AUTH_FAILED")

        page.get_by_test_id("auth-secret").fill("operator")  # now sent as auth_secret=
        page.get_by_test_id("auth-submit").click()
        expect(page.get_by_test_id(f"broker-status-{key}")).to_have_text("connected")
        expect(page.get_by_test_id("auth-form")).to_be_hidden()
        expect(page.get_by_test_id("topic-orders")).to_be_visible()
