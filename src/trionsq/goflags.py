"""Command lines in the syntax of Go's ``flag`` package, which nsqd and nsqlookupd use.

Scripts written for nsqd pass ``-flag value``, ``-flag=value``, ``--flag value`` and
bare booleans, and parse its error lines; a POSIX-style parser (argparse, click) reads
some of those differently (``-tls-required`` next to a value, ``-deflate false``), so
this module follows Go's rules to the letter:

- one or two dashes are the same; ``-f=v`` or ``-f v``; a boolean flag takes a value
  only as ``-f=v`` (``-f false`` leaves ``false`` as the first positional argument);
- parsing stops before the first non-flag argument (``-`` is one) or after ``--``;
- ``-h`` / ``-help`` ask for usage unless a flag has that name;
- a flag given twice: the last wins, except list flags, which collect every value;
- error lines are Go's: ``flag provided but not defined: -NAME``,
  ``invalid value "X" for flag -NAME: parse error``, ...

``resolve`` then merges a config file the way nsqd's option resolver does: a flag set
on the command line beats the file, which beats the default. Pure code: no I/O.
"""

from __future__ import annotations

import enum
import math
import re
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Final

import attrs

from .durations import go_duration_string, parse_duration

if TYPE_CHECKING:
    from collections.abc import Iterable, Sequence

__all__ = [
    "ConfigValueError",
    "FlagError",
    "FlagSpec",
    "FlagValue",
    "HelpRequested",
    "Kind",
    "ParseResult",
    "coerce_config_value",
    "format_go_duration",
    "go_quote",
    "parse",
    "parse_go_bool",
    "parse_go_duration",
    "parse_go_float",
    "parse_go_int",
    "resolve",
    "usage",
]

FlagValue = str | bool | int | float | tuple[str, ...] | tuple[float, ...]

PARSE_ERROR: Final = "parse error"
RANGE_ERROR: Final = "value out of range"
_INT64_MAX: Final = 2**63 - 1
_UINT64_MAX: Final = 2**64 - 1
_TRUE: Final = frozenset({"1", "t", "T", "TRUE", "true", "True"})
_FALSE: Final = frozenset({"0", "f", "F", "FALSE", "false", "False"})


class FlagError(ValueError):
    """The command line is wrong; the message is the line Go prints (then exit 2).
    ``kind`` and ``value``: the flag's type and the text it refused, for a bad value."""

    def __init__(self, message: str, *, kind: Kind | None = None, value: str = "") -> None:
        super().__init__(message)
        self.kind = kind
        self.value = value


class HelpRequested(Exception):
    """``-h`` or ``-help`` (not defined as flags): print ``usage`` and exit 0."""


class ConfigValueError(ValueError):
    """A config-file value does not fit its option; the message is one line."""


class Kind(enum.Enum):
    """The value types nsqd's flags use."""

    STRING = "string"
    BOOL = "bool"
    INT = "int"
    """A Go int64: base prefixes (``0x``, ``0o``, ``0b``, leading ``0``) and ``_`` allowed."""
    FLOAT = "float"
    DURATION = "duration"
    """Go ``time.ParseDuration`` syntax; the value is seconds."""
    STRING_LIST = "string-list"
    """Repeatable; each occurrence appends one string."""
    FLOAT_LIST = "float-list"
    """Repeatable; each occurrence appends its comma-separated floats."""


_LIST_KINDS: Final = frozenset({Kind.STRING_LIST, Kind.FLOAT_LIST})


def _underscored(spec: FlagSpec) -> str:
    return spec.name.replace("-", "_")


def _default_text(spec: FlagSpec) -> str | None:
    """What Go's usage shows as ``(default ...)``: nothing when it is the zero value."""
    value = spec.default
    if spec.parse is not None or isinstance(value, tuple) or not value:
        return None
    if spec.kind is Kind.BOOL:
        return "true"
    if isinstance(value, str):
        return go_quote(value)
    if spec.kind is Kind.DURATION:
        return format_go_duration(value)
    return str(value)


