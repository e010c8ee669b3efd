"""A configuration a broker cannot run with is one plain exception with a one-line
message, raised before any of the broker's tasks starts (issue 34): not an
ExceptionGroup inside an ExceptionGroup from the broker's nurseries."""

from __future__ import annotations

import pytest
import trio

from trionsq import NsqdConfig, open_nsqd, serve_nsqd
from trionsq.config import ConfigError
from trionsq.lookupd.config import LookupdConfig
from trionsq.lookupd.server import serve_lookupd


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
