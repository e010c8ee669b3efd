"""The ``nsqd`` and ``nsqlookupd`` commands: trionsq behind nsqd's own command line.

Scripts, service units and container images written for nsqd start trionsq unchanged:
the same flags in Go's syntax (``goflags``), the same ``-config`` TOML keys, the same
defaults and the same stderr lines (``TCP: listening on 127.0.0.1:4150``) for tools
that wait for them. ``trionsq serve`` is the readable front door to the same options.

Exit codes are nsqd's: 2 for a bad command line (one line on stderr, Go's wording),
1 for a configuration nsqd would refuse or a port that cannot be bound (one FATAL log
line), 0 after ``-version``, ``-h`` or a clean SIGINT/SIGTERM shutdown.
"""

from __future__ import annotations

import logging
import signal
import sys
import tomllib
from typing import TYPE_CHECKING, Final, TypeVar

import attrs

from . import goflags
from .addresses import join_host_port
from .config import (
    EXPERIMENTS,
    LOG_LEVELS,
    TLS_VERSIONS,
    ConfigError,
    NsqdConfig,
    TlsRequired,
)
from .goflags import FlagSpec, Kind
from .logs import configure_logging
from .lookupd.config import LookupdConfig
from .version import version_string

if TYPE_CHECKING:
    from collections.abc import Awaitable, Callable, Sequence

    from .lookupd.server import LookupdAddresses
    from .nursery_tree import BoundAddresses

_Addresses = TypeVar("_Addresses")
_Config = TypeVar("_Config")

__all__ = [
    "NSQD_FLAGS",
    "NSQLOOKUPD_FLAGS",
    "build_lookupd_config",
    "build_nsqd_config",
    "listening_lines",
    "lookupd_listening_lines",
    "main",
    "nsqlookupd_main",
    "run_lookupd_until_signalled",
    "run_until_signalled",
    "serve_lookupd_process",
    "version_string",
]

log = logging.getLogger("trionsq")

_D: Final = NsqdConfig()
"""The defaults every flag shows and falls back to."""


def _log_level(text: str) -> str:
    level = text.lower()
    if level not in LOG_LEVELS:
        raise ValueError(f"unknown log level {text!r}, expected one of {', '.join(LOG_LEVELS)}")
    return level


def _tls_required(text: str) -> TlsRequired:
    """nsqd's ``--tls-required``: a boolean, or ``tcp-https`` for "TCP only"."""
    lowered = text.lower()
    if lowered == "tcp-https":
        return TlsRequired.EXCEPT_HTTP
    try:
        return TlsRequired.YES if goflags.parse_go_bool(lowered) else TlsRequired.NO
    except ValueError:
        raise ValueError(f"{text!r} is not true, false or tcp-https") from None


def _tls_min_version(text: str) -> str:
    lowered = text.lower()
    if lowered == "":
        return _D.tls_min_version
    if lowered not in TLS_VERSIONS:
        raise ValueError(f"unknown TLS version {text!r}, expected one of {', '.join(TLS_VERSIONS)}")
    return lowered


def _flag(
    name: str,
    kind: Kind,
    text: str,
    *,
    dest: str | None = None,
    cfg_key: str | None = None,
    parse: Callable[[str], goflags.FlagValue] | None = None,
    bool_flag: bool = False,
    default_text: str | None = None,
) -> FlagSpec:
    """An nsqd option whose default is NsqdConfig's, so the two never disagree."""
    field = dest or name.replace("-", "_")
    default: goflags.FlagValue = getattr(_D, field)
    spec = FlagSpec(
        name,
        kind,
        default,
        text,
        dest=field,
        cfg_key=cfg_key or field,
        parse=parse,
        bool_flag=bool_flag or kind is Kind.BOOL,
    )
    return spec if default_text is None else attrs.evolve(spec, default_text=default_text)


STR, BOOL, INT, DUR = Kind.STRING, Kind.BOOL, Kind.INT, Kind.DURATION

