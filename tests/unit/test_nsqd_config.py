"""nsqd's options: flags over the ``-config`` TOML file over defaults, and nsqd's
startup checks."""

from __future__ import annotations

import re
from typing import TYPE_CHECKING

import attrs
import pytest

from trionsq import goflags
from trionsq.config import ConfigError, NsqdConfig, TlsRequired, default_node_id, split_host_port
from trionsq.nsqd_command import build_nsqd_config, main, nsqlookupd_main
from trionsq.options import NSQD_FLAGS, NSQLOOKUPD_FLAGS
from trionsq.version import version_string

if TYPE_CHECKING:
    from pathlib import Path


ALL_INTERFACES = "0.0.0.0"  # noqa: S104 - nsqd's default listen address


def config_from(argv: list[str]) -> NsqdConfig:
    return build_nsqd_config(goflags.parse(NSQD_FLAGS, argv))


def write_toml(tmp_path: Path, text: str) -> str:
    path = tmp_path / "nsqd.cfg"
    path.write_text(text)
    return str(path)


def test_defaults_are_nsqds() -> None:
    config = config_from([])
    assert config == NsqdConfig()
    assert config.tcp_address == "0.0.0.0:4150"
    assert config.http_address == "0.0.0.0:4151"
    assert config.https_address == "0.0.0.0:4152"
    assert config.https_host_port == (ALL_INTERFACES, 4152)
    assert config.max_bytes_per_file == 100 * 1024 * 1024
    assert config.statsd_prefix == "nsq.%s"
    assert config.e2e_processing_latency_window_time == 600.0
    assert config.tls_required is TlsRequired.NO
    assert (config.deflate, config.max_deflate_level, config.snappy) == (True, 6, True)


def test_every_flag_has_a_field_and_every_field_but_nsqds_unflagged_ones_a_flag() -> None:
    fields = {field.name for field in attrs.fields(NsqdConfig)}
    dests = {spec.dest for spec in NSQD_FLAGS if spec.option}
    assert dests <= fields
    assert fields - dests == {
        "client_timeout",
        "queue_scan_interval",
        "queue_scan_refresh_interval",
        "queue_scan_dirty_percent",
    }
    switches = {spec.name for spec in NSQD_FLAGS if not spec.option}
    assert switches == {"version", "config", "verbose", "worker-id"}


def test_node_id_default_is_stable_and_in_range() -> None:
    assert default_node_id() == default_node_id()
    assert 0 <= default_node_id() < 1024


def test_config_file_with_nsqds_keys(tmp_path: Path) -> None:
    path = write_toml(
        tmp_path,
        """
        id = 7
        tcp_address = "127.0.0.1:4250"
        nsqlookupd_tcp_addresses = ["a:4160", "b:4160"]
        auth_http_addresses = "auth1:4181,auth2:4181"
        e2e_processing_latency_percentiles = [0.99, 1.0]
        msg_timeout = "30s"
        sync_timeout = 1500
        tls_required = "tcp-https"
        tls_cert = "c.pem"
        tls_key = "k.pem"
        log_level = "DEBUG"
        deflate = false
        enable_experiment = ["topology-aware-consumption"]
        some_key_nsqd_does_not_know = 1
        """,
    )
    config = config_from(["-config", path])
    assert config.node_id == 7
    assert config.tcp_address == "127.0.0.1:4250"
    assert config.lookupd_tcp_addresses == ("a:4160", "b:4160")
    assert config.auth_http_addresses == ("auth1:4181", "auth2:4181")
    assert config.e2e_processing_latency_percentiles == (0.99, 1.0)
    assert config.msg_timeout == 30.0
    assert config.sync_timeout == 1.5  # an integer duration in a config file is milliseconds
    assert config.tls_required is TlsRequired.EXCEPT_HTTP
    assert config.log_level == "debug"
    assert config.deflate is False
    assert config.enable_experiment == ("topology-aware-consumption",)


def test_flags_beat_the_file_whatever_their_order(tmp_path: Path) -> None:
    path = write_toml(
        tmp_path,
        'msg_timeout = "30s"\nnsqlookupd_tcp_addresses = ["a:4160"]\nmax_rdy_count = 10\n',
    )
    config = config_from(
        [
            "-msg-timeout",
            "10s",
            "--config",
            path,
            "-lookupd-tcp-address=b:4160",
            "-max-rdy-count=0x20",
        ]
    )
    assert config.msg_timeout == 10.0
    assert config.lookupd_tcp_addresses == ("b:4160",)
    assert config.max_rdy_count == 32


