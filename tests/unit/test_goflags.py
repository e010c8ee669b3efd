"""Go's ``flag`` syntax and value parsing, as nsqd's command line uses them."""

from __future__ import annotations

import math

import pytest
from hypothesis import given
from hypothesis import strategies as st

from trionsq.goflags import (
    ConfigValueError,
    FlagError,
    FlagSpec,
    HelpRequested,
    Kind,
    coerce_config_value,
    format_go_duration,
    go_quote,
    parse,
    parse_go_duration,
    parse_go_float,
    parse_go_int,
    resolve,
    usage,
)

SPECS = (
    FlagSpec("name", Kind.STRING, default="anon", help="a name"),
    FlagSpec("on", Kind.BOOL, default=False, help="a switch"),
    FlagSpec("count", Kind.INT, default=1, help="a count"),
    FlagSpec("ratio", Kind.FLOAT, default=0.0, help="a ratio"),
    FlagSpec("wait", Kind.DURATION, default=60.0, help="a wait"),
    FlagSpec("peer", Kind.STRING_LIST, default=(), help="a peer", cfg_key="peers"),
    FlagSpec("pct", Kind.FLOAT_LIST, default=(), help="percentiles"),
    FlagSpec("config", Kind.STRING, default="", help="a file", option=False),
)
VALUED = [spec for spec in SPECS if not spec.bool_flag]


@pytest.mark.parametrize(
    "argv",
    [["-name", "x"], ["--name", "x"], ["-name=x"], ["--name=x"]],
)
def test_one_or_two_dashes_with_or_without_equals(argv: list[str]) -> None:
    result = parse(SPECS, argv)
    assert result.values["name"] == "x"
    assert result.explicit == {"name"}
    assert result.args == ()


def test_defaults_for_flags_not_given() -> None:
    result = parse(SPECS, [])
    assert result.values["count"] == 1
    assert result.values["wait"] == 60.0
    assert result.explicit == frozenset()


def test_booleans_take_a_value_only_after_equals() -> None:
    assert parse(SPECS, ["-on"]).values["on"] is True
    assert parse(SPECS, ["--on=false"]).values["on"] is False
    assert parse(SPECS, ["-on=0"]).values["on"] is False
    result = parse(SPECS, ["-on", "false", "-count", "3"])
    assert result.values["on"] is True
    assert result.values["count"] == 1  # parsing stopped at the positional "false"
    assert result.args == ("false", "-count", "3")


@pytest.mark.parametrize(
    ("argv", "count", "rest"),
    [
        (["-count", "2", "serve", "-count", "3"], 2, ("serve", "-count", "3")),
        (["-count", "2", "-", "-count", "3"], 2, ("-", "-count", "3")),
        (["-count", "2", "--", "-count", "3"], 2, ("-count", "3")),
        (["--", "--"], 1, ("--",)),
    ],
)
def test_parsing_stops_at_the_first_non_flag_or_after_double_dash(
    argv: list[str], count: int, rest: tuple[str, ...]
) -> None:
    result = parse(SPECS, argv)
    assert result.values["count"] == count
    assert result.args == rest


def test_a_value_may_look_like_a_flag() -> None:
    assert parse(SPECS, ["-name", "-count"]).values["name"] == "-count"
    assert parse(SPECS, ["-name="]).values["name"] == ""
    assert parse(SPECS, ["-name=a=b"]).values["name"] == "a=b"


def test_last_wins_and_lists_collect() -> None:
    result = parse(
        SPECS,
        ["-count", "2", "-count=3", "-peer", "a", "--peer=b", "-pct", "0.5,0.9", "-pct=1"],
    )
    assert result.values["count"] == 3
    assert result.values["peer"] == ("a", "b")
    assert result.values["pct"] == (0.5, 0.9, 1.0)


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["-nope"], "flag provided but not defined: -nope"),
        (["--nope=1"], "flag provided but not defined: -nope"),
        (["---count"], "bad flag syntax: ---count"),
        (["-=1"], "bad flag syntax: -=1"),
        (["-count"], "flag needs an argument: -count"),
        (["-count", "abc"], 'invalid value "abc" for flag -count: parse error'),
        (["-count=1.5"], 'invalid value "1.5" for flag -count: parse error'),
        (
            ["-count", "9223372036854775808"],
            'invalid value "9223372036854775808" for flag -count: value out of range',
        ),
        (["-wait", "5"], 'invalid value "5" for flag -wait: parse error'),
        (["-ratio", "x"], 'invalid value "x" for flag -ratio: parse error'),
        (["-pct", "0.5,x"], 'invalid value "0.5,x" for flag -pct: parse error'),
        (["-on=maybe"], 'invalid boolean value "maybe" for -on: parse error'),
        (["-name", "ok", "-count", 'a"\n'], 'invalid value "a\\"\\n" for flag -count: parse error'),
    ],
)
def test_errors_are_gos_lines(argv: list[str], message: str) -> None:
    with pytest.raises(FlagError) as caught:
        parse(SPECS, argv)
    assert str(caught.value) == message


