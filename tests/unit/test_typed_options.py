"""Typed options (issue 34, item 3): ``NsqdConfig.loopback``, ``LookupdConfig.loopback``
and the ``client`` fixture's ``consumer`` take typed keywords, so mypy catches a
misspelt option (this file is checked by the suite's mypy run, and one test runs mypy
on a snippet with typos); every duration of a configuration takes seconds or a Go
duration string; a bad value is one plain ``ConfigError`` with a one-line message
when the configuration is made."""

from __future__ import annotations

import textwrap
from pathlib import Path
from typing import TYPE_CHECKING, ForwardRef

import pytest
from mypy import api as mypy_api

from trionsq import NsqdConfig
from trionsq.client import ConsumerSettings, ProducerSettings
from trionsq.config import ConfigError, NsqdOptions
from trionsq.goflags import FlagSpec, Kind
from trionsq.lookupd.config import LookupdConfig, LookupdOptions
from trionsq.options import NSQD_FLAGS, NSQLOOKUPD_FLAGS

if TYPE_CHECKING:
    from contextlib import AbstractAsyncContextManager

    from trionsq.client import Consumer
    from trionsq.testing import ClientKit

ROOT = Path(__file__).resolve().parents[2]
TYPOS = textwrap.dedent(
    """
    from trionsq import NsqdConfig
    from trionsq.lookupd.config import LookupdConfig
    from trionsq.testing import ClientKit

    NsqdConfig.loopback(msg_timout="5s")
    NsqdConfig.loopback(max_rdy_count="100")
    LookupdConfig.loopback(inactive_producer_timout=5.0)

    def consume(client: ClientKit) -> None:
        client.consumer("t", "c", max_in_fligt=1)
    """
)


@pytest.mark.parametrize(
    ("config", "options"), [(NsqdConfig, NsqdOptions), (LookupdConfig, LookupdOptions)]
)
def test_the_options_type_lists_every_field_as_the_constructor_takes_it(
    config: type[object], options: type[object]
) -> None:
    taken = {k: v for k, v in config.__init__.__annotations__.items() if k != "return"}
    typed = {
        name: hint.__forward_arg__ if isinstance(hint, ForwardRef) else hint
        for name, hint in options.__annotations__.items()
    }
    assert typed == taken


@pytest.mark.parametrize(
    ("flags", "config"), [(NSQD_FLAGS, NsqdConfig), (NSQLOOKUPD_FLAGS, LookupdConfig)]
)
def test_every_duration_flag_s_field_takes_a_go_duration(
    flags: tuple[FlagSpec, ...], config: type[NsqdConfig | LookupdConfig]
) -> None:
    fields = [spec.dest for spec in flags if spec.kind is Kind.DURATION and spec.option]
    assert fields
    for field in fields:
        made = config(**{field: "1m30s"})  # type: ignore[arg-type]
        assert getattr(made, field) == 90.0, field


def test_durations_take_seconds_or_go_duration_strings() -> None:
    config = NsqdConfig.loopback(msg_timeout="5s", output_buffer_timeout="250ms", retention=30)
    assert (config.msg_timeout, config.output_buffer_timeout, config.retention) == (5.0, 0.25, 30.0)
    assert NsqdConfig(max_req_timeout="72h").max_req_timeout == 72 * 3600.0
    assert LookupdConfig.loopback(tombstone_lifetime="1m30s").tombstone_lifetime == 90.0
    settings = ConsumerSettings(requeue_delay="90s", lookup_interval="1m", max_backoff=2)
    assert (settings.requeue_delay, settings.lookup_interval, settings.max_backoff) == (
        90.0,
        60.0,
        2.0,
    )
    assert ProducerSettings(rate_limit_timeout="500ms").rate_limit_timeout == 0.5


@pytest.mark.parametrize(
    ("changes", "message"),
    [
        (
            {"msg_timeout": "5"},
            "msg_timeout: '5' is not a duration: use a duration such as 5s or 250ms,"
            " or a number of seconds",
        ),
        (
            {"sync_timeout": True},
            "sync_timeout: True is not a duration: use seconds or a string such as 5s",
        ),
        ({"max_rdy_count": "100"}, "max_rdy_count: '100' is not an int"),
        ({"snappy": "no"}, "snappy: 'no' is not a bool"),
        (
            {"tcp_address": ("127.0.0.1", "0")},
            "tcp_address: ('127.0.0.1', '0') is not (host, port) with a port in [0,65535]",
        ),
    ],
)
def test_a_bad_option_is_one_plain_config_error_when_the_configuration_is_made(
    changes: dict[str, object], message: str
) -> None:
    with pytest.raises(ConfigError) as raised:
        NsqdConfig.loopback(**changes)  # type: ignore[arg-type]
    assert str(raised.value) == message
    assert "\n" not in message


def test_mypy_catches_a_misspelt_option(tmp_path: Path) -> None:
    snippet = tmp_path / "typos.py"
    snippet.write_text(TYPOS)
    out, _, status = mypy_api.run(
        ["--config-file", str(ROOT / "pyproject.toml"), "--no-error-summary", str(snippet)]
    )
    errors = [line.split(": error: ", 1)[1] for line in out.splitlines() if ": error: " in line]
    assert status == 1
    expected = [  # each followed by mypy's "did you mean ...", or by the error code
        'Unexpected keyword argument "msg_timout" for "loopback" of "NsqdConfig"',
        'Argument "max_rdy_count" to "loopback" of "NsqdConfig" has incompatible type "str";'
        ' expected "int"',
        'Unexpected keyword argument "inactive_producer_timout" for "loopback" of "LookupdConfig"',
        'Unexpected keyword argument "max_in_fligt" for "consumer" of "ClientKit"',
    ]
    assert len(errors) == len(expected), out
    for start in expected:
        assert any(error.startswith(start) for error in errors), (start, out)


def typed_consumer(client: ClientKit) -> AbstractAsyncContextManager[Consumer]:
    """What the suite's mypy run checks: the options a user writes, spelt right."""
    return client.consumer(
        "t", "c", max_in_flight=10, settings=ConsumerSettings(group_member="a", requeue_delay="5s")
    )