def test_repeatable_flags_and_sorted_percentiles() -> None:
    config = config_from(
        [
            "-lookupd-tcp-address",
            "a:4160",
            "--lookupd-tcp-address=b:4160",
            "-e2e-processing-latency-percentile",
            "0.5,0.99",
            "-e2e-processing-latency-percentile=1",
        ]
    )
    assert config.lookupd_tcp_addresses == ("a:4160", "b:4160")
    assert config.e2e_processing_latency_percentiles == (1.0, 0.99, 0.5)


@pytest.mark.parametrize(
    ("argv", "required"),
    [
        (["-tls-required"], TlsRequired.YES),
        (["-tls-required=true"], TlsRequired.YES),
        (["-tls-required=TCP-HTTPS"], TlsRequired.EXCEPT_HTTP),
        (["-tls-required=false"], TlsRequired.NO),
    ],
)
def test_tls_required_is_a_boolean_flag_with_a_third_value(
    argv: list[str], required: TlsRequired
) -> None:
    config = config_from([*argv, "-tls-cert", "c.pem", "-tls-key", "k.pem"])
    assert config.tls_required is required


def test_client_auth_policy_implies_tls_required() -> None:
    config = config_from(["-tls-client-auth-policy=require", "-tls-cert=c", "-tls-key=k"])
    assert config.tls_required is TlsRequired.NO
    assert config.effective_tls_required is TlsRequired.YES


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["-max-deflate-level", "0"], "--max-deflate-level must be in [1,9], got 0"),
        (["-max-deflate-level=10"], "--max-deflate-level must be in [1,9], got 10"),
        (["-node-id", "1024"], "--node-id must be in [0,1024), got 1024"),
        (["-node-id=-1"], "--node-id must be in [0,1024), got -1"),
        (["-tls-required"], "--tls-required needs TLS, but --tls-cert and --tls-key are not set"),
        (
            ["-tls-client-auth-policy", "require-verify"],
            "--tls-client-auth-policy needs TLS, but --tls-cert and --tls-key are not set",
        ),
        (
            ["-tls-client-auth-policy=maybe", "-tls-cert=c", "-tls-key=k"],
            "--tls-client-auth-policy",
        ),
        (["-tls-cert", "c.pem"], "--tls-cert and --tls-key must be given together"),
        (["-auth-http-request-method", "put"], "--auth-http-request-method must be get or post"),
        (["-e2e-processing-latency-percentile", "1.5"], "in (0,1], got 1.5"),
        (["-e2e-processing-latency-percentile", "0"], "in (0,1], got 0.0"),
        (["-tcp-address", "localhost"], "--tcp-address must be <addr>:<port>"),
        (["-http-address", "127.0.0.1:70000"], "--http-address must be <addr>:<port>"),
        (["-max-open-files", "-1"], "--max-open-files must be 0 or more, got -1"),
        (
            ["-tubemq-master-address", "127.0.0.1"],
            "--tubemq-master-address and --tubemq-broker-address must be given together",
        ),
        (
            ["-tubemq-master-address", "h:99999", "-tubemq-broker-address", "h"],
            "--tubemq-master-address must be <addr>[:<port>]",
        ),
    ],
)
def test_startup_validation(argv: list[str], message: str) -> None:
    with pytest.raises(ConfigError) as caught:
        config_from(argv)
    assert message in str(caught.value)
    assert "\n" not in str(caught.value)


def test_tubemq_listeners_take_tubemqs_default_ports() -> None:
    off = config_from([])
    assert not off.tubemq_enabled
    on = config_from(["-tubemq-master-address", "10.0.0.1", "-tubemq-broker-address", "[::1]"])
    assert on.tubemq_enabled
    assert on.tubemq_master_host_port == ("10.0.0.1", 8715)
    assert on.tubemq_broker_host_port == ("::1", 8123)
    ports = config_from(["-tubemq-master-address=:0", "-tubemq-broker-address=h:9"])
    assert (ports.tubemq_master_host_port, ports.tubemq_broker_host_port) == (
        ("0.0.0.0", 0),  # noqa: S104 - what an empty host means
        ("h", 9),
    )