@attrs.frozen
class FlagSpec:
    """One flag: its name, type, default and help, and where its value goes."""

    name: str
    kind: Kind
    default: FlagValue
    help: str
    dest: str = attrs.field(default=attrs.Factory(_underscored, takes_self=True))
    """The option (config field) the value sets."""
    cfg_key: str = attrs.field(default=attrs.Factory(_underscored, takes_self=True))
    """The config-file key; by default the name with ``_``."""
    option: bool = True
    """False for command switches (``-version``, ``-config``) that ``resolve`` skips."""
    parse: Callable[[str], FlagValue] | None = None
    """A custom converter for a scalar flag (Go's ``flag.Var``): raise ``ValueError``
    whose text ends Go's error line."""
    bool_flag: bool = attrs.field(
        default=attrs.Factory(lambda spec: spec.kind is Kind.BOOL, takes_self=True)
    )
    """Go's ``IsBoolFlag``: a bare ``-name`` means ``-name=true``."""
    default_text: str | None = attrs.field(default=attrs.Factory(_default_text, takes_self=True))
    """Shown in usage as ``(default ...)``; None hides it."""

    @property
    def type_name(self) -> str:
        """The word Go's usage prints after the flag name."""
        if self.bool_flag:
            return ""
        if self.parse is not None or self.kind in _LIST_KINDS:
            return "value"
        return self.kind.value


@attrs.frozen
class ParseResult:
    """Every flag's value (defaults included), which were set, and what was left over."""

    values: Mapping[str, FlagValue]
    """By flag name."""
    explicit: frozenset[str]
    """Names of the flags given on the command line: they beat a config file."""
    args: tuple[str, ...]
    """Arguments after the flags (Go's ``flag.Args()``)."""


def parse(specs: Iterable[FlagSpec], argv: Sequence[str]) -> ParseResult:
    """Parse ``argv`` (without the program name) as Go's ``FlagSet.Parse`` does.

    Raises:
        FlagError: Go's error line for the first bad argument.
        HelpRequested: ``-h``/``-help`` when no such flag is defined.
    """
    formal = {spec.name: spec for spec in specs}
    values: dict[str, FlagValue] = {name: spec.default for name, spec in formal.items()}
    explicit: set[str] = set()
    position = 0
    while position < len(argv):
        arg = argv[position]
        if len(arg) < 2 or arg[0] != "-":
            break
        dashes = 2 if arg[1] == "-" else 1
        if arg == "--":
            position += 1
            break
        name = arg[dashes:]
        if not name or name[0] in "-=":
            raise FlagError(f"bad flag syntax: {arg}")
        position += 1
        name, equals, value = name.partition("=")
        has_value = bool(equals)
        spec = formal.get(name)
        if spec is None:
            if name in ("help", "h"):
                raise HelpRequested
            raise FlagError(f"flag provided but not defined: -{name}")
        if spec.bool_flag:
            try:
                values[name] = _set(spec, values[name], value if has_value else "true")
            except ValueError as error:
                if has_value:
                    raise FlagError(
                        f"invalid boolean value {go_quote(value)} for -{name}: {error}"
                    ) from None
                raise FlagError(f"invalid boolean flag {name}: {error}") from None
        else:
            if not has_value and position < len(argv):
                value, has_value = argv[position], True
                position += 1
            if not has_value:
                raise FlagError(f"flag needs an argument: -{name}")
            try:
                values[name] = _set(spec, values[name], value)
            except ValueError as error:
                raise FlagError(
                    f"invalid value {go_quote(value)} for flag -{name}: {error}",
                    kind=spec.kind,
                    value=value,
                ) from None
        explicit.add(name)
    return ParseResult(values=values, explicit=frozenset(explicit), args=tuple(argv[position:]))


