"""The ``trionsq`` command: ``serve`` and ``lookupd`` with every option of ``nsqd`` and
``nsqlookupd`` (``options``), spelled ``--name value`` or ``--name=value``.

Click only reads the command line and prints help: each option given is handed to
the Go-flag parser as ``-name=value``, so a value means exactly what it means to
``nsqd`` (durations as ``60s``, booleans as ``--snappy=false``, repeatable lists),
and the configuration is resolved and started by the same code (``nsqd_command``).
"""

from __future__ import annotations

import sys
from typing import TYPE_CHECKING

import click

from . import __version__, goflags
from .options import NSQD_FLAGS, NSQLOOKUPD_FLAGS

if TYPE_CHECKING:
    from collections.abc import Callable, Sequence

    from .goflags import FlagSpec

__all__ = ["go_arguments", "main"]

_LIST_KINDS = (goflags.Kind.STRING_LIST, goflags.Kind.FLOAT_LIST)
_COMMAND_SWITCHES = frozenset({"version"})
"""Go flags that are not options of ``serve``/``lookupd`` (``trionsq --version``)."""


def _param_name(spec: FlagSpec) -> str:
    return spec.name.replace("-", "_")


def _click_option(spec: FlagSpec) -> click.Option:
    """The click spelling of one Go flag; values stay text for the Go parser."""
    default = f" [default: {spec.default_text}]" if spec.default_text else ""
    help_text = spec.help[:1].upper() + spec.help[1:] + default
    if spec.bool_flag:
        # --snappy alone means true, as Go's bare -snappy; --snappy=false turns it off
        return click.Option(
            [f"--{spec.name}", _param_name(spec)],
            is_flag=False,
            flag_value="true",
            default=None,
            metavar="[true|false]",
            help=help_text,
        )
    return click.Option(
        [f"--{spec.name}", _param_name(spec)],
        multiple=spec.kind in _LIST_KINDS,
        default=None,
        metavar=spec.type_name.upper() or "VALUE",
        help=help_text,
    )


def go_arguments(flags: Sequence[FlagSpec], given: dict[str, object]) -> list[str]:
    """Click's values (text, or tuples of text for repeatable options) as the
    ``-name=value`` arguments the Go-flag parser takes, in the table's order."""
    arguments: list[str] = []
    for spec in flags:
        value = given.get(_param_name(spec))
        if value is None:
            continue
        texts = value if isinstance(value, tuple) else (value,)
        arguments.extend(f"-{spec.name}={text}" for text in texts)
    return arguments


def _command(
    name: str,
    flags: Sequence[FlagSpec],
    start: Callable[[goflags.ParseResult], int],
    help_text: str,
) -> click.Command:
    """A subcommand offering every option of ``flags`` and starting with ``start``."""
    options = [spec for spec in flags if spec.name not in _COMMAND_SWITCHES]

    def callback(**given: object) -> None:
        try:
            parsed = goflags.parse(flags, go_arguments(options, given))
        except goflags.FlagError as error:
            raise click.UsageError(_with_hint(error)) from None
        sys.exit(start(parsed))

    return click.Command(
        name, callback=callback, params=[_click_option(spec) for spec in options], help=help_text
    )


def _with_hint(error: goflags.FlagError) -> str:
    """nsqd's line for a bad value (scripts may match it), and for a duration what to
    write instead: ``--msg-timeout 5`` is natural to a user of other tools, and Go
    says only ``parse error``."""
    if error.kind is not goflags.Kind.DURATION:
        return str(error)
    number = error.value.strip()
    example = f"{number}s" if number.replace(".", "", 1).isdigit() else "5s"
    return f"{error}; use a duration such as {example}"


def _start_nsqd(parsed: goflags.ParseResult) -> int:
    from .nsqd_command import start_nsqd

    return start_nsqd(parsed)


def _start_lookupd(parsed: goflags.ParseResult) -> int:
    from .nsqd_command import start_lookupd

    return start_lookupd(parsed)


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, prog_name="trionsq")
def main() -> None:
    """trionsq: an NSQ-compatible message broker on Trio.

    Existing NSQ clients (pynsq, gnsq, go-nsq, nsqjs ...) talk to it unchanged.
    """


main.add_command(
    _command(
        "serve",
        NSQD_FLAGS,
        _start_nsqd,
        """Start the broker (nsqd). Every nsqd option, with nsqd's names, values and
        defaults (the nsqd command takes them in Go's syntax); --config FILE reads
        nsqd's TOML config file.

        Stops cleanly on Ctrl-C (SIGINT) or SIGTERM.""",
    )
)
main.add_command(
    _command(
        "lookupd",
        NSQLOOKUPD_FLAGS,
        _start_lookupd,
        """Start a lookupd (nsqlookupd): brokers register their topics and channels,
        consumers ask where a topic is. Every nsqlookupd option, with its names,
        values and defaults.

        Stops cleanly on Ctrl-C (SIGINT) or SIGTERM.""",
    )
)


@main.command("top")
@click.option(
    "--http-address",
    default="127.0.0.1:4151",
    show_default=True,
    help="The broker's HTTP address: host:port, http://host:port or https://host:port.",
)
@click.option("--topic", "topics", multiple=True, help="Only this topic (repeatable).")
@click.option(
    "--interval",
    default="1s",
    show_default=True,
    help="Time between snapshots (a Go duration, at least 100ms).",
)
@click.option(
    "--auth-secret",
    envvar="TRIONSQ_AUTH_SECRET",
    default=None,
    help="The secret, when the broker runs with AUTH (or TRIONSQ_AUTH_SECRET).",
)
@click.option(
    "--sort",
    type=click.Choice(["depth", "name", "rate"]),
    default="depth",
    show_default=True,
    help="Order of topics and channels.",
)
@click.option(
    "--once",
    is_flag=True,
    help="Print the view after two snapshots (rates are measured between them) and exit.",
)
def _top(
    http_address: str,
    topics: tuple[str, ...],
    interval: str,
    auth_secret: str | None,
    sort: str,
    once: bool,
) -> None:
    """Watch a broker: its topics and channels (depth, in-flight, rates, clients)
    and its events as they happen, from the broker's admin stream.

    Stops on q or Ctrl-C; exits with 1 when the broker cannot be reached or
    closes the stream."""
    from .durations import parse_duration
    from .top import Sort
    from .top import main as top_main

    try:
        seconds = parse_duration(interval)
    except ValueError as error:
        raise click.BadParameter(str(error), param_hint="--interval") from None
    if seconds < 0.1:
        raise click.BadParameter("must be at least 100ms", param_hint="--interval")
    sys.exit(
        top_main(
            http_address,
            topics=topics,
            interval_ms=round(seconds * 1000),
            auth_secret=auth_secret,
            sort=Sort(sort),
            once=once,
        )
    )