def test_custom_boolean_flag_reports_its_own_error() -> None:
    def level(text: str) -> int:
        if text not in ("true", "false", "half"):
            raise ValueError(f"{text!r} is not true, false or half")
        return {"true": 2, "half": 1}.get(text, 0)

    spec = FlagSpec("tls", Kind.STRING, default=0, help="", parse=level, bool_flag=True)
    assert parse([spec], ["-tls"]).values["tls"] == 2
    assert parse([spec], ["-tls=half"]).values["tls"] == 1
    with pytest.raises(FlagError, match=r"^invalid boolean value \"x\" for -tls: 'x' is not"):
        parse([spec], ["-tls=x"])


@pytest.mark.parametrize("argv", [["-h"], ["-help"], ["--help"], ["-count", "2", "--h"]])
def test_help(argv: list[str]) -> None:
    with pytest.raises(HelpRequested):
        parse(SPECS, argv)


def test_help_is_an_ordinary_flag_when_defined() -> None:
    spec = FlagSpec("h", Kind.BOOL, default=False, help="")
    assert parse([spec], ["-h"]).values["h"] is True


@pytest.mark.parametrize(
    ("text", "value"),
    [
        ("0", 0),
        ("+5", 5),
        ("-9223372036854775808", -(2**63)),
        ("0x1f", 31),
        ("0X1F", 31),
        ("017", 15),
        ("0o17", 15),
        ("0b101", 5),
        ("1_000", 1000),
        ("0x_1f", 31),
        ("0_17", 15),
    ],
)
def test_go_int(text: str, value: int) -> None:
    assert parse_go_int(text) == value


@pytest.mark.parametrize(
    ("text", "error"),
    [
        ("", "parse error"),
        ("08", "parse error"),
        ("0x", "parse error"),
        ("_1", "parse error"),
        ("1__0", "parse error"),
        ("1_", "parse error"),
        (" 1", "parse error"),
        ("\u0661", "parse error"),  # an Arabic-Indic digit one
        ("9223372036854775808", "value out of range"),
        ("-9223372036854775809", "value out of range"),
        ("99999999999999999999999", "value out of range"),
    ],
)
def test_go_int_refuses(text: str, error: str) -> None:
    with pytest.raises(ValueError, match=f"^{error}$"):
        parse_go_int(text)


def test_go_int_base_10_is_strict() -> None:
    assert parse_go_int("-42", base=10) == -42
    for text in ("0x10", "1_000"):
        with pytest.raises(ValueError, match="parse error"):
            parse_go_int(text, base=10)


@pytest.mark.parametrize(
    ("text", "value"),
    [
        ("1", 1.0),
        ("-.5", -0.5),
        ("1e3", 1000.0),
        ("1E-2", 0.01),
        ("5.", 5.0),
        ("1_000.5", 1000.5),
        ("0x1p-2", 0.25),
        ("0x1.8P1", 3.0),
        ("inf", math.inf),
        ("-Infinity", -math.inf),
        ("+INF", math.inf),
    ],
)
def test_go_float(text: str, value: float) -> None:
    assert parse_go_float(text) == value


def test_go_float_nan() -> None:
    assert math.isnan(parse_go_float("NaN"))


@pytest.mark.parametrize(
    ("text", "error"),
    [
        ("", "parse error"),
        (" 1", "parse error"),
        ("1_", "parse error"),
        ("1_e5", "parse error"),
        ("+nan", "parse error"),
        ("0x1", "parse error"),
        ("1e", "parse error"),
        ("infinit", "parse error"),
        ("1e400", "value out of range"),
    ],
)
def test_go_float_refuses(text: str, error: str) -> None:
    with pytest.raises(ValueError, match=f"^{error}$"):
        parse_go_float(text)


@pytest.mark.parametrize(
    ("seconds", "text"),
    [
        (0.0, "0s"),
        (2e-8, "20ns"),
        (1.5e-6, "1.5µs"),
        (0.025, "25ms"),
        (0.25, "250ms"),
        (1.5, "1.5s"),
        (2.0, "2s"),
        (60.0, "1m0s"),
        (900.0, "15m0s"),
        (3600.0, "1h0m0s"),
        (5400.0, "1h30m0s"),
        (3661.5, "1h1m1.5s"),
        (-90.0, "-1m30s"),
    ],
)
def test_go_duration_string(seconds: float, text: str) -> None:
    assert format_go_duration(seconds) == text
    assert parse_go_duration(text) == pytest.approx(seconds)


