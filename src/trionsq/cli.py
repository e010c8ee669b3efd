"""The ``trionsq`` command. Logging is configured here and nowhere else."""

from __future__ import annotations

import gc
import logging
import signal

import attrs
import click
import trio

from . import __version__
from .config import NsqdConfig
from .durations import format_duration, parse_duration
from .logs import configure_logging

__all__ = ["main"]

log = logging.getLogger("trionsq")
DEFAULTS = NsqdConfig()


def _as_duration(ctx: click.Context, param: click.Parameter, value: str) -> float:
    """Click callback: a Go duration such as ``60s``, ``250ms`` or ``1h`` to seconds."""
    try:
        return parse_duration(value)
    except ValueError as error:
        raise click.BadParameter(str(error), ctx, param) from None


def _duration_option(name: str, default: float, text: str) -> click.Option:
    return click.Option(
        [f"--{name}"],
        metavar="DURATION",
        default=format_duration(default),
        show_default=True,
        callback=_as_duration,
        help=text,
    )


SERVE_OPTIONS: list[click.Parameter] = [
    click.Option(
        ["--tcp-address"],
        default=DEFAULTS.tcp_address,
        show_default=True,
        help="<addr>:<port> for NSQ clients (TCP protocol V2); port 0 picks a free port.",
    ),
    click.Option(
        ["--mem-queue-size"],
        type=int,
        default=DEFAULTS.mem_queue_size,
        show_default=True,
        help="Messages an #ephemeral topic keeps unread before it drops new ones.",
    ),
    _duration_option(
        "msg-timeout",
        DEFAULTS.msg_timeout,
        "How long a delivered message may go without FIN/REQ/TOUCH before it is redelivered.",
    ),
    _duration_option(
        "max-msg-timeout",
        DEFAULTS.max_msg_timeout,
        "Largest msg_timeout a client may ask for; TOUCH never extends past it.",
    ),
    click.Option(
        ["--max-msg-size"],
        type=int,
        default=DEFAULTS.max_msg_size,
        show_default=True,
        help="Largest message body in bytes.",
    ),
    click.Option(
        ["--max-body-size"],
        type=int,
        default=DEFAULTS.max_body_size,
        show_default=True,
        help="Largest command body (MPUB, IDENTIFY) in bytes.",
    ),
    _duration_option(
        "max-req-timeout", DEFAULTS.max_req_timeout, "Longest delay for REQ and DPUB."
    ),
    click.Option(
        ["--max-rdy-count"],
        type=int,
        default=DEFAULTS.max_rdy_count,
        show_default=True,
        help="Largest RDY a client may send.",
    ),
    _duration_option(
        "max-heartbeat-interval",
        DEFAULTS.max_heartbeat_interval,
        "Largest heartbeat interval a client may ask for.",
    ),
    click.Option(
        ["--max-output-buffer-size"],
        type=int,
        default=DEFAULTS.max_output_buffer_size,
        show_default=True,
        help="Largest output_buffer_size a client may ask for.",
    ),
    _duration_option(
        "max-output-buffer-timeout",
        DEFAULTS.max_output_buffer_timeout,
        "Largest output_buffer_timeout a client may ask for.",
    ),
    _duration_option(
        "min-output-buffer-timeout",
        DEFAULTS.min_output_buffer_timeout,
        "Smallest output_buffer_timeout a client may ask for.",
    ),
    _duration_option(
        "output-buffer-timeout",
        DEFAULTS.output_buffer_timeout,
        "Default time buffered messages may wait before they are written.",
    ),
    click.Option(
        ["--log-level"],
        type=click.Choice(["debug", "info", "warn", "error", "fatal"]),
        default="info",
        show_default=True,
        help="Least severe log level to print.",
    ),
]


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, prog_name="trionsq")
def main() -> None:
    """trionsq: an NSQ-compatible message broker on Trio.

    Existing NSQ clients (pynsq, gnsq, go-nsq, nsqjs ...) talk to it unchanged.
    """


GC_THRESHOLDS = (700, 50, 1000)
"""Messages held in memory are millions of small objects; with CPython's default
(700, 10, 10) full collections walk them often enough to cost 10-20 % of consume
throughput and pauses of 50-100 ms (benchmarks/, docs/internals.md)."""


def tune_garbage_collector() -> None:
    """Collect the older generations less often; a process-wide choice, so only here."""
    gc.set_threshold(*GC_THRESHOLDS)


def _serve(log_level: str, **options: object) -> None:
    """Start the broker. Options have nsqd's names and defaults.

    Stops cleanly on Ctrl-C (SIGINT) or SIGTERM.
    """
    configure_logging(log_level)
    tune_garbage_collector()
    fields = {f.name for f in attrs.fields(NsqdConfig)}
    config = NsqdConfig(**{k: v for k, v in options.items() if k in fields})  # type: ignore[arg-type]
    try:
        trio.run(_run_until_signalled, config)
    except OSError as error:
        raise click.ClickException(
            f"cannot listen on {config.tcp_address}: {error.strerror}"
        ) from None


async def _run_until_signalled(config: NsqdConfig) -> None:
    from .nursery_tree import serve_nsqd

    with trio.open_signal_receiver(signal.SIGINT, signal.SIGTERM) as signals:
        async with trio.open_nursery() as nursery:
            addresses = await nursery.start(serve_nsqd, config)
            host, port = addresses.tcp
            log.info("TCP: listening on %s:%d", host, port)
            async for signum in signals:
                log.info("%s: shutting down", signal.Signals(signum).name)
                nursery.cancel_scope.cancel()
                break


main.add_command(click.Command("serve", callback=_serve, params=SERVE_OPTIONS, help=_serve.__doc__))