def _set(spec: FlagSpec, current: FlagValue, text: str) -> FlagValue:
    """One occurrence of a flag (Go's ``Value.Set``); ``ValueError`` on a bad value."""
    if spec.parse is not None:
        return spec.parse(text)
    match spec.kind:
        case Kind.STRING:
            return text
        case Kind.BOOL:
            return parse_go_bool(text)
        case Kind.INT:
            return parse_go_int(text)
        case Kind.FLOAT:
            return parse_go_float(text)
        case Kind.DURATION:
            try:
                return parse_go_duration(text)
            except ValueError:
                raise ValueError(PARSE_ERROR) from None
        case Kind.STRING_LIST:
            return (*_strings(current), text)
        case Kind.FLOAT_LIST:
            return (*_floats(current), *(parse_go_float(part) for part in text.split(",")))


def _strings(value: FlagValue) -> tuple[str, ...]:
    if not isinstance(value, tuple):
        raise TypeError(f"a list flag holds a tuple, not {value!r}")
    return tuple(str(item) for item in value)


def _floats(value: FlagValue) -> tuple[float, ...]:
    if not isinstance(value, tuple):
        raise TypeError(f"a list flag holds a tuple, not {value!r}")
    return tuple(float(item) for item in value)


# -- config files ------------------------------------------------------------------


def resolve(
    specs: Iterable[FlagSpec], parsed: ParseResult, config: Mapping[str, object]
) -> dict[str, FlagValue]:
    """Each option's value by ``dest``: the command line, else the config file, else
    the default. Keys of ``config`` that are no option's ``cfg_key`` are ignored.

    A custom-typed option (``spec.parse``) in the file is checked even when the
    command line overrides it, as nsqd checks those before resolving.

    Raises:
        ConfigValueError: a config value of the wrong type or syntax.
    """
    resolved: dict[str, FlagValue] = {}
    for spec in specs:
        if not spec.option:
            continue
        in_file = spec.cfg_key in config
        if in_file and spec.parse is not None:
            coerce_config_value(spec, config[spec.cfg_key])
        if spec.name in parsed.explicit:
            resolved[spec.dest] = parsed.values[spec.name]
        elif in_file:
            resolved[spec.dest] = coerce_config_value(spec, config[spec.cfg_key])
        elif (
            spec.dest not in resolved
        ):  # an alias (a second flag of one option) keeps the first's value
            resolved[spec.dest] = spec.default
    return resolved


def coerce_config_value(spec: FlagSpec, raw: object) -> FlagValue:
    """A decoded config-file value as the option's type, with nsqd's conversions:
    a duration may be a string (``"2s"``) or an integer of milliseconds, a list may be
    a comma-separated string, a number may be a decimal string.

    Raises:
        ConfigValueError: one line naming the key.
    """
    try:
        return _coerce(spec, raw)
    except (ValueError, TypeError) as error:
        raise ConfigValueError(f"config key {spec.cfg_key} = {raw!r}: {error}") from None


def _coerce(spec: FlagSpec, raw: object) -> FlagValue:
    if spec.parse is not None:
        text = ("true" if raw else "false") if isinstance(raw, bool) else str(raw)
        return spec.parse(text)
    match spec.kind:
        case Kind.STRING:
            if isinstance(raw, str):
                return raw
            raise TypeError("expected a string")
        case Kind.BOOL:
            if isinstance(raw, bool):
                return raw
            if isinstance(raw, str):
                return parse_go_bool(raw)
            if isinstance(raw, int):
                return raw != 0
            raise TypeError("expected a boolean")
        case Kind.INT:
            if isinstance(raw, bool):
                raise TypeError("expected an integer")
            if isinstance(raw, int):
                if not -(2**63) <= raw <= _INT64_MAX:
                    raise ValueError(RANGE_ERROR)
                return raw
            if isinstance(raw, str):
                return parse_go_int(raw, base=10)
            raise TypeError("expected an integer")
        case Kind.FLOAT:
            return _coerce_float(raw)
        case Kind.DURATION:
            if isinstance(raw, bool):
                raise TypeError("expected a duration")
            if isinstance(raw, int):
                return raw / 1000
            if isinstance(raw, str):
                return parse_go_duration(raw)
            raise TypeError('expected a duration ("2s") or milliseconds')
        case Kind.STRING_LIST:
            if isinstance(raw, str):
                return tuple(raw.split(","))
            if isinstance(raw, list) and all(isinstance(item, str) for item in raw):
                return tuple(str(item) for item in raw)
            raise TypeError("expected a list of strings")
        case Kind.FLOAT_LIST:
            if isinstance(raw, str):
                return tuple(parse_go_float(part.strip()) for part in raw.split(","))
            if isinstance(raw, list):
                return tuple(_coerce_float(item) for item in raw)
            raise TypeError("expected a list of numbers")