# fmt: off
NSQD_FLAGS: Final[tuple[FlagSpec, ...]] = (
    FlagSpec("version", BOOL, default=False, help="print the version and exit", option=False),
    FlagSpec("config", STR, default="", help="a TOML file of options (keys: flag names with _)", option=False),
    _flag("log-level", STR, "least severe level logged: debug, info, warn, error or fatal",
          parse=_log_level, default_text=_D.log_level.upper()),
    _flag("log-prefix", STR, "text at the start of every log line"),
    FlagSpec("verbose", BOOL, default=False, help="[deprecated] ignored; see -log-level", option=False),
    _flag("node-id", INT, "node part of message IDs, in [0,1024); the default comes from the hostname",
          dest="node_id", cfg_key="id"),
    FlagSpec("worker-id", BOOL, default=False, help="[deprecated] ignored; see -node-id", option=False),
    _flag("https-address", STR, "<addr>:<port> for HTTPS clients (used when -tls-cert/-tls-key are set)"),
    _flag("http-address", STR, "<addr>:<port> for HTTP clients; empty disables HTTP"),
    _flag("tcp-address", STR, "<addr>:<port> for TCP clients; port 0 picks a free port"),
    _flag("auth-http-address", Kind.STRING_LIST, "<addr>:<port> or URL of an auth server (repeatable)",
          dest="auth_http_addresses", cfg_key="auth_http_addresses"),
    _flag("auth-http-request-method", STR, "HTTP method for auth server requests: get or post"),
    _flag("broadcast-address", STR, "address registered with nsqlookupd"),
    _flag("broadcast-tcp-port", INT, "TCP port registered with nsqlookupd (0: the bound TCP port)"),
    _flag("broadcast-http-port", INT, "HTTP port registered with nsqlookupd (0: the bound HTTP port)"),
    _flag("lookupd-tcp-address", Kind.STRING_LIST, "<addr>:<port> of an nsqlookupd (repeatable)",
          dest="lookupd_tcp_addresses", cfg_key="nsqlookupd_tcp_addresses"),
    _flag("http-client-connect-timeout", DUR, "connect timeout of outgoing HTTP requests"),
    _flag("http-client-request-timeout", DUR, "total timeout of outgoing HTTP requests"),
    _flag("topology-region", STR, "region of this node, for topology-aware consumption"),
    _flag("topology-zone", STR, "zone of this node, for topology-aware consumption"),
    _flag("data-path", STR, "directory for message logs and metadata (default: current directory)"),
    _flag("mem-queue-size", INT, "messages an #ephemeral topic or channel holds before dropping"),
    _flag("max-bytes-per-file", INT, "size in bytes at which a log segment file is rolled"),
    _flag("sync-every", INT, "writes between fsyncs of a log"),
    _flag("sync-timeout", DUR, "longest time between fsyncs of a log with writes"),
    _flag("queue-scan-worker-pool-max", INT, "accepted for nsqd compatibility (timeouts use deadlines)"),
    _flag("queue-scan-selection-count", INT, "accepted for nsqd compatibility (timeouts use deadlines)"),
    _flag("msg-timeout", DUR, "time a delivered message may go without FIN/REQ/TOUCH before redelivery"),
    _flag("max-msg-timeout", DUR, "largest msg_timeout a client may ask for"),
    _flag("max-msg-size", INT, "largest message body in bytes"),
    _flag("max-req-timeout", DUR, "longest delay for REQ and DPUB"),
    _flag("max-body-size", INT, "largest command body (MPUB, IDENTIFY, AUTH) in bytes"),
    _flag("max-heartbeat-interval", DUR, "largest heartbeat interval a client may ask for"),
    _flag("max-rdy-count", INT, "largest RDY a client may send"),
    _flag("max-output-buffer-size", INT, "largest output_buffer_size a client may ask for, in bytes"),
    _flag("max-output-buffer-timeout", DUR, "largest output_buffer_timeout a client may ask for"),
    _flag("min-output-buffer-timeout", DUR, "smallest output_buffer_timeout a client may ask for"),
    _flag("output-buffer-timeout", DUR, "default time buffered messages may wait before being written"),
    _flag("max-channel-consumers", INT, "most consumers per channel (0: unlimited)"),
    _flag("statsd-address", STR, "UDP <addr>:<port> of a statsd to push metrics to"),
    _flag("statsd-interval", DUR, "time between statsd pushes"),
    _flag("statsd-mem-stats", BOOL, "include memory statistics in statsd pushes"),
    _flag("statsd-prefix", STR, "prefix of statsd keys (%s: this node's host key)"),
    _flag("statsd-udp-packet-size", INT, "largest statsd UDP packet in bytes"),
    _flag("statsd-exclude-ephemeral", BOOL, "leave #ephemeral topics and channels out of statsd"),
    _flag("e2e-processing-latency-percentile", Kind.FLOAT_LIST,
          "end-to-end latency percentile to track, in (0,1] (repeatable or comma-separated)",
          dest="e2e_processing_latency_percentiles", cfg_key="e2e_processing_latency_percentiles"),
    _flag("e2e-processing-latency-window-time", DUR, "window of the end-to-end latency percentiles"),
    _flag("tls-cert", STR, "certificate file (PEM); with -tls-key enables TLS and HTTPS"),
    _flag("tls-key", STR, "private key file (PEM)"),
    _flag("tls-client-auth-policy", STR, "client certificates: require or require-verify"),
    _flag("tls-root-ca-file", STR, "CA file (PEM) to verify client certificates"),
    _flag("tls-required", STR, "require TLS from clients: true, false or tcp-https",
          parse=_tls_required, bool_flag=True),
    _flag("tls-min-version", STR, "oldest TLS version accepted: " + ", ".join(TLS_VERSIONS),
          parse=_tls_min_version, default_text=_D.tls_min_version),
    _flag("deflate", BOOL, "let clients negotiate deflate compression"),
    _flag("max-deflate-level", INT, "highest deflate level a client may ask for, 1..9"),
    _flag("snappy", BOOL, "let clients negotiate snappy compression"),
    _flag("enable-experiment", Kind.STRING_LIST,
          "turn on an experimental feature (repeatable): " + ", ".join(EXPERIMENTS)),
)
# fmt: on
"""Every nsqd flag (defaults.md), in nsqd's order."""

