"""trionsq.client's errors (issue 31, item 3): one base class, a subclass per kind of
failure (connection, TLS/auth, protocol, discovery, configuration), each keeping
what caused it, raised as itself out of the client's nurseries; docs/client.md lists
every one. TLS failures are in test_trio_client_tls.py (they need a certificate)."""

from __future__ import annotations

import re
import warnings
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

import trionsq.client as client_api
from trionsq.client import ConsumerSettings, ProducerSettings, open_consumer, open_producer
from trionsq.http.client import HttpClientError
from trionsq.protocol.commands import OffsetSpec

from .test_client_blocking import free_port

if TYPE_CHECKING:
    from trionsq.nursery_tree import BoundAddresses

DOCS = Path(__file__).resolve().parents[2] / "docs" / "client.md"


def tcp(addresses: BoundAddresses) -> str:
    return f"{addresses.tcp[0]}:{addresses.tcp[1]}"


async def test_an_unreachable_broker_is_a_connection_error_with_the_os_error_as_cause() -> None:
    nowhere = f"127.0.0.1:{free_port()}"
    with pytest.raises(Exception) as failed:  # noqa: PT011 - the class is what is checked
        async with open_consumer("t", "c", nowhere):
            pass
    assert isinstance(failed.value.__cause__, OSError), repr(failed.value)
    assert isinstance(failed.value, client_api.NsqConnectionError)
    assert isinstance(failed.value, client_api.NsqClientError)
    assert isinstance(failed.value, OSError)  # what pynsq/gnsq users catch keeps working
    assert nowhere in str(failed.value)
    async with open_producer(nowhere) as producer:
        with pytest.raises(client_api.NsqConnectionError) as publish_failed:
            await producer.publish("t", b"x")
    assert isinstance(publish_failed.value.__cause__, OSError)


async def test_a_refusal_is_a_protocol_error_with_its_code(nsqd: BoundAddresses) -> None:
    with pytest.raises(client_api.NsqError) as refused:
        async with open_consumer("bad!topic", "c", tcp(nsqd)):
            pass
    assert isinstance(refused.value, client_api.NsqClientError)
    assert refused.value.code == "E_BAD_TOPIC"


async def test_a_lookupd_that_does_not_answer_is_a_discovery_error_with_its_cause() -> None:
    nowhere = f"127.0.0.1:{free_port()}"
    with pytest.raises(client_api.NsqClientError) as failed:
        async with open_consumer("t", "c", lookupd=nowhere):
            pass
    assert isinstance(failed.value, client_api.NsqDiscoveryError)
    assert isinstance(failed.value.__cause__, HttpClientError)
    assert nowhere in str(failed.value)


def test_the_old_name_of_the_discovery_error_still_imports_with_a_warning() -> None:
    with pytest.warns(DeprecationWarning, match="NsqDiscoveryError"):
        old = client_api.LookupError_
    assert old is client_api.NsqDiscoveryError
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert "LookupError_" not in client_api.__all__


@pytest.mark.parametrize(
    ("opening", "says"),
    [
        (lambda address: open_consumer("t", "c"), "needs nsqd TCP addresses or lookupd"),
        (lambda address: open_consumer("t", "c", "no-port"), "not <addr>:<port>"),
        (
            lambda address: open_consumer(
                "t",
                "c",
                address,
                settings=ConsumerSettings(ordered=True, start_at=OffsetSpec("count", 1)),
            ),
            "SUB_ORDERED takes no start offset",
        ),
        (
            lambda address: open_consumer(
                "t", "c", address, settings=ConsumerSettings(max_in_flight=0)
            ),
            "max_in_flight must be at least 1",
        ),
        (lambda address: open_producer(), "needs nsqd TCP addresses or lookupd"),
    ],
)
async def test_bad_settings_are_a_configuration_error(
    nsqd: BoundAddresses, opening: object, says: str
) -> None:
    with pytest.raises(client_api.NsqClientError, match=re.escape(says)) as refused:
        async with opening(tcp(nsqd)):  # type: ignore[operator]
            pass
    assert isinstance(refused.value, client_api.NsqConfigError)
    assert isinstance(refused.value, ValueError)  # as before


async def test_publishing_by_key_without_a_partition_count_is_a_configuration_error(
    nsqd: BoundAddresses,
) -> None:
    async with open_producer(tcp(nsqd), settings=ProducerSettings()) as producer:
        with pytest.raises(client_api.NsqClientError, match="partition count") as refused:
            await producer.publish("t", b"x", key="k")
    assert isinstance(refused.value, client_api.NsqConfigError)


def test_docs_list_every_error_class() -> None:
    names = [
        name
        for name in client_api.__all__
        if isinstance(getattr(client_api, name), type)
        and issubclass(getattr(client_api, name), BaseException)
    ]
    assert {"NsqClientError", "NsqConnectionError", "NsqError", "NsqConfigError"} <= set(names)
    text = DOCS.read_text()
    missing = [name for name in names if f"`{name}`" not in text]
    assert not missing, f"docs/client.md does not list {missing}"