def _coerce_float(raw: object) -> float:
    if isinstance(raw, bool):
        raise TypeError("expected a number")
    if isinstance(raw, int | float):
        return float(raw)
    if isinstance(raw, str):
        return parse_go_float(raw)
    raise TypeError("expected a number")


# -- Go's value syntax ---------------------------------------------------------------


def parse_go_bool(text: str) -> bool:
    """``strconv.ParseBool``: 1, t, T, TRUE, true, True and their false twins only."""
    if text in _TRUE:
        return True
    if text in _FALSE:
        return False
    raise ValueError(PARSE_ERROR)


def parse_go_int(text: str, base: int = 0) -> int:
    """``strconv.ParseInt(text, base, 64)``; base 0 reads Go's prefixes and ``_``.

    Raises:
        ValueError: ``parse error`` or ``value out of range`` (Go's flag wording).
    """
    negative = text[:1] == "-"
    digits = text[1:] if text[:1] in ("+", "-") else text
    magnitude = _parse_go_uint(digits, base)
    if magnitude > (_INT64_MAX + 1 if negative else _INT64_MAX):
        raise ValueError(RANGE_ERROR)
    return -magnitude if negative else magnitude


def _parse_go_uint(text: str, base: int) -> int:
    if not text:
        raise ValueError(PARSE_ERROR)
    allow_underscores = base == 0
    digits = text
    if base == 0:
        base = 10
        if text[0] == "0":
            if len(text) >= 3 and text[1] in "bBoOxX":
                base = {"b": 2, "o": 8, "x": 16}[text[1].lower()]
                digits = text[2:]
            else:
                base = 8
                digits = text[1:]
    seen_underscore = False
    value = 0
    for char in digits:
        if char == "_" and allow_underscores:
            seen_underscore = True
            continue
        if "0" <= char <= "9":
            digit = ord(char) - ord("0")
        elif "a" <= char.lower() <= "z" and char.isascii():
            digit = ord(char.lower()) - ord("a") + 10
        else:
            raise ValueError(PARSE_ERROR)
        if digit >= base:
            raise ValueError(PARSE_ERROR)
        value = value * base + digit
        if value > _UINT64_MAX:
            raise ValueError(RANGE_ERROR)
    if seen_underscore and not _underscores_ok(text):
        raise ValueError(PARSE_ERROR)
    return value


def _underscores_ok(text: str) -> bool:
    """Go's rule: ``_`` only between digits, or between a base prefix and a digit."""
    if text[:1] in ("+", "-"):
        text = text[1:]
    last = "^"  # ^ start, 0 digit or prefix, _ underscore, ! anything else
    start = 0
    hexadecimal = False
    if len(text) >= 2 and text[0] == "0" and text[1] in "bBoOxX":
        start, last, hexadecimal = 2, "0", text[1] in "xX"
    for char in text[start:]:
        if "0" <= char <= "9" or (hexadecimal and char in "abcdefABCDEF"):
            last = "0"
        elif char == "_":
            if last != "0":
                return False
            last = "_"
        else:
            if last == "_":
                return False
            last = "!"
    return last != "_"