_L: Final = LookupdConfig()
"""nsqlookupd's defaults, which its flags show and fall back to."""

# fmt: off
NSQLOOKUPD_FLAGS: Final[tuple[FlagSpec, ...]] = (
    FlagSpec("config", STR, default="", help="a TOML file of options (keys: flag names with _)", option=False),
    FlagSpec("version", BOOL, default=False, help="print the version and exit", option=False),
    FlagSpec("log-level", STR, default=_L.log_level, help="least severe level logged: debug, info, warn, error or fatal",
             parse=_log_level, default_text=_L.log_level.upper()),
    FlagSpec("log-prefix", STR, default=_L.log_prefix, help="text at the start of every log line"),
    FlagSpec("verbose", BOOL, default=False, help="[deprecated] ignored; see -log-level", option=False),
    FlagSpec("tcp-address", STR, default=_L.tcp_address, help="<addr>:<port> for nsqd connections (TCP protocol V1)"),
    FlagSpec("http-address", STR, default=_L.http_address, help="<addr>:<port> for HTTP clients"),
    FlagSpec("broadcast-address", STR, default=_L.broadcast_address,
             help="address of this lookupd node (given to nsqd in the IDENTIFY reply)"),
    FlagSpec("inactive-producer-timeout", DUR, default=_L.inactive_producer_timeout,
             help="duration of time a producer will remain in the active list since its last ping"),
    FlagSpec("tombstone-lifetime", DUR, default=_L.tombstone_lifetime,
             help="duration of time a producer will remain tombstoned if registration remains"),
)
# fmt: on
"""nsqlookupd's flags (defaults.md), in nsqlookupd's order."""


