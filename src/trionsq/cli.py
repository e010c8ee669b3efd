"""The ``trionsq`` command. Logging is configured here and nowhere else."""

from __future__ import annotations

import sys

import click

from . import __version__

__all__ = ["main"]


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, prog_name="trionsq")
def main() -> None:
    """trionsq: an NSQ-compatible message broker on Trio.

    Existing NSQ clients (pynsq, gnsq, go-nsq, nsqjs ...) talk to it unchanged.
    """


@main.command()
def serve() -> None:
    """Start the broker (nsqd's TCP protocol on 4150, HTTP on 4151)."""
    click.echo(
        f"trionsq {__version__}: the broker is not built yet; it arrives with the broker\n"
        "issue. What is installed now is the NSQ protocol core (trionsq.protocol) and\n"
        "its test suite: run `make test`. Nothing is listening.",
        err=True,
    )
    sys.exit(0)