@pytest.mark.parametrize("text", [" 5s", "5s ", "--5s", "+-5s", "5", "3000000h"])
def test_go_duration_refuses(text: str) -> None:
    with pytest.raises(ValueError, match="time: invalid duration"):
        parse_go_duration(text)


def test_go_quote() -> None:
    assert go_quote('a"b\\c\n\t') == r'"a\"b\\c\n\t"'
    assert go_quote("é\x00") == '"é\\x00"'
    assert go_quote("\udcff") == r'"\xff"'  # a non-UTF-8 byte in sys.argv


def test_usage_has_gos_layout() -> None:
    text = usage(SPECS, "prog")
    assert text.startswith("Usage of prog:\n  -config string\n    \ta file\n")
    assert "  -count int\n    \ta count (default 1)\n" in text
    assert '  -name string\n    \ta name (default "anon")\n' in text
    assert "  -on\n    \ta switch\n" in text
    assert "  -wait duration\n    \ta wait (default 1m0s)\n" in text
    assert "  -peer value\n    \ta peer\n" in text
    assert "  -ratio float\n    \ta ratio\n" in text


def test_resolve_flag_beats_file_beats_default() -> None:
    parsed = parse(SPECS, ["-count", "5"])
    resolved = resolve(SPECS, parsed, {"count": 7, "wait": "2s", "peers": "a,b", "other": 1})
    assert resolved["count"] == 5
    assert resolved["wait"] == 2.0
    assert resolved["peer"] == ("a", "b")
    assert resolved["name"] == "anon"
    assert "config" not in resolved  # a command switch, not an option


@pytest.mark.parametrize(
    ("name", "raw", "value"),
    [
        ("wait", 1500, 1.5),  # an integer duration is milliseconds
        ("wait", "1m", 60.0),
        ("count", "12", 12),
        ("on", "true", True),
        ("on", 1, True),
        ("peer", ["a", "b"], ("a", "b")),
        ("pct", [1, 0.5], (1.0, 0.5)),
        ("pct", "0.99, 0.5", (0.99, 0.5)),
        ("ratio", 2, 2.0),
    ],
)
def test_config_values_are_coerced_like_nsqd(name: str, raw: object, value: object) -> None:
    spec = next(spec for spec in SPECS if spec.name == name)
    assert coerce_config_value(spec, raw) == value


@pytest.mark.parametrize(
    ("name", "raw"),
    [
        ("count", True),
        ("count", 1.5),
        ("count", "0x10"),
        ("wait", 1.5),
        ("wait", "soon"),
        ("name", 3),
        ("peer", [1]),
        ("on", "yes"),
        ("pct", {"a": 1}),
    ],
)
def test_config_values_of_the_wrong_type_are_one_line_errors(name: str, raw: object) -> None:
    spec = next(spec for spec in SPECS if spec.name == name)
    with pytest.raises(ConfigValueError) as caught:
        coerce_config_value(spec, raw)
    assert "\n" not in str(caught.value)
    assert spec.cfg_key in str(caught.value)


_VALUES = {
    Kind.STRING: st.text(),
    Kind.INT: st.integers(-(2**63), 2**63 - 1).map(str),
    Kind.FLOAT: st.floats(allow_nan=False).map(repr),
    Kind.DURATION: st.integers(-(2**40), 2**40).map(lambda ms: f"{ms}ms"),
    Kind.STRING_LIST: st.text(),
    Kind.FLOAT_LIST: st.lists(st.floats(0, 1), min_size=1).map(
        lambda values: ",".join(map(repr, values))
    ),
}


@given(data=st.data())
def test_equals_and_separate_value_parse_the_same(data: st.DataObject) -> None:
    spec = data.draw(st.sampled_from(VALUED))
    value = data.draw(_VALUES[spec.kind])
    results = {
        repr(parse(SPECS, argv).values[spec.name])
        for argv in (
            [f"-{spec.name}={value}"],
            [f"--{spec.name}={value}"],
            [f"-{spec.name}", value],
            [f"--{spec.name}", value],
        )
    }
    assert len(results) == 1


@given(st.integers(-(2**63), 2**63 - 1))
def test_go_int_reads_decimal_hex_and_octal(number: int) -> None:
    sign = "-" if number < 0 else ""
    assert parse_go_int(str(number)) == number
    assert parse_go_int(f"{sign}0x{abs(number):x}") == number
    assert parse_go_int(f"{sign}0{abs(number):o}") == number


@given(st.integers(-(10**15), 10**15))
def test_go_duration_string_round_trips(nanos: int) -> None:
    text = format_go_duration(nanos / 1e9)
    assert round(parse_go_duration(text) * 1e9) == nanos
