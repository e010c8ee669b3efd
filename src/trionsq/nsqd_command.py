"""The ``nsqd`` and ``nsqlookupd`` commands: trionsq behind nsqd's own command line.

Scripts, service units and container images written for nsqd start trionsq unchanged:
the same flags in Go's syntax (``goflags``), the same ``-config`` TOML keys, the same
defaults and the same stderr lines (``TCP: listening on 127.0.0.1:4150``) for tools
that wait for them. ``trionsq serve``/``trionsq lookupd`` take the same options
(``options``) and start through ``start_nsqd``/``start_lookupd`` here.

Exit codes are nsqd's: 2 for a bad command line (one line on stderr, Go's wording),
1 for a configuration nsqd would refuse, a port that cannot be bound or a data
directory it cannot use (one FATAL log line), 0 after ``-version``, ``-h`` or a clean
SIGINT/SIGTERM shutdown.
"""

from __future__ import annotations

import gc
import logging
import signal
import sys
from typing import TYPE_CHECKING, TypeVar

from . import goflags
from .addresses import join_host_port
from .config import ConfigError, NsqdConfig
from .descriptors import raise_open_file_limit
from .logs import configure_logging
from .lookupd.config import LookupdConfig
from .options import NSQD_FLAGS, NSQLOOKUPD_FLAGS
from .persist import StorageFormatError
from .version import version_string

if TYPE_CHECKING:
    from collections.abc import Awaitable, Callable, Sequence

    from .goflags import FlagSpec
    from .lookupd.server import LookupdAddresses
    from .nursery_tree import BoundAddresses

_Addresses = TypeVar("_Addresses")
_Config = TypeVar("_Config")
_Failure = TypeVar("_Failure", bound=BaseException)

__all__ = [
    "build_lookupd_config",
    "build_nsqd_config",
    "listening_lines",
    "lookupd_listening_lines",
    "main",
    "nsqlookupd_main",
    "start_lookupd",
    "start_nsqd",
]

log = logging.getLogger("trionsq")

GC_THRESHOLDS = (700, 50, 1000)
"""Messages held in memory are millions of small objects; with CPython's default
(700, 10, 10) full collections walk them often enough to cost 10-20 % of consume
throughput and pauses of 50-100 ms (benchmarks/, docs/internals.md)."""


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
        import tomllib  # only a -config file needs it

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

    async def drain(addresses: BoundAddresses) -> None:
        await addresses.broker.drain(config.shutdown_grace)

    await _serve_until_signalled(serve_nsqd, config, listening_lines, before_stop=drain)


async def _serve_until_signalled(
    serve_fn: Callable[[_Config], Awaitable[None]],
    config: _Config,
    listening: Callable[[_Addresses], list[str]],
    *,
    before_stop: Callable[[_Addresses], Awaitable[None]] | None = None,
) -> None:
    """Start ``serve_fn(config)`` (it reports its addresses through ``task_status``),
    log ``listening(addresses)``, and stop it cleanly on SIGINT or SIGTERM: after
    ``before_stop(addresses)`` (the broker's grace), or at once at a second signal."""
    import trio

    with trio.open_signal_receiver(signal.SIGINT, signal.SIGTERM) as signals:
        async with trio.open_nursery() as nursery:
            addresses: _Addresses = await nursery.start(serve_fn, config)
            _resume_garbage_collection()
            for line in listening(addresses):
                log.info("%s", line)

            async def stop_after(prepare: Callable[[_Addresses], Awaitable[None]]) -> None:
                await prepare(addresses)
                nursery.cancel_scope.cancel()

            async for signum in signals:
                log.info("%s: shutting down", signal.Signals(signum).name)
                if before_stop is None:
                    nursery.cancel_scope.cancel()
                    break
                nursery.start_soon(stop_after, before_stop)
                before_stop = None  # a second signal stops at once


def _resume_garbage_collection() -> None:
    """Turn the collector back on if the console script paused it for start-up
    (``launch``), freezing what start-up built so later collections skip it."""
    if not gc.isenabled():
        gc.freeze()
        gc.enable()


