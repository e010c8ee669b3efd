"""What configuration fields take besides the value they keep (attrs converters).

Every address is kept as ``"host:port"`` and given either way: that string, or
``(host, port)`` as sockets and the fixtures give it.

A value that fits neither raises :class:`ConfigError` (a ``ValueError``) with one
line, when the configuration is made: before anything starts.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, cast

from .addresses import is_host_port_pair, normalize_address

if TYPE_CHECKING:
    from collections.abc import Iterable

    from .addresses import Address

__all__ = ["ConfigError", "address_text", "address_texts"]


class ConfigError(ValueError):
    """A configuration nsqd would refuse at startup; the message is one line."""


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
