"""The console scripts' entry points: ``--version`` answered before anything heavy.

Test harnesses call ``nsqd --version`` once per test to choose features; importing
the command-line machinery first would cost that call most of its time. A command
line of version flags alone is answered from ``version``; any other goes to the
full parser, which answers the same for ``-version`` among other flags.
"""

from __future__ import annotations

import sys

from .version import TRIONSQ_VERSION, version_string

__all__ = ["nsqd", "nsqlookupd", "trionsq"]

_VERSION_FLAGS = frozenset({"-version", "--version", "-version=true", "--version=true"})


def _only_version(arguments: list[str]) -> bool:
    return bool(arguments) and all(argument in _VERSION_FLAGS for argument in arguments)


def nsqd() -> int:
    """The ``nsqd`` command."""
    if _only_version(sys.argv[1:]):
        sys.stdout.write(version_string("nsqd") + "\n")
        return 0
    from .nsqd_command import main

    return main()


def nsqlookupd() -> int:
    """The ``nsqlookupd`` command."""
    if _only_version(sys.argv[1:]):
        sys.stdout.write(version_string("nsqlookupd") + "\n")
        return 0
    from .nsqd_command import nsqlookupd_main

    return nsqlookupd_main()


def trionsq() -> None:
    """The ``trionsq`` command; ``--version`` prints what click's version option prints."""
    if sys.argv[1:] == ["--version"]:
        sys.stdout.write(f"trionsq, version {TRIONSQ_VERSION}\n")
        return
    from .cli import main

    main()
