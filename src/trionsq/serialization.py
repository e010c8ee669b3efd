"""The project's one cattrs converter, for JSON at the edges (IDENTIFY, HTTP, metadata).

Structuring is strict the way Go's ``encoding/json`` is: a JSON number is not a
string, ``true`` is not ``1``, ``1.0`` is not an int, and ``null`` leaves a field at
its default. Unknown keys are ignored, as nsqd ignores them.

Input comes from peers, so nothing here recurses as deep as the JSON does: orjson
accepts 1024 levels, more than Python's stack has room for once a server is a few
dozen frames in. Nulls are dropped with an explicit stack, error texts show values
through :func:`short_repr`, and a recursion that still happens is a decode error.
"""

from __future__ import annotations

import reprlib
from typing import TYPE_CHECKING, TypeVar

import attrs
import cattrs
import orjson
from cattrs.gen import make_dict_structure_fn, make_dict_unstructure_fn, override

if TYPE_CHECKING:
    from collections.abc import Callable

__all__ = ["JsonDecodeError", "dumps", "make_converter", "short_repr", "structure_json"]

T = TypeVar("T")

INT64_MIN = -(2**63)
INT64_MAX = 2**63 - 1


class JsonDecodeError(ValueError):
    """The bytes were not JSON of the expected shape."""


_SHORT_REPR = reprlib.Repr()
_SHORT_REPR.maxlevel = 3
_SHORT_REPR.maxstring = 80
_SHORT_REPR.maxother = 80


SHORT_REPR_LIMIT = 400
"""Characters of :func:`short_repr` at most: each level is bounded, but keys of 80
characters at every level of a few nested dicts still add up to kilobytes."""


def short_repr(value: object) -> str:
    """``repr`` for error texts about peer JSON: a few levels deep and short, so a
    hostile value can neither overflow the stack nor flood the log."""
    text = _SHORT_REPR.repr(value)
    if len(text) > SHORT_REPR_LIMIT:
        return text[: SHORT_REPR_LIMIT - 3] + "..."
    return text


def _strict_int(value: object, _type: object) -> int:
    if type(value) is not int or not INT64_MIN <= value <= INT64_MAX:
        raise TypeError(f"expected an integer, got {short_repr(value)}")
    return value


def _strict_bool(value: object, _type: object) -> bool:
    if type(value) is not bool:
        raise TypeError(f"expected a boolean, got {short_repr(value)}")
    return value


def _strict_str(value: object, _type: object) -> str:
    if type(value) is not str:
        raise TypeError(f"expected a string, got {short_repr(value)}")
    return value


def make_converter() -> cattrs.Converter:
    """Build a converter with Go-like strict scalars; one per process is plenty."""
    converter = cattrs.Converter(forbid_extra_keys=False)
    converter.register_structure_hook(int, _strict_int)
    converter.register_structure_hook(bool, _strict_bool)
    converter.register_structure_hook(str, _strict_str)

    def objects_only(cls: type[object]) -> Callable[[object, object], object]:
        structure = make_dict_structure_fn(cls, converter)

        def hook(value: object, _type: object) -> object:
            if not isinstance(value, dict):
                raise TypeError(
                    f"expected a JSON object for {cls.__name__}, got {short_repr(value)}"
                )
            return structure(value, cls)

        return hook

    converter.register_structure_hook_factory(attrs.has, objects_only)
    return converter


_CONVERTER = make_converter()


def structure_json(data: bytes, cls: type[T], converter: cattrs.Converter = _CONVERTER) -> T:
    """Parse JSON bytes into ``cls``; any failure is a :class:`JsonDecodeError`.

    ``null`` members are dropped first, so they keep the field's default, as in Go.
    """
    try:
        raw = orjson.loads(data)
    except orjson.JSONDecodeError as exc:
        raise JsonDecodeError(str(exc)) from exc
    if not isinstance(raw, dict):
        raise JsonDecodeError("expected a JSON object")
    _drop_nulls(raw)
    try:
        return converter.structure(raw, cls)
    except (cattrs.BaseValidationError, TypeError, ValueError, KeyError) as exc:
        raise JsonDecodeError(str(exc)) from exc
    except RecursionError:
        raise JsonDecodeError("JSON nested too deeply") from None


def _drop_nulls(root: dict[str, object]) -> None:
    """Remove ``null`` members from every object in ``root``, in place (orjson's
    fresh objects are ours), with an explicit stack whatever the depth."""
    stack: list[object] = [root]
    while stack:
        node = stack.pop()
        if isinstance(node, dict):
            for key in [key for key, item in node.items() if item is None]:
                del node[key]
            stack.extend(item for item in node.values() if isinstance(item, (dict, list)))
        elif isinstance(node, list):
            stack.extend(item for item in node if isinstance(item, (dict, list)))


def dumps(value: object, converter: cattrs.Converter = _CONVERTER) -> bytes:
    """Unstructure ``value`` and encode it as compact JSON bytes."""
    return orjson.dumps(converter.unstructure(value))


def omit_defaults(converter: cattrs.Converter, cls: type[object], *fields: str) -> None:
    """Unstructure ``cls`` with ``fields`` left out while they hold their default: the
    optional keys of a document (an extension's field absent from what a client or an
    older file expects)."""
    overrides = {name: override(omit_if_default=True) for name in fields}
    # cattrs types the per-field overrides and its own flags as one **kwargs
    unstructure = make_dict_unstructure_fn(cls, converter, **overrides)  # type: ignore[arg-type]
    converter.register_unstructure_hook(cls, unstructure)
