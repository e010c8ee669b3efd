"""A configuration a broker cannot run with is one plain exception with a one-line
message, raised before any of the broker's tasks starts (issue 34): not an
ExceptionGroup inside an ExceptionGroup from the broker's nurseries."""

from __future__ import annotations

import socket
from typing import TYPE_CHECKING

import pytest
import trio

from trionsq import NsqdConfig, open_nsqd, serve_nsqd
from trionsq.broker.metadata import MetadataError
from trionsq.config import ConfigError
from trionsq.listen import ListenError
from trionsq.lookupd.config import LookupdConfig
from trionsq.lookupd.server import open_lookupd, serve_lookupd
from trionsq.testing import ThreadedNsqd, open_nsq_cluster

if TYPE_CHECKING:
    from collections.abc import Callable, Iterator
    from pathlib import Path


class Spawns(trio.abc.Instrument):
    """How many tasks were started."""

    def __init__(self) -> None:
        self.count = 0

    def task_spawned(self, task: trio.lowlevel.Task) -> None:
        self.count += 1


BAD = [
    pytest.param(
        {"tcp_address": "nonsense"},
        ConfigError,
        "--tcp-address must be <addr>:<port> with a port in [0,65535], got 'nonsense'",
        id="address",
    ),
    pytest.param(
        {"tls_cert": "cert.pem"},
        ConfigError,
        "--tls-cert and --tls-key must be given together",
        id="tls",
    ),
    pytest.param(
        {"tcp_address": "no-such-host.invalid:0"},
        OSError,
        "no-such-host.invalid:0: ",
        id="unresolvable",
    ),
]


@pytest.mark.parametrize(("changes", "kind", "message"), BAD)
async def test_open_nsqd_raises_the_error_itself_before_any_task(
    changes: dict[str, str], kind: type[Exception], message: str
) -> None:
    config = NsqdConfig.loopback(**changes)  # type: ignore[arg-type]
    spawns = Spawns()
    trio.lowlevel.add_instrument(spawns)
    try:
        with pytest.raises(kind) as raised:
            async with open_nsqd(config):
                pytest.fail("the broker started")
    finally:
        trio.lowlevel.remove_instrument(spawns)
    assert message in str(raised.value)
    assert "\n" not in str(raised.value)
    assert spawns.count <= 1  # open_nsqd's own nursery task at most: none of the broker's


@pytest.mark.parametrize(("changes", "kind", "message"), BAD)
async def test_nursery_start_of_serve_nsqd_raises_the_error_itself(
    changes: dict[str, str], kind: type[Exception], message: str, nursery: trio.Nursery
) -> None:
    config = NsqdConfig.loopback(**changes)  # type: ignore[arg-type]
    with pytest.raises(kind) as raised:
        await nursery.start(serve_nsqd, config)
    assert message in str(raised.value)


async def test_serve_lookupd_raises_a_bad_address_itself(nursery: trio.Nursery) -> None:
    config = LookupdConfig.loopback(http_address="nonsense")
    with pytest.raises(ConfigError) as raised:
        await nursery.start(serve_lookupd, config)
    assert str(raised.value) == (
        "--http-address must be <addr>:<port> with a port in [0,65535], got 'nonsense'"
    )


# What fails after the broker's nursery is open (a TubeMQ or replication listener that
# cannot bind, a data directory it cannot read) is raised as itself too: before the
# fix, the nursery wrapped it in an ExceptionGroup, past an embedder's `except OSError`.


@pytest.fixture
def taken() -> Iterator[str]:
    """``127.0.0.1:<port>`` of a port a listening socket holds for the test."""
    with socket.socket() as holder:
        holder.bind(("127.0.0.1", 0))
        holder.listen()
        yield f"127.0.0.1:{holder.getsockname()[1]}"


def _tubemq_on(address: str) -> NsqdConfig:
    return NsqdConfig.loopback(tubemq_master_address=address, tubemq_broker_address="127.0.0.1:0")


def _replication_on(address: str) -> NsqdConfig:
    # no etcd is asked: the replication listener is bound before the first etcd call
    return NsqdConfig.loopback(etcd_endpoints=("http://127.0.0.1:9",), replication_address=address)


@pytest.mark.parametrize("config_for", [_tubemq_on, _replication_on], ids=["tubemq", "replication"])
async def test_open_nsqd_raises_a_listener_in_use_itself(
    taken: str, config_for: Callable[[str], NsqdConfig]
) -> None:
    with pytest.raises(ListenError, match="Address already in use"):
        async with open_nsqd(config_for(taken)):
            pytest.fail("the broker started")


async def test_nursery_start_of_serve_nsqd_raises_a_listener_in_use_itself(
    taken: str, nursery: trio.Nursery
) -> None:
    with pytest.raises(ListenError, match="Address already in use"):
        await nursery.start(serve_nsqd, _tubemq_on(taken))


async def test_a_data_directory_the_broker_cannot_read_is_the_error_itself(
    tmp_path: Path, nursery: trio.Nursery
) -> None:
    (tmp_path / "metadata.json").write_text("{not json")
    config = NsqdConfig.loopback(data_path=str(tmp_path))
    with pytest.raises(MetadataError, match="not JSON"):
        async with open_nsqd(config):
            pytest.fail("the broker started")
    with pytest.raises(MetadataError, match="not JSON"):
        await nursery.start(serve_nsqd, config)


def test_threaded_nsqd_raises_a_listener_in_use_itself(taken: str) -> None:
    broker = ThreadedNsqd(_tubemq_on(taken))
    with pytest.raises(ListenError, match="Address already in use"):
        broker.start()


async def test_a_listener_bound_before_one_in_use_is_closed_at_once(taken: str) -> None:
    """nsqd binds TCP, then HTTP: when HTTP's port is taken, TCP's is free again at
    once, while the error (and the frames its traceback holds) is still alive."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    config = NsqdConfig.loopback(tcp_address=f"127.0.0.1:{port}", http_address=taken)
    with pytest.raises(ListenError, match="Address already in use") as raised:
        async with open_nsqd(config):
            pytest.fail("the broker started")
    assert raised.value.__traceback__ is not None
    with socket.socket() as again:
        again.bind(("127.0.0.1", port))  # OSError (in use) while the TCP listener is open


async def test_serve_lookupd_raises_a_listener_in_use_itself(
    taken: str, nursery: trio.Nursery
) -> None:
    for config in (
        LookupdConfig.loopback(tcp_address=taken),
        LookupdConfig.loopback(http_address=taken),
    ):
        with pytest.raises(ListenError, match="Address already in use"):
            await nursery.start(serve_lookupd, config)
        with pytest.raises(ListenError, match="Address already in use"):
            async with open_lookupd(config):
                pytest.fail("the lookupd started")


async def test_open_nsq_cluster_raises_a_broker_start_failure_itself() -> None:
    with socket.socket() as probe:  # a free port, for the first broker only
        probe.bind(("127.0.0.1", 0))
        config = _tubemq_on(f"127.0.0.1:{probe.getsockname()[1]}")
    with pytest.raises(ListenError, match="Address already in use"):
        async with open_nsq_cluster(2, 1, nsqd_config=config):
            pytest.fail("the cluster started")