_DECIMAL_FLOAT: Final = re.compile(r"[+-]?(?:[0-9]+\.?[0-9]*|\.[0-9]+)(?:[eE][+-]?[0-9]+)?")
_HEX_FLOAT: Final = re.compile(
    r"[+-]?0[xX](?:[0-9a-fA-F]+\.?[0-9a-fA-F]*|\.[0-9a-fA-F]+)[pP][+-]?[0-9]+"
)


def parse_go_float(text: str) -> float:
    """``strconv.ParseFloat(text, 64)``: decimal, hexadecimal (``0x1p-2``), ``inf``,
    ``infinity``, ``nan``, ``_`` between digits; no surrounding space.

    Raises:
        ValueError: ``parse error``, or ``value out of range`` past float64.
    """
    lowered = text.lower()
    unsigned = lowered[1:] if lowered[:1] in ("+", "-") else lowered
    if unsigned in ("inf", "infinity"):
        return -math.inf if lowered[0] == "-" else math.inf
    if lowered == "nan":
        return math.nan
    if "_" in text and not _underscores_ok(text):
        raise ValueError(PARSE_ERROR)
    plain = text.replace("_", "")
    if _HEX_FLOAT.fullmatch(plain):
        try:
            return float.fromhex(plain)
        except OverflowError:
            raise ValueError(RANGE_ERROR) from None
    if not _DECIMAL_FLOAT.fullmatch(plain):
        raise ValueError(PARSE_ERROR)
    value = float(plain)
    if math.isinf(value):
        raise ValueError(RANGE_ERROR)
    return value


def parse_go_duration(text: str) -> float:
    """``time.ParseDuration`` in seconds: ``300ms``, ``-1.5h``, ``2h45m``, ``0``.

    Raises:
        ValueError: Go's ``time: invalid duration "<text>"``.
    """
    invalid = ValueError(f'time: invalid duration "{text}"')
    if text != text.strip() or text[1:2] in ("+", "-"):
        raise invalid
    seconds = parse_duration(text)
    if abs(seconds) * 1e9 > _INT64_MAX:
        raise invalid
    return seconds


def format_go_duration(seconds: float) -> str:
    """Go's ``Duration.String``: ``0s``, ``250ms``, ``1.5µs``, ``2s``, ``1m0s``, ``1h30m0s``."""
    return go_duration_string(round(seconds * 1e9))


_ESCAPES: Final = {
    "\a": r"\a",
    "\b": r"\b",
    "\f": r"\f",
    "\n": r"\n",
    "\r": r"\r",
    "\t": r"\t",
    "\v": r"\v",
    '"': r"\"",
    "\\": r"\\",
}


def go_quote(text: str) -> str:
    """Go's ``%q`` of a string, as in its flag error lines. Bytes that were not UTF-8
    (``surrogateescape`` in ``sys.argv``) come out as ``\\xNN`` like Go's."""
    out = ['"']
    for char in text:
        code = ord(char)
        if char in _ESCAPES:
            out.append(_ESCAPES[char])
        elif 0xDC80 <= code <= 0xDCFF:
            out.append(f"\\x{code - 0xDC00:02x}")
        elif char.isprintable():
            out.append(char)
        elif code < 0x80:
            out.append(f"\\x{code:02x}")
        elif code < 0x10000:
            out.append(f"\\u{code:04x}")
        else:
            out.append(f"\\U{code:08x}")
    out.append('"')
    return "".join(out)


# -- usage ---------------------------------------------------------------------------


def usage(specs: Iterable[FlagSpec], program: str) -> str:
    """The text Go prints for ``-h``: flags sorted by name, each with its help."""
    lines = [f"Usage of {program}:"]
    for spec in sorted(specs, key=lambda spec: spec.name):
        line = f"  -{spec.name}"
        if spec.type_name:
            line += f" {spec.type_name}"
        line += "\t" if len(line) <= 4 else "\n    \t"
        line += spec.help.replace("\n", "\n    \t")
        if spec.default_text is not None:
            line += f" (default {spec.default_text})"
        lines.append(line)
    return "\n".join(lines) + "\n"