def _first(error: BaseException, kind: type[_Failure]) -> _Failure | None:
    """The first ``kind`` exception inside Trio's exception groups."""
    if isinstance(error, kind):
        return error
    if isinstance(error, BaseExceptionGroup):
        for inner in error.exceptions:
            found = _first(inner, kind)
            if found is not None:
                return found
    return None


def _serve_nsqd_process(config: NsqdConfig) -> int:
    """Run a validated configuration in this process until a signal; the exit code."""
    configure_logging(config.log_level, config.log_prefix)
    # a process-wide choice, so made here and not in the embeddable broker
    gc.set_threshold(*GC_THRESHOLDS)
    log.info("%s", version_string("nsqd"))
    log.info("ID: %d", config.node_id)
    return _run_process(run_until_signalled, config)


def _run_process(run: Callable[[_Config], Awaitable[None]], config: _Config) -> int:
    """``trio.run(run, config)`` as the process's life; the exit code (130 for a
    Ctrl-C before the signal handler was in place, 1 with one FATAL line when a
    stored file is refused or a listener cannot be bound)."""
    import trio

    from .broker.health import StorageFault, go_error_text
    from .listen import ListenError

    # as nsqd's Go runtime does; the broker then shares out what it has (descriptors.py)
    unraised = raise_open_file_limit()
    if unraised is not None:
        log.warning("%s", unraised)
    try:
        trio.run(run, config)
    except KeyboardInterrupt:
        return 130
    except BaseException as error:
        refused = _first(error, StorageFormatError)
        if refused is not None:
            log.critical("cannot start: %s", refused)
            return 1
        unbound = _first(error, ListenError)
        if unbound is not None:
            log.critical("cannot listen: %s", unbound.strerror or unbound)
            return 1
        fault = _first(error, StorageFault)
        if fault is not None:
            log.critical("cannot start: %s", fault.reason)
            return 1
        etcd_refused = _first(error, ConfigError)  # raised by a check against etcd
        if etcd_refused is not None:
            log.critical("cannot start: %s", etcd_refused)
            return 1
        failure = _first(error, OSError)
        if failure is None:
            raise
        log.critical("cannot start: %s", go_error_text(failure))
        return 1
    finally:
        _resume_garbage_collection()
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


def start_nsqd(parsed: goflags.ParseResult) -> int:
    """Resolve parsed ``NSQD_FLAGS`` into a configuration and run the broker in this
    process until a signal; the exit code. ``nsqd`` and ``trionsq serve`` both start here."""
    try:
        config = build_nsqd_config(parsed)
    except ConfigError as error:
        return _fatal(str(parsed.values["log-prefix"]), str(error))
    return _serve_nsqd_process(config)


def main(argv: Sequence[str] | None = None) -> int:
    """The ``nsqd`` console script."""
    parsed = _command_line(NSQD_FLAGS, "nsqd", argv)
    return parsed if isinstance(parsed, int) else start_nsqd(parsed)


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


def start_lookupd(parsed: goflags.ParseResult) -> int:
    """Resolve parsed ``NSQLOOKUPD_FLAGS`` and run a lookupd in this process until a
    signal; the exit code. ``nsqlookupd`` and ``trionsq lookupd`` both start here."""
    try:
        config = build_lookupd_config(parsed)
    except ConfigError as error:
        return _fatal(str(parsed.values["log-prefix"]), str(error))
    configure_logging(config.log_level, config.log_prefix)
    log.info("%s", version_string("nsqlookupd"))
    return _run_process(run_lookupd_until_signalled, config)


def nsqlookupd_main(argv: Sequence[str] | None = None) -> int:
    """The ``nsqlookupd`` console script: nsqlookupd's command line and behaviour."""
    parsed = _command_line(NSQLOOKUPD_FLAGS, "nsqlookupd", argv)
    return parsed if isinstance(parsed, int) else start_lookupd(parsed)
