"""trionsq.client through a broker outage (issue 31, items 4 and 5): the loss and
every failed reconnect are WARNINGs and the return an INFO, so an outage shows at
default log levels; publishes made meanwhile can wait for the broker
(``publish_timeout``) instead of failing at once, and an ext topic's keyed
publishes are stored once however often they are sent again."""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING

import orjson
import pytest
import trio
import trio.lowlevel
import trio.testing

from trionsq import NsqdConfig
from trionsq.client import (
    ConnectionOptions,
    NsqConnectionError,
    ProducerSettings,
    open_consumer,
    open_producer,
)
from trionsq.protocol.commands import ExtMessage
from trionsq.protocol.identify import IdentifyRequest
from trionsq.testing import wait_until

from .test_client_blocking import free_port
from .test_trio_client import run_broker, tcp

if TYPE_CHECKING:
    from trionsq.nursery_tree import BoundAddresses


def client_records(caplog: pytest.LogCaptureFixture, level: int) -> list[str]:
    return [
        record.getMessage()
        for record in caplog.records
        if record.name.startswith("trionsq.client") and record.levelno == level
    ]


async def test_an_outage_is_logged_at_warning_and_the_return_at_info(
    nursery: trio.Nursery, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="trionsq.client")
    first, stop = await nursery.start(run_broker, NsqdConfig.loopback())
    address = tcp(first)
    async with open_consumer("outage", "c", address) as consumer:
        stop.cancel()  # the broker goes; the consumer tries again and again
        await wait_until(lambda: consumer.reconnects >= 3, "three failed reconnects")
        warnings = client_records(caplog, logging.WARNING)
        assert any("lost" in line and address in line for line in warnings), warnings
        failed = [line for line in warnings if "reconnect" in line and address in line]
        assert len(failed) >= 2, warnings  # each failure, not only the first
        assert not [line for line in client_records(caplog, logging.INFO) if "back" in line]
        await nursery.start(run_broker, NsqdConfig.loopback(tcp_address=address))
        await wait_until(lambda: consumer.connections == 1, "subscribed again")
    back = [line for line in client_records(caplog, logging.INFO) if "back" in line]
    assert len(back) == 1, client_records(caplog, logging.INFO)
    assert address in back[0]


# --- publishing through an outage (item 5) ---------------------------------------


async def test_a_publish_waits_for_the_broker_within_publish_timeout(
    nursery: trio.Nursery, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="trionsq.client")
    first, stop = await nursery.start(run_broker, NsqdConfig.loopback())
    address = tcp(first)
    settings = ProducerSettings(publish_timeout=30.0)
    async with open_producer(address, settings=settings) as producer:
        await producer.publish("outage", b"before")
        stop.cancel()
        done = trio.Event()

        async def publish_meanwhile() -> None:
            await producer.publish("outage", b"meanwhile")
            await producer.publish_many("outage", [b"many-1", b"many-2"])
            done.set()

        nursery.start_soon(publish_meanwhile)
        await wait_until(lambda: producer.outage_retries >= 3, "three retries")
        assert not done.is_set()
        again = await nursery.start(run_broker, NsqdConfig.loopback(tcp_address=address))
        with trio.fail_after(10):
            await done.wait()
    topic = again[0].broker.topics["outage"]
    assert topic.partitions[0].message_count == 3  # before went with the first broker
    failed = [line for line in client_records(caplog, logging.WARNING) if "publish" in line]
    assert len(failed) >= 3, client_records(caplog, logging.WARNING)
    assert [line for line in client_records(caplog, logging.INFO) if "back" in line]


async def test_without_publish_timeout_a_publish_fails_at_once(nursery: trio.Nursery) -> None:
    first, stop = await nursery.start(run_broker, NsqdConfig.loopback())
    async with open_producer(tcp(first)) as producer:
        await producer.publish("outage", b"before")
        stop.cancel()
        await trio.lowlevel.checkpoint()
        with trio.fail_after(2), pytest.raises(NsqConnectionError):
            await producer.publish("outage", b"refused")
    assert producer.outage_retries == 0