def test_http_may_be_disabled() -> None:
    assert config_from(["-http-address="]).http_address == ""


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("msg_timeout = ", "cannot load config file"),
        ('max_rdy_count = "many"', "config key max_rdy_count = 'many'"),
        ("msg_timeout = 1.5", "config key msg_timeout = 1.5"),
        ('tls_min_version = "tls9"', "config key tls_min_version = 'tls9'"),
        ('log_level = "loud"', "config key log_level = 'loud'"),
    ],
)
def test_bad_config_files_are_one_line_errors(tmp_path: Path, text: str, message: str) -> None:
    path = write_toml(tmp_path, text)
    with pytest.raises(ConfigError) as caught:
        config_from(["-config", path])
    assert message in str(caught.value)
    assert "\n" not in str(caught.value)


def test_bad_tls_required_in_the_file_counts_even_when_the_flag_is_given(tmp_path: Path) -> None:
    path = write_toml(tmp_path, 'tls_required = "sometimes"')
    with pytest.raises(ConfigError, match="tls_required"):
        config_from(["-config", path, "-tls-required=false"])


def test_missing_config_file(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match=r"cannot load config file .*: No such file"):
        config_from(["-config", str(tmp_path / "absent.toml")])


def test_split_host_port_and_loopback() -> None:
    assert split_host_port("[::1]:4150") == ("::1", 4150)
    assert split_host_port(":4150") == (ALL_INTERFACES, 4150)
    with pytest.raises(ValueError, match="not <addr>:<port>"):
        split_host_port("4150")
    local = NsqdConfig.loopback(mem_queue_size=5)
    assert local.tcp_host_port == local.http_host_port == ("127.0.0.1", 0)
    assert local.mem_queue_size == 5


def test_identify_offers_what_the_flags_allow() -> None:
    settings = config_from(
        ["-deflate=true", "-snappy", "-tls-cert=c", "-tls-key=k", "-max-deflate-level=4"]
    ).server_settings("v")
    assert (settings.deflate, settings.snappy, settings.tls_available) == (True, True, True)
    assert (settings.max_deflate_level, settings.tls_required) == (4, False)
    settings = config_from(
        ["-deflate=false", "-snappy=false", "-tls-cert=c", "-tls-key=k", "-tls-required=tcp-https"]
    ).server_settings("v")
    assert (settings.deflate, settings.snappy, settings.tls_required) == (False, False, True)
    assert not config_from([]).server_settings("v").tls_available


def test_version_and_flag_errors_in_process(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["--version"]) == 0
    assert capsys.readouterr().out == version_string("nsqd") + "\n"
    assert re.fullmatch(r"nsqd v1\.3\.0 \(built w/trionsq-\d+\.\d+\.\d+\)", version_string("nsqd"))
    assert main(["-version=false", "-bogus"]) == 2
    assert capsys.readouterr().err == "flag provided but not defined: -bogus\n"
    assert main(["-h"]) == 0
    help_text = capsys.readouterr().err
    assert help_text.startswith("Usage of nsqd:\n")
    assert "  -tcp-address string\n    \t" in help_text
    assert nsqlookupd_main(["-version"]) == 0
    assert capsys.readouterr().out.startswith("nsqlookupd v")
    assert nsqlookupd_main(["-tcp-address"]) == 2
    assert capsys.readouterr().err == "flag needs an argument: -tcp-address\n"


def test_nsqlookupd_accepts_its_flags() -> None:
    parsed = goflags.parse(
        NSQLOOKUPD_FLAGS,
        ["-tcp-address=:4160", "-inactive-producer-timeout", "5m", "-tombstone-lifetime=45s"],
    )
    assert parsed.values["inactive-producer-timeout"] == 300.0
    assert parsed.values["http-address"] == "0.0.0.0:4161"


def test_the_package_version_is_the_installed_distributions() -> None:
    """``__version__`` (what the commands report) and pyproject's version move together."""
    import importlib.metadata

    from trionsq import __version__

    assert importlib.metadata.version("trionsq") == __version__
