"""The ``trionsq`` command. Logging is configured here and nowhere else."""

from __future__ import annotations

import gc
import logging
from typing import TYPE_CHECKING, TypeVar

import click
import trio

from . import __version__
from .config import ConfigError, NsqdConfig, TlsRequired
from .durations import format_duration, parse_duration
from .logs import configure_logging
from .lookupd.config import LookupdConfig
from .version import version_string

if TYPE_CHECKING:
    from collections.abc import Awaitable, Callable

_Config = TypeVar("_Config")

__all__ = ["main"]

DEFAULTS = NsqdConfig()
LOOKUPD_DEFAULTS = LookupdConfig()


def _as_duration(ctx: click.Context, param: click.Parameter, value: str) -> float:
    """Click callback: a Go duration such as ``60s``, ``250ms`` or ``1h`` to seconds."""
    try:
        return parse_duration(value)
    except ValueError as error:
        raise click.BadParameter(str(error), ctx, param) from None


def _as_tls_required(ctx: click.Context, param: click.Parameter, value: str) -> TlsRequired:
    """Click callback: nsqd's ``--tls-required`` words to the config's enum."""
    return {"true": TlsRequired.YES, "tcp-https": TlsRequired.EXCEPT_HTTP}.get(
        value, TlsRequired.NO
    )


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
        ["--http-address"],
        default=DEFAULTS.http_address,
        show_default=True,
        help="<addr>:<port> for the HTTP API; an empty string turns HTTP off.",
    ),
    click.Option(
        ["--https-address"],
        default=DEFAULTS.https_address,
        show_default=True,
        help="<addr>:<port> for the HTTPS API; used only with --tls-cert and --tls-key.",
    ),
    click.Option(
        ["--data-path"],
        default=DEFAULTS.data_path,
        metavar="DIR",
        help="Directory for message logs and metadata.  [default: current directory]",
    ),
    click.Option(
        ["--in-memory", "persist"],
        flag_value=False,
        default=True,
        help="Keep everything in memory and write nothing (lost at exit).",
    ),
    click.Option(
        ["--trace-log"],
        is_flag=True,
        default=DEFAULTS.trace_log,
        help="Log each traced message (published with a trace id) when published and "
        "each time it is delivered: topic, partition, id, trace id, offset, client.",
    ),
    click.Option(
        ["--lookupd-tcp-address", "lookupd_tcp_addresses"],
        multiple=True,
        metavar="ADDR:PORT",
        help="An nsqlookupd to register with; repeat for several.",
    ),
    click.Option(
        ["--broadcast-address"],
        default=DEFAULTS.broadcast_address,
        show_default=True,
        help="The address this broker gives nsqlookupd for clients to connect to.",
    ),
    click.Option(
        ["--node-id"],
        type=click.IntRange(0, 1023),
        default=DEFAULTS.node_id,
        show_default=True,
        help="Node part of message IDs; the default comes from the hostname.",
    ),
    click.Option(
        ["--tls-cert"],
        default=DEFAULTS.tls_cert,
        metavar="FILE",
        help="Certificate (PEM); with --tls-key, clients may upgrade to TLS and HTTPS listens.",
    ),
    click.Option(
        ["--tls-key"],
        default=DEFAULTS.tls_key,
        metavar="FILE",
        help="Private key (PEM) of --tls-cert.",
    ),
    click.Option(
        ["--tls-required"],
        type=click.Choice(["false", "true", "tcp-https"]),
        default="false",
        show_default=True,
        callback=_as_tls_required,
        help="Refuse clients that do not upgrade to TLS (tcp-https: TCP only, HTTP stays open).",
    ),
    click.Option(
        ["--mem-queue-size"],
        type=int,
        default=DEFAULTS.mem_queue_size,
        show_default=True,
        help="Messages an #ephemeral topic or channel keeps before it drops new ones; "
        "also how many recent messages a durable topic keeps in memory.",
    ),
    click.Option(
        ["--max-bytes-per-file"],
        type=int,
        default=DEFAULTS.max_bytes_per_file,
        show_default=True,
        help="Size at which a topic's log starts a new segment file.",
    ),
    click.Option(
        ["--sync-every"],
        type=int,
        default=DEFAULTS.sync_every,
        show_default=True,
        help="fsync the logs after this many messages (power-loss safety; "
        "a kill -9 loses nothing acknowledged either way).",
    ),
    _duration_option(
        "retention",
        DEFAULTS.retention,
        "How long consumed log segments are kept (0: deleted once every channel is done).",
    ),
    _duration_option(
        "sync-timeout",
        DEFAULTS.sync_timeout,
        "Longest time written messages wait for an fsync.",
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


def _serve(**options: object) -> None:
    """Start the broker. Options have nsqd's names and defaults; the nsqd command
    takes the same options in nsqd's own syntax, plus -config FILE.

    Stops cleanly on Ctrl-C (SIGINT) or SIGTERM.
    """
    from .nsqd_command import run_until_signalled

    try:
        config = NsqdConfig.from_options(options)
        config.validate()
    except ConfigError as error:
        raise click.UsageError(str(error)) from None
    configure_logging(config.log_level, config.log_prefix)
    tune_garbage_collector()
    _run(run_until_signalled, config)


def _run(run: Callable[[_Config], Awaitable[None]], config: _Config) -> None:
    """``trio.run(run, config)``; a port in use (or another OSError while binding)
    becomes one line and exit status 1 instead of a traceback."""
    from .nsqd_command import first_os_error

    try:
        trio.run(run, config)
    except BaseException as error:
        failure = first_os_error(error)
        if failure is None:
            raise
        raise click.ClickException(f"cannot listen: {failure.strerror or failure}") from None


main.add_command(click.Command("serve", callback=_serve, params=SERVE_OPTIONS, help=_serve.__doc__))


LOOKUPD_OPTIONS: list[click.Parameter] = [
    click.Option(
        ["--tcp-address"],
        default=LOOKUPD_DEFAULTS.tcp_address,
        show_default=True,
        help="<addr>:<port> where brokers (nsqd) register (TCP protocol V1); port 0 picks "
        "a free port.",
    ),
    click.Option(
        ["--http-address"],
        default=LOOKUPD_DEFAULTS.http_address,
        show_default=True,
        help="<addr>:<port> for the HTTP API consumers and nsqadmin ask (/lookup, /nodes ...).",
    ),
    click.Option(
        ["--broadcast-address"],
        default=LOOKUPD_DEFAULTS.broadcast_address,
        show_default=True,
        help="The address of this lookupd, given to brokers in the IDENTIFY reply.",
    ),
    _duration_option(
        "inactive-producer-timeout",
        LOOKUPD_DEFAULTS.inactive_producer_timeout,
        "A broker not heard from (PING) for this long is left out of /lookup and /nodes.",
    ),
    _duration_option(
        "tombstone-lifetime",
        LOOKUPD_DEFAULTS.tombstone_lifetime,
        "How long /topic/tombstone hides a broker from /lookup of that topic.",
    ),
    click.Option(
        ["--log-level"],
        type=click.Choice(["debug", "info", "warn", "error", "fatal"]),
        default=LOOKUPD_DEFAULTS.log_level,
        show_default=True,
        help="Least severe log level to print.",
    ),
    click.Option(
        ["--log-prefix"],
        default=LOOKUPD_DEFAULTS.log_prefix,
        show_default=True,
        help="Text at the start of every log line.",
    ),
]


def _lookupd(**options: object) -> None:
    """Start a lookupd (nsqlookupd): brokers register their topics and channels,
    consumers ask where a topic is. Options have nsqlookupd's names and defaults;
    the nsqlookupd command takes the same options in its own syntax.

    Stops cleanly on Ctrl-C (SIGINT) or SIGTERM.
    """
    from .nsqd_command import run_lookupd_until_signalled

    try:
        config = LookupdConfig.from_options(options)
        config.validate()
    except ConfigError as error:
        raise click.UsageError(str(error)) from None
    configure_logging(config.log_level, config.log_prefix)
    logging.getLogger("trionsq").info("%s", version_string("nsqlookupd"))
    _run(run_lookupd_until_signalled, config)


main.add_command(
    click.Command("lookupd", callback=_lookupd, params=LOOKUPD_OPTIONS, help=_lookupd.__doc__)
)
