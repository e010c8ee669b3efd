"""JSON nested hundreds of levels deep from a client is an ordinary bad body, over real
sockets (issue 14): the error reply, at most one log line, no traceback."""

from __future__ import annotations

import logging
import struct
from typing import TYPE_CHECKING

import httpx
import pytest

from trionsq.protocol import ExtMessage, PubExt

from .raw import next_error, next_frame, ok, start

if TYPE_CHECKING:
    import trio

    from .raw import Clients


def nested_objects(depth: int) -> bytes:
    return b'{"a":' * depth + b"1" + b"}" * depth


def no_traceback_logged(caplog: pytest.LogCaptureFixture) -> None:
    assert not [r for r in caplog.records if r.exc_info], "a traceback was logged"
    assert len(caplog.text) < 1000


@pytest.mark.parametrize("depth", [500, 1022])
async def test_identify_nested_deep_is_e_bad_body(
    depth: int, clients: Clients, nursery: trio.Nursery, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG, logger="trionsq")
    addresses = await start(nursery)
    client = await clients.connect(addresses.tcp)
    body = b'{"client_id":' + nested_objects(depth) + b"}"
    await client.stream.send_all(b"IDENTIFY\n" + struct.pack(">i", len(body)) + body)
    error = await next_error(client)
    assert error.error.text == "E_BAD_BODY IDENTIFY failed to decode JSON body"
    assert error.fatal
    await client.wait_closed()
    no_traceback_logged(caplog)


async def test_pub_ext_header_nested_deep_is_e_invalid_json_header(
    clients: Clients, nursery: trio.Nursery, caplog: pytest.LogCaptureFixture
) -> None:
    """TCP stores the header as sent, but refuses what HTTP could not store either."""
    caplog.set_level(logging.DEBUG, logger="trionsq")
    addresses = await start(nursery)
    addresses.broker.topic("e", ext=True)
    producer = await clients.connect(addresses.tcp)
    await producer.send(
        PubExt("e", ExtMessage(nested_objects(300), b"deep")),
        PubExt("e", ExtMessage(nested_objects(200), b"fine")),
    )
    error = await next_error(producer)
    assert error.error.code == "E_INVALID_JSON_HEADER"
    assert not error.fatal
    assert ok(await next_frame(producer))
    assert addresses.broker.topics["e"].partitions[0].message_count == 1
    no_traceback_logged(caplog)


@pytest.mark.parametrize("depth", [255, 600, 1023])
async def test_http_pub_ext_header_nested_deep_is_400(
    depth: int, nursery: trio.Nursery, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG, logger="trionsq")
    addresses = await start(nursery)
    addresses.broker.topic("e", ext=True)
    assert addresses.http is not None
    host, port = addresses.http
    async with httpx.AsyncClient(base_url=f"http://{host}:{port}") as http:
        response = await http.post(
            "/pub_ext", params={"topic": "e", "ext": nested_objects(depth).decode()}, content=b"m"
        )
        assert response.status_code == 400, response.content
        assert response.json() == {"message": "E_INVALID_JSON_HEADER"}
        response = await http.post(
            "/pub_ext", params={"topic": "e", "ext": nested_objects(254).decode()}, content=b"m"
        )
        assert response.status_code == 200, response.content
    assert addresses.broker.topics["e"].partitions[0].message_count == 1
    no_traceback_logged(caplog)
