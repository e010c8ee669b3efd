"""Keys typed at ``trionsq top``: the terminal is put in cbreak mode without echo
(keys arrive one at a time and are not written over the view, as in top(1)) for as
long as the view runs, and restored after, however it ends; ``q`` quits."""

from __future__ import annotations

import os
import sys
import termios
import tty
from contextlib import contextmanager
from typing import TYPE_CHECKING, Final

import trio

if TYPE_CHECKING:
    from collections.abc import Iterator

__all__ = ["QUIT_KEYS", "quit_on_key"]

QUIT_KEYS: Final = frozenset(b"qQ")


@contextmanager
def _cbreak(fd: int) -> Iterator[None]:
    """No echo, no line buffering (Ctrl-C still interrupts), restored at the end."""
    saved = termios.tcgetattr(fd)
    tty.setcbreak(fd, termios.TCSANOW)
    try:
        yield
    finally:
        termios.tcsetattr(fd, termios.TCSADRAIN, saved)


async def quit_on_key(scope: trio.CancelScope) -> None:
    """Cancel ``scope`` when ``q`` is typed; nothing (but wait) unless stdin is a
    terminal. Every other key is read and dropped, so none shows."""
    try:
        fd = sys.stdin.fileno()
    except (AttributeError, OSError, ValueError):  # no stdin: nothing to read
        await trio.sleep_forever()
    if not os.isatty(fd):
        await trio.sleep_forever()
    was_blocking = os.get_blocking(fd)
    with _cbreak(fd):
        try:
            # FdStream makes the (shared) descriptor non-blocking: undone in finally
            async with trio.lowlevel.FdStream(os.dup(fd)) as keys:
                while typed := await keys.receive_some(64):
                    if QUIT_KEYS.intersection(typed):
                        scope.cancel()
                        return
        finally:
            os.set_blocking(fd, was_blocking)
    await trio.sleep_forever()  # stdin closed: only Ctrl-C ends it now
