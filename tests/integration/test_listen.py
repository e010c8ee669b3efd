"""The structural property every listener stands on (issue 30, item 1): in
``listen.serve_connections`` a connection's failure is logged and ends only that
connection; only the listener's own failure ends the server; cancellation passes."""

from __future__ import annotations

import errno
import functools
import logging
import ssl
from typing import TYPE_CHECKING

import pytest
import trio
import trio.testing

from trionsq.listen import connection_ended, open_listeners, serve_connections

if TYPE_CHECKING:
    from collections.abc import Awaitable, Callable


class Boom(Exception):
    """What a handler with a bug raises."""


async def echo_unless_told(stream: trio.SocketStream) -> None:
    """Echo lines; ``boom`` raises, ``group`` raises inside a nursery, ``reset`` acts
    as a vanished peer does (these stand for a handler's bugs and its peer's faults)."""
    while data := await stream.receive_some(100):
        if data == b"boom":
            raise Boom("a bug in this connection's handler")
        if data == b"group":
            async with trio.open_nursery() as nursery:
                nursery.start_soon(trio.sleep_forever)
                raise Boom("a bug beside a sibling task")
        if data == b"reset":
            raise trio.BrokenResourceError("the peer vanished")
        await stream.send_all(data)


def failing_to_start(stream: trio.SocketStream) -> Awaitable[None]:
    """A handler that fails while it is built, before any coroutine exists."""
    raise Boom("failed before the handler's coroutine was made")


async def serving(
    nursery: trio.Nursery,
    handler: Callable[[trio.SocketStream], Awaitable[object]] = echo_unless_told,
) -> list[trio.SocketListener]:
    listeners = await open_listeners("127.0.0.1", 0)
    await nursery.start(functools.partial(serve_connections, handler, listeners, name="test"))
    return listeners


async def connect(listeners: list[trio.SocketListener]) -> trio.SocketStream:
    host, port = listeners[0].socket.getsockname()[:2]
    return await trio.open_tcp_stream(host, port)


async def closed_by_server(stream: trio.SocketStream) -> None:
    with trio.fail_after(5):
        assert await stream.receive_some(100) == b""
    await stream.aclose()


async def echoes(stream: trio.SocketStream, *, close: bool = False) -> None:
    await stream.send_all(b"hello")
    with trio.fail_after(5):
        assert await stream.receive_some(100) == b"hello"
    if close:
        await stream.aclose()


@pytest.mark.parametrize("fault", [b"boom", b"group"])
async def test_a_failing_handler_is_logged_and_ends_only_its_connection(
    nursery: trio.Nursery, caplog: pytest.LogCaptureFixture, fault: bytes
) -> None:
    listeners = await serving(nursery)
    bystander = await connect(listeners)
    await echoes(bystander)
    with caplog.at_level(logging.DEBUG, logger="trionsq.connection"):
        victim = await connect(listeners)
        await victim.send_all(fault)
        await closed_by_server(victim)
    (record,) = caplog.records
    assert record.levelno == logging.ERROR
    assert record.getMessage().startswith("connection from 127.0.0.1:")
    assert "a bug" in caplog.text  # the traceback is in the log
    await echoes(bystander)  # the connection already open goes on
    await echoes(await connect(listeners), close=True)  # and new ones are accepted
    await bystander.aclose()


async def test_a_peer_that_vanishes_is_a_debug_line(
    nursery: trio.Nursery, caplog: pytest.LogCaptureFixture
) -> None:
    listeners = await serving(nursery)
    with caplog.at_level(logging.DEBUG, logger="trionsq.connection"):
        stream = await connect(listeners)
        await stream.send_all(b"reset")
        await closed_by_server(stream)
    (record,) = caplog.records
    assert record.levelno == logging.DEBUG
    assert "BrokenResourceError" in record.getMessage()
    await echoes(await connect(listeners), close=True)


async def test_a_handler_that_fails_while_built_ends_only_its_connection(
    nursery: trio.Nursery, caplog: pytest.LogCaptureFixture
) -> None:
    listeners = await serving(nursery, failing_to_start)
    with caplog.at_level(logging.ERROR, logger="trionsq.connection"):
        for _ in range(3):  # the accept loop goes on after each
            await closed_by_server(await connect(listeners))
    assert len(caplog.records) == 3


async def test_cancelling_the_server_ends_its_connections_and_nothing_is_logged(
    caplog: pytest.LogCaptureFixture,
) -> None:
    with caplog.at_level(logging.DEBUG, logger="trionsq.connection"):
        async with trio.open_nursery() as nursery:
            listeners = await serving(nursery)
            stream = await connect(listeners)
            await echoes(stream)
            nursery.cancel_scope.cancel()
        await closed_by_server(stream)
    assert caplog.records == []


async def test_the_listeners_own_failure_ends_the_server() -> None:
    """An accept error other than "out of descriptors" is the listener's: fatal."""
    listeners = await open_listeners("127.0.0.1", 0)
    with pytest.RaisesGroup(pytest.RaisesExc(trio.ClosedResourceError), flatten_subgroups=True):
        async with trio.open_nursery() as nursery:
            await nursery.start(
                functools.partial(serve_connections, echo_unless_told, listeners, name="test")
            )
            listeners[0].socket.close()  # accept now fails with EBADF
            await trio.sleep_forever()


def test_connection_ended_knows_a_vanished_peer_from_a_bug() -> None:
    reset = ConnectionResetError()
    assert connection_ended(reset)
    assert connection_ended(ExceptionGroup("", [reset, trio.BrokenResourceError()]))
    assert not connection_ended(Boom())
    assert not connection_ended(ExceptionGroup("", [reset, Boom()]))


def test_a_file_the_disk_refused_is_not_a_vanished_peer() -> None:
    """A storage error escaping a command (no space, no descriptor) is logged as the
    broker's failure, with its traceback, not as a peer that went away."""
    assert connection_ended(OSError(errno.EPIPE, "Broken pipe"))
    assert connection_ended(OSError(errno.ECONNRESET, "Connection reset by peer"))
    assert connection_ended(ssl.SSLError(1, "tlsv1 alert unknown ca"))
    assert not connection_ended(OSError(errno.ENOSPC, "No space left on device"))
    assert not connection_ended(OSError(errno.EMFILE, "Too many open files"))
