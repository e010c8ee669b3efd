"""With AUTH on, the auth check comes before any check that would tell whether a topic
exists (issue 14): a client without AUTH, or without a grant for the topic, gets
the same auth error for a topic that exists and for one that does not, for every
publish and subscribe verb, Youzan's included."""

from __future__ import annotations

import struct
from typing import TYPE_CHECKING

import pytest

from trionsq.protocol import (
    Auth,
    ExtMessage,
    Mpub,
    MpubExt,
    MpubTrace,
    Pub,
    PubExt,
    PubTrace,
    Sub,
    SubAdvanced,
    SubOrdered,
    TracedMessage,
)
from trionsq.protocol.client import Response, encode_commands

from .raw import next_error, next_frame
from .test_auth_tcp import ORDERS, authed, broker_with_auth

if TYPE_CHECKING:
    import trio

    from trionsq.protocol import Command

    from .raw import Clients

EXT = ExtMessage(b'{"k":"v"}', b"body")


def commands(topic: str) -> list[tuple[Command, str]]:
    """Every command nsqd's CheckAuth guards, with the verb its error names."""
    return [
        (PubExt(topic, EXT), "PUB"),
        (PubExt(topic, EXT, partition=0), "PUB"),
        (PubTrace(topic, 7, b"body"), "PUB"),
        (PubTrace(topic, 7, b"body", partition=0), "PUB"),
        (MpubExt(topic, (EXT,)), "PUB"),
        (MpubExt(topic, (EXT,), partition=1), "PUB"),
        (MpubTrace(topic, (TracedMessage(7, b"body"),)), "PUB"),
        (MpubTrace(topic, (TracedMessage(7, b"body"),), partition=0), "PUB"),
        (Pub(topic, b"body", partition=0), "PUB"),
        (Mpub(topic, (b"body",), partition=0), "MPUB"),
        (Sub(topic, "billing"), "SUB"),
        (Sub(topic, "billing", partition=0), "SUB"),
        (SubOrdered(topic, "billing"), "SUB"),
        (SubAdvanced(topic, "billing", 0), "SUB"),
    ]


@pytest.mark.parametrize("topic", ["missing", "exists"])
async def test_without_auth_every_verb_is_e_auth_first(
    topic: str, clients: Clients, nursery: trio.Nursery
) -> None:
    addresses, _ = await broker_with_auth(nursery, {"alice-secret": ORDERS})
    addresses.broker.topic("exists", partitions=2, ext=True)
    for command, verb in commands(topic):
        client = await clients.connect(addresses.tcp)
        await client.send(command)
        error = await next_error(client)
        assert (error.error.text, error.fatal) == (
            f"E_AUTH_FIRST AUTH required before {verb}",
            True,
        )
        await client.wait_closed()


@pytest.mark.parametrize("topic", ["missing", "exists"])
async def test_outside_the_grants_every_verb_is_e_unauthorized(
    topic: str, clients: Clients, nursery: trio.Nursery
) -> None:
    addresses, _ = await broker_with_auth(nursery, {"alice-secret": ORDERS})
    addresses.broker.topic("exists", partitions=2, ext=True)
    for command, verb in commands(topic):
        client = await authed(clients, addresses, b"alice-secret")
        await client.send(command)
        error = await next_error(client)
        channel = getattr(command, "channel", "")
        expected = f'E_UNAUTHORIZED AUTH failed for {verb} on "{topic}" "{channel}"'
        assert (error.error.text, error.fatal) == (expected, True), command
        await client.wait_closed()
    assert "missing" not in addresses.broker.topics


async def test_a_granted_missing_topic_is_still_e_topic_not_exist(
    clients: Clients, nursery: trio.Nursery
) -> None:
    """The auth check comes first; the client allowed to know learns the topic is missing."""
    addresses, _ = await broker_with_auth(nursery, {"alice-secret": ORDERS})
    for command, _verb in commands("orders"):
        if isinstance(command, (Sub, SubOrdered, SubAdvanced)):
            continue  # SUB "orders" "billing" is granted: a plain SUB creates the topic
        client = await authed(clients, addresses, b"alice-secret")
        await client.send(command)
        error = await next_error(client)
        assert error.error.code == "E_TOPIC_NOT_EXIST", command
        await client.wait_closed()


async def test_a_publish_split_across_reads_gets_the_auth_error(
    clients: Clients, nursery: trio.Nursery
) -> None:
    """The gate sees the header of a PUB_EXT to a missing topic before its body has
    arrived: it refuses on the grants, not on the topic."""
    addresses, _ = await broker_with_auth(nursery, {"alice-secret": ORDERS})
    client = await authed(clients, addresses, b"alice-secret")
    whole = encode_commands([PubExt("missing", EXT)])
    header = b"PUB_EXT missing\n" + struct.pack(">i", len(whole) - len("PUB_EXT missing\n") - 4)
    assert whole.startswith(header)
    await client.stream.send_all(header)
    await client.stream.send_all(whole[len(header) :])
    error = await next_error(client)
    assert error.error.text == 'E_UNAUTHORIZED AUTH failed for PUB on "missing" ""'


async def test_auth_in_the_same_read_is_applied_before_the_topic_check(
    clients: Clients, nursery: trio.Nursery
) -> None:
    """AUTH and a publish in one write: the grants are not in hand while the read is
    parsed, so the publish waits for them instead of being told about the topic."""
    addresses, _ = await broker_with_auth(nursery, {"alice-secret": ORDERS})
    for topic, code in (("missing", "E_UNAUTHORIZED"), ("orders", "E_TOPIC_NOT_EXIST")):
        client = await clients.connect(addresses.tcp)
        await client.send(Auth(b"alice-secret"), PubExt(topic, EXT, partition=0))
        assert isinstance(await next_frame(client), Response)  # AUTH's answer
        error = await next_error(client)
        assert error.error.code == code
        await client.wait_closed()
