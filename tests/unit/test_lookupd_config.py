"""LookupdConfig, the nsqlookupd command line that builds it, and the lookupd task tree."""

from __future__ import annotations

import socket
from typing import TYPE_CHECKING

import pytest

from trionsq import goflags
from trionsq.config import ConfigError
from trionsq.lookupd.config import LookupdConfig
from trionsq.lookupd.server import TREE
from trionsq.nsqd_command import build_lookupd_config
from trionsq.options import NSQLOOKUPD_FLAGS

if TYPE_CHECKING:
    from pathlib import Path

    from trionsq.lookupd.config import LookupdOptions


def test_defaults_are_nsqlookupds() -> None:
    config = LookupdConfig()
    assert (config.tcp_address, config.http_address) == ("0.0.0.0:4160", "0.0.0.0:4161")
    assert config.broadcast_address == socket.gethostname()
    assert (config.inactive_producer_timeout, config.tombstone_lifetime) == (300.0, 45.0)
    assert (config.log_level, config.log_prefix) == ("info", "[nsqlookupd] ")
    loopback = LookupdConfig.loopback()
    assert (loopback.tcp_host_port, loopback.http_host_port) == (("127.0.0.1", 0), ("127.0.0.1", 0))


@pytest.mark.parametrize(
    ("changes", "message"),
    [
        ({"tcp_address": "nope"}, "--tcp-address must be <addr>:<port>"),
        ({"http_address": "h:99999"}, "--http-address must be <addr>:<port>"),
        ({"log_level": "loud"}, "--log-level must be one of"),
        ({"tombstone_lifetime": -1.0}, "--tombstone-lifetime must not be negative"),
    ],
)
def test_validate_refuses_in_one_line(changes: LookupdOptions, message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        LookupdConfig.loopback(**changes).validate()


def test_flags_beat_the_config_file_which_beats_defaults(tmp_path: Path) -> None:
    path = tmp_path / "lookupd.cfg"
    path.write_text(
        'tombstone_lifetime = "10s"\ntcp_address = "127.0.0.1:1"\nlog_level = "debug"\n'
    )
    parsed = goflags.parse(
        NSQLOOKUPD_FLAGS,
        ["-config", str(path), "-tcp-address=127.0.0.1:2", "-inactive-producer-timeout", "1m"],
    )
    config = build_lookupd_config(parsed)
    assert config.tcp_address == "127.0.0.1:2"
    assert config.tombstone_lifetime == 10.0
    assert config.inactive_producer_timeout == 60.0
    assert config.log_level == "debug"
    assert config.http_address == "0.0.0.0:4161"


def test_the_lookupd_tree_has_one_root_and_every_parent_named() -> None:
    names = [name for name, _ in TREE]
    assert len(names) == len(set(names))
    assert [name for name, parent in TREE if parent is None] == ["serve_lookupd"]
    for name, parent in TREE:
        assert parent is None or parent in names, f"{name} has unknown parent {parent}"
