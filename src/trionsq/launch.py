"""The console scripts' entry points: ``--version`` answered before anything heavy.

Test harnesses call ``nsqd --version`` once per test to choose features; importing
the command-line machinery first would cost that call most of its time. A command
line of version flags alone is answered from ``version``; any other goes to the
full parser, which answers the same for ``-version`` among other flags.

Start-up pauses the cyclic garbage collector: importing and building the broker
allocates hundreds of thousands of objects (attrs classes, Trio's core) and none of
them is garbage, yet every 700 allocations set off a collection (about 35 ms of a
250 ms start here). The command turns it back on, with the start-up objects frozen
out of later collections, once it listens (``nsqd_command``).
"""

from __future__ import annotations

import gc
import sys

from .version import TRIONSQ_VERSION, version_string

__all__ = ["nsqd", "nsqlookupd", "trionsq"]

_VERSION_FLAGS = frozenset({"-version", "--version", "-version=true", "--version=true"})


def _only_version(arguments: list[str]) -> bool:
    return bool(arguments) and all(argument in _VERSION_FLAGS for argument in arguments)


def _answered_version(command: str) -> bool:
    """Whether the arguments were version flags alone, answered as the Go ``command``
    answers them; otherwise the collector is paused for the start-up (see above)."""
    if _only_version(sys.argv[1:]):
        sys.stdout.write(version_string(command) + "\n")
        return True
    gc.disable()
    return False


def nsqd() -> int:
    """The ``nsqd`` command."""
    if _answered_version("nsqd"):
        return 0
    from .nsqd_command import main

    return main()


def nsqlookupd() -> int:
    """The ``nsqlookupd`` command."""
    if _answered_version("nsqlookupd"):
        return 0
    from .nsqd_command import nsqlookupd_main

    return nsqlookupd_main()


def trionsq() -> None:
    """The ``trionsq`` command; ``--version`` prints what click's version option prints."""
    if sys.argv[1:] == ["--version"]:
        sys.stdout.write(f"trionsq, version {TRIONSQ_VERSION}\n")
        return
    gc.disable()
    from .cli import main

    main()
