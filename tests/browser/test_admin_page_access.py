"""Who may use the admin stream, in a real browser (issue 30, item 2): a page served
from another port of 127.0.0.1 cannot open the stream, so it cannot delete a topic
or read message bodies, while the same script on the broker's own page can; and the
broker's page with ``--admin-secret`` and with ``--admin-stream=read-only``."""

from __future__ import annotations

import threading
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import TYPE_CHECKING

import trio
from playwright.sync_api import expect

from trionsq.config import NsqdConfig
from trionsq.nursery_tree import serve_nsqd

from .test_admin_page import browser_page, confirm, http_of, http_url, post, topic_stats

if TYPE_CHECKING:
    from collections.abc import Iterator

    from playwright.sync_api import Page

    from trionsq.nursery_tree import BoundAddresses

SECRET = "open-sesame"  # noqa: S105 - the test's admin secret

ATTACK = """
async (url) => {
  const seen = [];
  await new Promise((done) => {
    const ws = new WebSocket(url);
    ws.onopen = () => {
      seen.push("open");
      ws.send(JSON.stringify({ op: "sample", topic: "orders", every: 1, bodies: true, ref: 1 }));
      ws.send(JSON.stringify({ op: "topic.delete", topic: "orders", ref: 2 }));
    };
    ws.onmessage = (event) => {
      const message = JSON.parse(event.data);
      seen.push(message.type === "reply" ? `reply ${message.ref} ${message.status}` : message.type);
      if (message.type === "reply" && message.ref === 2) ws.close();
    };
    ws.onerror = () => seen.push("error");
    ws.onclose = () => done();
    setTimeout(done, 5000);
  });
  return seen;
}
"""
"""What a page of any origin would try: open the stream, ask for message bodies,
delete a topic; the list of what it saw."""


@contextmanager
def other_site() -> Iterator[tuple[str, int]]:
    """A web server on another port of 127.0.0.1: another origin than the broker's."""

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            body = b"<!doctype html><title>another site</title><p>nothing to see"
            self.send_response(200)
            self.send_header("Content-Type", "text/html")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, format: str, *args: object) -> None:  # noqa: A002 - the base's name
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield "127.0.0.1", server.server_address[1]
    finally:
        server.shutdown()
        server.server_close()


def attempt(page: Page, broker: tuple[str, int]) -> list[str]:
    seen: list[str] = page.evaluate(ATTACK, f"ws://{broker[0]}:{broker[1]}/admin/stream")
    return seen


def test_a_page_of_another_origin_cannot_use_the_stream(nsqd_thread: BoundAddresses) -> None:
    http = http_of(nsqd_thread)
    post(http, "/topic/create?topic=orders")
    with other_site() as elsewhere, browser_page() as page:
        page.goto(http_url(elsewhere, "/"))
        seen = attempt(page, http)
        assert seen == ["error"], seen  # refused with 403 before the upgrade: never open
        assert topic_stats(http, "orders")["topic_name"] == "orders"  # still there

        # the same script on the broker's own page opens the stream and acts
        page.goto(http_url(http, "/admin"))
        seen = attempt(page, http)
        assert seen[:2] == ["open", "hello"], seen
        assert "reply 1 200" in seen
        assert "reply 2 200" in seen
    assert "orders" not in nsqd_thread.broker.topics


async def test_broker_page_asks_for_the_admin_secret_before_acting(nursery: trio.Nursery) -> None:
    config = NsqdConfig.loopback(admin_secret=SECRET)
    broker: BoundAddresses = await nursery.start(serve_nsqd, config)
    broker.broker.topic("orders")
    await trio.to_thread.run_sync(drive_secret_page, http_of(broker))


def open_broker_page(page: Page, http: tuple[str, int], mode: str) -> str:
    """The broker's page, connected, showing topic "orders" and the broker's ``mode``
    badge; the broker's key in the page's test ids."""
    key = f"{http[0]}:{http[1]}"
    page.goto(http_url(http, "/admin"))
    expect(page.get_by_test_id(f"broker-status-{key}")).to_have_text("connected")
    expect(page.get_by_test_id(f"broker-mode-{key}")).to_have_text(mode)
    expect(page.get_by_test_id("topic-orders")).to_be_visible()
    return key


def drive_secret_page(http: tuple[str, int]) -> None:
    with browser_page() as page:
        key = open_broker_page(page, http, "LOCKED")
        expect(page.get_by_test_id("auth-form")).to_be_hidden()  # reading needs no secret

        page.get_by_test_id("pause-topic-orders").click()
        expect(page.get_by_test_id("auth-why")).to_contain_text("admin secret (--admin-secret)")
        page.get_by_test_id("auth-secret").fill("wrong")
        page.get_by_test_id("auth-submit").click()
        expect(page.get_by_test_id("toast").last).to_contain_text("the admin secret was refused")
        assert topic_stats(http, "orders")["paused"] is False

        page.get_by_test_id("auth-secret").fill(SECRET)
        page.get_by_test_id("auth-submit").click()
        # the action asked for goes on: its confirmation, then the pause
        expect(page.get_by_test_id("confirm-dialog")).to_be_visible()
        page.get_by_test_id("confirm-yes").click()
        expect(page.get_by_test_id("topic-paused-orders")).to_be_visible()
        expect(page.get_by_test_id(f"broker-mode-{key}")).to_be_hidden()
        assert topic_stats(http, "orders")["paused"] is True
        confirm(page, "unpause-topic-orders", "Unpause topic “orders”")  # no second asking
        expect(page.get_by_test_id("topic-paused-orders")).to_be_hidden()


async def test_a_read_only_broker_page_offers_no_actions(nursery: trio.Nursery) -> None:
    config = NsqdConfig.loopback(admin_stream="read-only")
    broker: BoundAddresses = await nursery.start(serve_nsqd, config)
    broker.broker.topic("orders")
    await trio.to_thread.run_sync(drive_read_only_page, http_of(broker))


def drive_read_only_page(http: tuple[str, int]) -> None:
    with browser_page() as page:
        open_broker_page(page, http, "READ-ONLY")
        expect(page.get_by_test_id("pause-topic-orders")).to_be_hidden()
        expect(page.get_by_test_id("delete-topic-orders")).to_be_hidden()