def _resolved_options(
    flags: Sequence[FlagSpec], parsed: goflags.ParseResult
) -> dict[str, goflags.FlagValue]:
    """Flags, then the ``-config`` file (TOML, as nsqd's), then defaults, by field.

    Raises:
        ConfigError: the file cannot be read or holds a bad value.
    """
    path = str(parsed.values["config"])
    file_options: dict[str, object] = {}
    if path:
        try:
            with open(path, "rb") as file:
                file_options = tomllib.load(file)
        except OSError as error:
            raise ConfigError(f"cannot load config file {path}: {error.strerror}") from None
        except tomllib.TOMLDecodeError as error:
            raise ConfigError(f"cannot load config file {path}: {error}") from None
    try:
        return goflags.resolve(flags, parsed, file_options)
    except goflags.ConfigValueError as error:
        raise ConfigError(f"config file {path}: {error}") from None


def build_nsqd_config(parsed: goflags.ParseResult) -> NsqdConfig:
    """The configuration nsqd would run with: flags, then the ``-config`` file, then
    defaults; checked with ``NsqdConfig.validate``.

    Raises:
        ConfigError: one line (unreadable or bad file, bad value, refused setting).
    """
    options = _resolved_options(NSQD_FLAGS, parsed)
    percentiles = options["e2e_processing_latency_percentiles"]
    if "e2e-processing-latency-percentile" in parsed.explicit and isinstance(percentiles, tuple):
        # nsqd keeps the percentiles given as flags sorted, largest first
        options["e2e_processing_latency_percentiles"] = tuple(
            sorted((float(value) for value in percentiles), reverse=True)
        )
    config = NsqdConfig.from_options(options)
    config.validate()
    return config


def listening_lines(addresses: BoundAddresses) -> list[str]:
    """The lines nsqd logs once its listeners accept, in its format."""
    lines = [f"TCP: listening on {join_host_port(*addresses.tcp)}"]
    if addresses.http is not None:
        lines.append(f"HTTP: listening on {join_host_port(*addresses.http)}")
    if addresses.https is not None:
        lines.append(f"HTTPS: listening on {join_host_port(*addresses.https)}")
    return lines


async def run_until_signalled(config: NsqdConfig) -> None:
    """Run a broker, log where it listens, stop cleanly on SIGINT or SIGTERM."""
    from .nursery_tree import serve_nsqd

    await _serve_until_signalled(serve_nsqd, config, listening_lines)


async def _serve_until_signalled(
    serve_fn: Callable[[_Config], Awaitable[None]],
    config: _Config,
    listening: Callable[[_Addresses], list[str]],
) -> None:
    """Start ``serve_fn(config)`` (it reports its addresses through ``task_status``),
    log ``listening(addresses)``, and stop it cleanly on SIGINT or SIGTERM."""
    import trio

    with trio.open_signal_receiver(signal.SIGINT, signal.SIGTERM) as signals:
        async with trio.open_nursery() as nursery:
            addresses: _Addresses = await nursery.start(serve_fn, config)
            for line in listening(addresses):
                log.info("%s", line)
            async for signum in signals:
                log.info("%s: shutting down", signal.Signals(signum).name)
                nursery.cancel_scope.cancel()
                break


def first_os_error(error: BaseException) -> OSError | None:
    """The OSError (a port in use, an address not here) inside Trio's exception groups."""
    if isinstance(error, OSError):
        return error
    if isinstance(error, BaseExceptionGroup):
        for inner in error.exceptions:
            found = first_os_error(inner)
            if found is not None:
                return found
    return None


