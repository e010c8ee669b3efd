"""What configuration fields take besides the value they keep (attrs converters).

Every duration of a configuration (``NsqdConfig``, ``LookupdConfig``, the client's
settings) is kept in seconds and given either way: a number of seconds or a Go
duration string (``"5s"``, ``"250ms"``, ``"1h30m"``), as nsqd's flags and config
files write them. Every address is kept as ``"host:port"`` and given either way:
that string, or ``(host, port)`` as sockets and the fixtures give it.

A value that fits neither raises :class:`ConfigError` (a ``ValueError``) with one
line, when the configuration is made: before anything starts.
"""

from __future__ import annotations

import functools
from typing import TYPE_CHECKING, Final, cast

from .addresses import is_host_port_pair, normalize_address
from .goflags import parse_go_duration

if TYPE_CHECKING:
    from collections.abc import Callable, Iterable

    import attrs

    from .addresses import Address

__all__ = ["ConfigError", "address_text", "address_texts", "checked_fields", "seconds"]


class ConfigError(ValueError):
    """A configuration nsqd would refuse at startup; the message is one line."""


def seconds(value: float | str) -> float:
    """A duration in seconds, from seconds or a Go duration string.

    Raises:
        ConfigError: neither (a bare number in a string has no unit: Go refuses it too).
    """
    if isinstance(value, str):
        try:
            return parse_go_duration(value)
        except ValueError:
            raise ConfigError(
                f"{value!r} is not a duration: use a duration such as 5s or 250ms,"
                " or a number of seconds"
            ) from None
    if isinstance(value, int | float) and not isinstance(value, bool):
        return float(value)
    raise ConfigError(f"{value!r} is not a duration: use seconds or a string such as 5s")


def address_text(value: Address) -> str:
    """``"host:port"`` from ``(host, port)``; a string stays as given (the
    configuration's ``validate`` checks it, naming its flag; ``""`` may mean "off").

    Raises:
        ConfigError: a pair that is not ``(str, int)`` with a port in [0, 65535].
    """
    if isinstance(value, str):
        return value
    try:
        return normalize_address(value)
    except ValueError as error:
        raise ConfigError(str(error)) from None


def address_texts(values: Address | Iterable[Address]) -> tuple[str, ...]:
    """Several addresses (a list field), each as :func:`address_text`; one address
    alone, a string or a ``(host, port)`` pair, is a list of one.

    Raises:
        ConfigError: as :func:`address_text`.
    """
    if isinstance(values, str) or is_host_port_pair(values):
        return (address_text(values),)
    return tuple(address_text(value) for value in cast("Iterable[Address]", values))


_KINDS: Final[dict[str, tuple[str, Callable[[object], bool]]]] = {
    "int": ("an int", lambda value: isinstance(value, int) and not isinstance(value, bool)),
    "bool": ("a bool", lambda value: isinstance(value, bool)),
    "str": ("a str", lambda value: isinstance(value, str)),
    "float": (
        "a number",
        lambda value: isinstance(value, int | float) and not isinstance(value, bool),
    ),
    "tuple[str, ...]": (
        "a tuple of str",
        lambda value: isinstance(value, tuple) and all(isinstance(item, str) for item in value),
    ),
    "tuple[float, ...]": (
        "a tuple of numbers",
        lambda value: (
            isinstance(value, tuple)
            and all(isinstance(item, int | float) and not isinstance(item, bool) for item in value)
        ),
    ),
}
"""The field types :func:`checked_fields` checks, by their annotation: a name the
table does not know (an enum, ``X | None``) is left to the field's own use."""


def checked_fields(
    cls: type, fields: list[attrs.Attribute[object]]
) -> list[attrs.Attribute[object]]:
    """An attrs ``field_transformer`` for configurations: a converter's
    :class:`ConfigError` names its field (``msg_timeout: '5' is not a duration...``),
    and a value of the wrong type is a :class:`ConfigError` too
    (``max_rdy_count: '100' is not an int``), both when the configuration is made,
    where a mistyped value would otherwise fail later, inside the broker's tasks."""
    checked: list[attrs.Attribute[object]] = []
    for field in fields:
        converter = field.converter
        if callable(converter):
            converter = _naming(field.name, converter)
        kind = _KINDS.get(field.type) if isinstance(field.type, str) else None
        validator = field.validator
        if kind is not None:
            validator = _of_kind(field.name, *kind)
        checked.append(field.evolve(converter=converter, validator=validator))
    return checked


def _naming(name: str, convert: Callable[[object], object]) -> Callable[[object], object]:
    @functools.wraps(convert)  # attrs reads the accepted type from the original
    def converter(value: object) -> object:
        try:
            return convert(value)
        except ConfigError as error:
            raise ConfigError(f"{name}: {error}") from None

    return converter


def _of_kind(
    name: str, what: str, fits: Callable[[object], bool]
) -> Callable[[object, attrs.Attribute[object], object], None]:
    def validate(_: object, __: attrs.Attribute[object], value: object) -> None:
        if not fits(value):
            raise ConfigError(f"{name}: {value!r} is not {what}")

    return validate
