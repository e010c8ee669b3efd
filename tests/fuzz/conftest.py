"""The fuzz tests' broker: one per module, in its own thread and trio run, with
what it logs at ERROR recorded (a request that makes a handler fail is a finding)."""

from __future__ import annotations

import logging
import threading
from typing import TYPE_CHECKING

import pytest
import trio

from trionsq import NsqdConfig, serve_nsqd

if TYPE_CHECKING:
    from collections.abc import Iterator

    from trionsq.nursery_tree import BoundAddresses


class Errors(logging.Handler):
    """Records logged at ERROR or above while the broker runs."""

    def __init__(self) -> None:
        super().__init__(logging.ERROR)
        self.records: list[logging.LogRecord] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.records.append(record)


@pytest.fixture(scope="module")
def broker() -> Iterator[tuple[BoundAddresses, Errors]]:
    """One in-memory broker for the module, in its own thread and trio run."""
    ready = threading.Event()
    state: dict[str, object] = {}

    async def serve() -> None:
        async with trio.open_nursery() as nursery:
            state["addresses"] = await nursery.start(serve_nsqd, NsqdConfig.loopback())
            state["scope"] = nursery.cancel_scope
            state["token"] = trio.lowlevel.current_trio_token()
            ready.set()

    thread = threading.Thread(target=trio.run, args=(serve,), daemon=True)
    errors = Errors()
    logging.getLogger("trionsq").addHandler(errors)
    thread.start()
    assert ready.wait(30)
    try:
        yield state["addresses"], errors  # type: ignore[misc]
    finally:
        scope: trio.CancelScope = state["scope"]  # type: ignore[assignment]
        trio.from_thread.run_sync(scope.cancel, trio_token=state["token"])  # type: ignore[arg-type]
        thread.join(30)
        logging.getLogger("trionsq").removeHandler(errors)