def serve(config: NsqdConfig) -> int:
    """Run a validated configuration in this process until a signal; the exit code."""
    from .cli import tune_garbage_collector

    configure_logging(config.log_level, config.log_prefix)
    tune_garbage_collector()
    log.info("%s", version_string("nsqd"))
    log.info("ID: %d", config.node_id)
    return _run_process(run_until_signalled, config)


def _run_process(run: Callable[[_Config], Awaitable[None]], config: _Config) -> int:
    """``trio.run(run, config)`` as the process's life; the exit code (130 for a
    Ctrl-C before the signal handler was in place, 1 when it cannot listen)."""
    import trio

    try:
        trio.run(run, config)
    except KeyboardInterrupt:
        return 130
    except BaseException as error:
        failure = first_os_error(error)
        if failure is None:
            raise
        log.critical("cannot listen: %s", failure.strerror or failure)
        return 1
    return 0


def _fatal(prefix: str, message: str) -> int:
    """One FATAL line in nsqd's log format, as nsqd reports a refused start."""
    configure_logging("info", prefix)
    log.critical("%s", message)
    return 1


def _command_line(
    flags: Sequence[FlagSpec], program: str, argv: Sequence[str] | None
) -> goflags.ParseResult | int:
    """Go-style flags parsed, or the exit code once ``-help``, a bad flag or
    ``-version`` has been answered as the Go program answers them."""
    arguments = sys.argv[1:] if argv is None else argv
    try:
        parsed = goflags.parse(flags, arguments)
    except goflags.HelpRequested:
        sys.stderr.write(goflags.usage(flags, program))
        return 0
    except goflags.FlagError as error:
        sys.stderr.write(f"{error}\n")
        return 2
    if parsed.values["version"]:
        sys.stdout.write(version_string(program) + "\n")
        return 0
    return parsed


def main(argv: Sequence[str] | None = None) -> int:
    """The ``nsqd`` console script."""
    parsed = _command_line(NSQD_FLAGS, "nsqd", argv)
    if isinstance(parsed, int):
        return parsed
    try:
        config = build_nsqd_config(parsed)
    except ConfigError as error:
        return _fatal("[nsqd] ", str(error))
    return serve(config)


def build_lookupd_config(parsed: goflags.ParseResult) -> LookupdConfig:
    """The configuration nsqlookupd would run with: flags, then the ``-config`` file,
    then defaults; checked with ``LookupdConfig.validate``.

    Raises:
        ConfigError: one line (unreadable or bad file, bad value, refused setting).
    """
    options = _resolved_options(NSQLOOKUPD_FLAGS, parsed)
    config = LookupdConfig.from_options(options)
    config.validate()
    return config


def lookupd_listening_lines(addresses: LookupdAddresses) -> list[str]:
    """The lines nsqlookupd logs once its listeners accept, in its format."""
    return [
        f"TCP: listening on {join_host_port(*addresses.tcp)}",
        f"HTTP: listening on {join_host_port(*addresses.http)}",
    ]


async def run_lookupd_until_signalled(config: LookupdConfig) -> None:
    """Run a lookupd, log where it listens, stop cleanly on SIGINT or SIGTERM."""
    from .lookupd.server import serve_lookupd

    await _serve_until_signalled(serve_lookupd, config, lookupd_listening_lines)


def serve_lookupd_process(config: LookupdConfig) -> int:
    """Run a validated lookupd configuration in this process until a signal; the exit code."""
    configure_logging(config.log_level, config.log_prefix)
    log.info("%s", version_string("nsqlookupd"))
    return _run_process(run_lookupd_until_signalled, config)


def nsqlookupd_main(argv: Sequence[str] | None = None) -> int:
    """The ``nsqlookupd`` console script: nsqlookupd's command line and behaviour."""
    parsed = _command_line(NSQLOOKUPD_FLAGS, "nsqlookupd", argv)
    if isinstance(parsed, int):
        return parsed
    try:
        config = build_lookupd_config(parsed)
    except ConfigError as error:
        return _fatal(str(parsed.values["log-prefix"]), str(error))
    return serve_lookupd_process(config)
