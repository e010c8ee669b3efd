"""``trionsq serve``/``trionsq lookupd`` offer every option of ``nsqd``/``nsqlookupd``
and resolve a command line to the same configuration."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path
from typing import TYPE_CHECKING

import click
import pytest

from trionsq import goflags
from trionsq.cli import go_arguments, main
from trionsq.config import NsqdConfig, TlsRequired
from trionsq.nsqd_command import build_lookupd_config, build_nsqd_config
from trionsq.options import NSQD_FLAGS, NSQLOOKUPD_FLAGS

if TYPE_CHECKING:
    from trionsq.lookupd.config import LookupdConfig

BIN = Path(sys.executable).parent


def serve_config(args: list[str]) -> NsqdConfig:
    """The configuration ``trionsq serve ARGS`` would start with."""
    command = main.commands["serve"]
    context = command.make_context("serve", list(args))
    options = [spec for spec in NSQD_FLAGS if spec.name != "version"]
    return build_nsqd_config(goflags.parse(NSQD_FLAGS, go_arguments(options, context.params)))


def lookupd_config(args: list[str]) -> LookupdConfig:
    command = main.commands["lookupd"]
    context = command.make_context("lookupd", list(args))
    options = [spec for spec in NSQLOOKUPD_FLAGS if spec.name != "version"]
    return build_lookupd_config(
        goflags.parse(NSQLOOKUPD_FLAGS, go_arguments(options, context.params))
    )


def help_options(*argv: str | Path) -> set[str]:
    """The option names a command's help lists (Go's usage or click's)."""
    result = subprocess.run(argv, capture_output=True, text=True, check=False)  # noqa: S603
    return set(re.findall(r"^\s+--?([a-z][a-z0-9-]*)", result.stdout + result.stderr, re.MULTILINE))


def test_every_nsqd_option_is_in_both_commands_help() -> None:
    nsqd = help_options(BIN / "nsqd", "-h")
    serve = help_options(BIN / "trionsq", "serve", "--help")
    expected = {spec.name for spec in NSQD_FLAGS}
    assert expected <= nsqd
    assert expected - {"version"} <= serve
    for documented in ("auth-http-address", "snappy", "tls-client-auth-policy", "statsd-address"):
        assert documented in serve


def test_every_nsqlookupd_option_is_in_both_commands_help() -> None:
    nsqlookupd = help_options(BIN / "nsqlookupd", "-h")
    lookupd = help_options(BIN / "trionsq", "lookupd", "--help")
    expected = {spec.name for spec in NSQLOOKUPD_FLAGS}
    assert expected <= nsqlookupd
    assert expected - {"version"} <= lookupd


NSQD_LINES = [
    [],
    ["--snappy=false", "--deflate=false", "--max-deflate-level=3"],
    ["--auth-http-address=127.0.0.1:4181", "--auth-http-address", "http://auth.test/"],
    ["--tls-cert=c.pem", "--tls-key=k.pem", "--tls-client-auth-policy=require-verify"],
    ["--tls-cert=c.pem", "--tls-key=k.pem", "--tls-required=tcp-https"],
    ["--statsd-address=127.0.0.1:8125", "--statsd-prefix=p.%s", "--statsd-mem-stats=false"],
    ["--e2e-processing-latency-percentile=0.99,0.5", "--e2e-processing-latency-window-time=5m"],
    ["--msg-timeout=30s", "--max-req-timeout", "2h", "--sync-every=10", "--node-id=9"],
    ["--in-memory", "--retention=1h", "--trace-log", "--lookupd-tcp-address=127.0.0.1:4160"],
]


@pytest.mark.parametrize("args", NSQD_LINES)
def test_serve_resolves_like_nsqd(args: list[str]) -> None:
    assert serve_config(args) == build_nsqd_config(goflags.parse(NSQD_FLAGS, args))


def test_serve_values_mean_what_they_mean_to_nsqd() -> None:
    config = serve_config(
        ["--snappy=false", "--tls-cert=c", "--tls-key=k", "--tls-required", "--in-memory"]
    )
    assert (config.snappy, config.deflate, config.persist) == (False, True, False)
    assert config.tls_required is TlsRequired.YES
    assert serve_config(["--snappy"]).snappy is True


def test_serve_reads_nsqds_config_file(tmp_path: Path) -> None:
    path = tmp_path / "nsqd.cfg"
    path.write_text('snappy = false\nmsg_timeout = "20s"\nid = 5\n')
    config = serve_config([f"--config={path}", "--node-id=6"])
    assert (config.snappy, config.msg_timeout, config.node_id) == (False, 20.0, 6)


def test_serve_refuses_a_bad_value_with_go_s_line() -> None:
    with pytest.raises(click.UsageError, match=r'invalid value "soon" for flag -msg-timeout'):
        main.commands["serve"].callback(msg_timeout="soon")  # type: ignore[misc]


@pytest.mark.parametrize(
    ("command", "given", "line"),
    [
        (
            "serve",
            {"msg_timeout": "5"},
            'invalid value "5" for flag -msg-timeout: parse error; use a duration such as 5s',
        ),
        (
            "serve",
            {"sync_timeout": "soon"},
            'invalid value "soon" for flag -sync-timeout: parse error; use a duration such as 5s',
        ),
        (
            "lookupd",
            {"inactive_producer_timeout": "300"},
            'invalid value "300" for flag -inactive-producer-timeout: parse error;'
            " use a duration such as 300s",
        ),
    ],
)
def test_a_duration_without_a_unit_gets_a_hint(
    command: str, given: dict[str, str], line: str
) -> None:
    """nsqd's own line stays (scripts may match it), with what to write instead
    (issue 34): a bare number is the natural spelling for a user of other tools."""
    with pytest.raises(click.UsageError) as raised:
        main.commands[command].callback(**given)  # type: ignore[misc]
    assert raised.value.message == line


def test_the_drop_in_nsqd_keeps_go_s_line_alone() -> None:
    with pytest.raises(goflags.FlagError) as raised:
        goflags.parse(NSQD_FLAGS, ["-msg-timeout", "5"])
    assert str(raised.value) == 'invalid value "5" for flag -msg-timeout: parse error'


def test_lookupd_resolves_like_nsqlookupd() -> None:
    args = ["--tcp-address=127.0.0.1:0", "--inactive-producer-timeout=5m", "--log-level=debug"]
    assert lookupd_config(args) == build_lookupd_config(goflags.parse(NSQLOOKUPD_FLAGS, args))