async def test_publish_timeout_is_a_deadline(
    nursery: trio.Nursery, autojump_clock: trio.testing.MockClock
) -> None:
    nowhere = f"127.0.0.1:{free_port()}"
    settings = ProducerSettings(publish_timeout=5.0)
    async with open_producer(nowhere, settings=settings) as producer:
        started = trio.current_time()
        with pytest.raises(NsqConnectionError):
            await producer.publish("t", b"x")
        waited = trio.current_time() - started
    assert 4.0 <= waited <= 5.0  # backing off 50 ms doubling to 1 s, never past 5 s
    assert producer.outage_retries >= 8


class CuttingProxy:
    """Between a client and a broker: forwards both ways, except that once ``armed``
    it passes the next client write holding ``verb`` on and then closes both ends
    before the broker's answer can come back (an answer lost in an outage)."""

    def __init__(self, broker: str, verb: bytes) -> None:
        self.broker = broker
        self.verb = verb
        self.armed = False
        self.cuts = 0
        self.address = ""

    async def serve(self, *, task_status: trio.TaskStatus[str] = trio.TASK_STATUS_IGNORED) -> None:
        (listener,) = await trio.open_tcp_listeners(0, host="127.0.0.1")
        self.address = f"127.0.0.1:{listener.socket.getsockname()[1]}"
        task_status.started(self.address)
        await trio.serve_listeners(self._relay, [listener])

    async def _relay(self, client: trio.SocketStream) -> None:
        host, port = self.broker.rsplit(":", 1)
        broker = await trio.open_tcp_stream(host, int(port))
        async with client, broker, trio.open_nursery() as nursery:
            cutting = False

            async def upstream() -> None:
                nonlocal cutting
                while data := await client.receive_some(65536):
                    if self.armed and self.verb in data:
                        self.armed, cutting = False, True
                        self.cuts += 1
                        await broker.send_all(data)
                        await trio.sleep(0.2)  # the broker stores it and answers: lost
                        nursery.cancel_scope.cancel()
                        return
                    await broker.send_all(data)

            async def downstream() -> None:
                while data := await broker.receive_some(65536):
                    if not cutting:
                        await client.send_all(data)

            nursery.start_soon(upstream)
            nursery.start_soon(downstream)


@pytest.mark.parametrize("keyed", [True, False])
async def test_a_retry_after_a_lost_answer_stores_keyed_ext_messages_once(
    nsqd: BoundAddresses, nursery: trio.Nursery, keyed: bool
) -> None:
    """With ``idempotency_keys`` the producer gives each ext message a key before its
    first send, so a retry after a lost answer is stored once; a plain retry may not
    be (at-least-once), which the second case shows."""
    nsqd.broker.topic("ext", ext=True)
    proxy = CuttingProxy(tcp(nsqd), b"PUB_EXT")
    await nursery.start(proxy.serve)
    settings = ProducerSettings(publish_timeout=10.0, idempotency_keys=keyed)
    extend = ConnectionOptions(IdentifyRequest(extend_support=True))
    async with open_producer(proxy.address, settings=settings, options=extend) as producer:
        await producer.publish_ext("ext", ExtMessage(b'{"a":"1"}', b"warm-up"))
        proxy.armed = True
        await producer.publish_ext("ext", ExtMessage(b'{"a":"2"}', b"once"))
        await producer.publish_many_ext("ext", [ExtMessage(b"{}", b"m-%d" % i) for i in range(3)])
    assert proxy.cuts == 1
    partition = nsqd.broker.topics["ext"].partitions[0]
    log = partition.log
    bodies = [record.body for record in log.read(log.start_id, 100)]
    if keyed:
        assert bodies == [b"warm-up", b"once", b"m-0", b"m-1", b"m-2"]
        headers = [orjson.loads(record.ext) for record in log.read(log.start_id, 100)]
        assert all(len(header["##idempotency_key"]) == 32 for header in headers)
        assert headers[1]["a"] == "2"  # the caller's fields kept
    else:
        assert bodies == [b"warm-up", b"once", b"once", b"m-0", b"m-1", b"m-2"]
