"""Fixtures for tests that talk to a real broker over sockets."""

from __future__ import annotations

from typing import TYPE_CHECKING

import pytest

from .raw import Clients
from .tubemq import TubeClients

if TYPE_CHECKING:
    from collections.abc import AsyncIterator


@pytest.fixture
async def clients() -> AsyncIterator[Clients]:
    """Raw protocol clients, all closed at teardown."""
    opened = Clients()
    try:
        yield opened
    finally:
        await opened.close_all()


@pytest.fixture
async def tube_clients() -> AsyncIterator[TubeClients]:
    """TubeMQ RPC clients (trionsq.tubemq.client), all closed at teardown."""
    opened = TubeClients()
    try:
        yield opened
    finally:
        await opened.close_all()
