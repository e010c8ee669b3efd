"""Small files the broker rewrites whole: metadata and channel states (docs/storage.md).

A crash at any moment must leave either the old file or the new one under the real
name, never a mix, and a file that was renamed into place must still be there after
a power loss. So :func:`write_atomic` writes a temporary file next to the target,
fsyncs it, renames it over the target and fsyncs the directory (the rename lives in
the directory). Every function here blocks: the broker calls them in a worker thread.

This module also holds the converter for those files: the project's strict one
(:func:`trionsq.serialization.make_converter`), where in addition a JSON array is the
only thing that becomes a tuple (cattrs alone would take an object's keys).
"""

from __future__ import annotations

import os
import secrets
from itertools import chain
from pathlib import Path
from typing import TYPE_CHECKING, Final, TypeVar, get_args, get_origin

import cattrs
import orjson
from cattrs.cols import homogenous_tuple_structure_factory

from .serialization import INT64_MAX, INT64_MIN, make_converter, short_repr

if TYPE_CHECKING:
    from collections.abc import Callable

__all__ = [
    "TEMP_SUFFIX",
    "StorageFormatError",
    "decode_versioned",
    "ensure_directory",
    "fsync_directory",
    "read_optional",
    "remove_file",
    "remove_stale_temps",
    "storage_converter",
    "write_atomic",
]

TEMP_SUFFIX: Final = ".tmp"
"""Temporary files are ``.<target name>.<random hex>.tmp``: hidden, unique per write,
and never ending like a real storage file (``.json``, ``.state``, ``.log``)."""

T = TypeVar("T")

_O_DIRECTORY: Final = getattr(os, "O_DIRECTORY", 0)
_O_CLOEXEC: Final = getattr(os, "O_CLOEXEC", 0)


def write_atomic(path: str | os.PathLike[str], data: bytes) -> None:
    """Replace ``path`` with ``data`` so that a crash leaves the old or the new file.

    The temporary name is random, so concurrent writers of different files (or two
    writers of the same one) never share a temporary file; on any error it is removed.
    """
    target = Path(path)
    directory = target.parent
    temp, fd = _create_temp(directory, target.name)
    try:
        try:
            view = memoryview(data)
            while view:
                written = os.write(fd, view)
                view = view[written:]
            os.fsync(fd)
        finally:
            os.close(fd)
        os.replace(temp, target)
    except BaseException as error:
        temp.unlink(missing_ok=True)
        if isinstance(error, OSError) and error.errno is not None and error.filename is None:
            error.filename = str(target)  # name the file a write or fsync failed on
        raise
    fsync_directory(directory)


def _create_temp(directory: Path, name: str) -> tuple[Path, int]:
    flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | _O_CLOEXEC
    while True:
        temp = directory / f".{name}.{secrets.token_hex(8)}{TEMP_SUFFIX}"
        try:
            return temp, os.open(temp, flags, 0o644)
        except FileExistsError:  # pragma: no cover - 64 random bits
            continue


def read_optional(path: str | os.PathLike[str]) -> bytes | None:
    """The file's bytes, or None when it does not exist (a first start)."""
    try:
        return Path(path).read_bytes()
    except FileNotFoundError:
        return None


def fsync_directory(directory: str | os.PathLike[str]) -> None:
    """Make a rename, creation or removal in ``directory`` survive a power loss.

    A no-op where directories cannot be opened (Windows).
    """
    if not _O_DIRECTORY:  # pragma: no cover - not POSIX
        return
    fd = os.open(directory, os.O_RDONLY | _O_DIRECTORY | _O_CLOEXEC)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def ensure_directory(path: str | os.PathLike[str]) -> bool:
    """Create ``path`` (and missing parents) durably; True if it was created."""
    directory = Path(path)
    if directory.is_dir():
        return False
    parent = directory.parent
    ensure_directory(parent)
    try:
        directory.mkdir()
    except FileExistsError:
        return False
    fsync_directory(parent)
    return True


def remove_file(path: str | os.PathLike[str]) -> bool:
    """Remove a file durably; False if it was not there."""
    target = Path(path)
    try:
        target.unlink()
    except FileNotFoundError:
        return False
    fsync_directory(target.parent)
    return True


def remove_stale_temps(directory: str | os.PathLike[str]) -> list[Path]:
    """Delete temporary files a crash left in ``directory``; returns what was removed.

    Only at startup, before any writer runs: a live writer's temporary file looks
    the same.
    """
    removed: list[Path] = []
    try:
        entries = list(os.scandir(directory))
    except FileNotFoundError:
        return removed
    for entry in entries:
        if (
            entry.name.startswith(".")
            and entry.name.endswith(TEMP_SUFFIX)
            and entry.is_file(follow_symlinks=False)
        ):
            Path(entry.path).unlink(missing_ok=True)
            removed.append(Path(entry.path))
    return removed


def storage_converter() -> cattrs.Converter:
    """The project's strict converter, where a tuple field accepts only a JSON array
    (of the right length, for a fixed-size tuple)."""
    converter = make_converter()

    def is_tuple(cls: object) -> bool:
        return get_origin(cls) is tuple

    def tuple_hook(cls: type[tuple[object, ...]]) -> Callable[[object, object], object]:
        args = get_args(cls)
        if len(args) == 2 and args[1] is Ellipsis:
            items = homogenous_tuple_structure_factory(cls, converter)

            def variadic(value: object, _type: object) -> object:
                if not isinstance(value, list):
                    raise TypeError(f"expected a JSON array, got {short_repr(value)}")
                return items(value, cls)

            width = _int_tuple_width(args[0])
            if width is None:
                return variadic

            def int_rows(value: object, _type: object) -> object:
                if type(value) is list and _all_int_rows(value, width):
                    return tuple(value) if width == 0 else tuple(map(tuple, value))
                return variadic(value, _type)  # the checked walk: its error names the item

            return int_rows
        hooks = [converter.get_structure_hook(arg) for arg in args]

        def fixed(value: object, _type: object) -> object:
            if not isinstance(value, list) or len(value) != len(hooks):
                raise TypeError(f"expected a JSON array of {len(hooks)}, got {short_repr(value)}")
            return tuple(
                hook(item, arg) for hook, item, arg in zip(hooks, value, args, strict=True)
            )

        return fixed

    converter.register_structure_hook_factory(is_tuple, tuple_hook)
    return converter


def _int_tuple_width(item: object) -> int | None:
    """0 for ``int``, n for ``tuple[int, ...n times]``, None for anything else: the
    items of a variadic tuple :func:`_all_int_rows` can check in bulk."""
    if item is int:
        return 0
    if get_origin(item) is tuple:
        parts = get_args(item)
        if parts and Ellipsis not in parts and all(part is int for part in parts):
            return len(parts)
    return None


def _all_int_rows(value: list[object], width: int) -> bool:
    """Whether every item is an int64 (``width`` 0) or a list of ``width`` int64s:
    what the checked walk would accept, found with loops that run in C (a channel
    state's thousands of finished ids, 3.2 ms a state one hook per id, issue 35).
    False sends the value to that walk, whose error names the bad item."""
    items: list[object] = value
    if width:
        if any(type(row) is not list or len(row) != width for row in value):
            return False
        items = list(chain.from_iterable(value))  # type: ignore[arg-type]  # lists, just checked
    if not items:
        return True
    if set(map(type, items)) != {int}:
        return False
    ints: list[int] = items  # type: ignore[assignment]  # all int, just checked
    return min(ints) >= INT64_MIN and max(ints) <= INT64_MAX


class StorageFormatError(ValueError):
    """A storage file that is not what this trionsq writes: bad JSON, a wrong shape,
    or a format version it does not know."""


def decode_versioned(
    data: bytes,
    cls: type[T],
    converter: cattrs.Converter,
    *,
    version: int,
    what: str,
    error: type[StorageFormatError] = StorageFormatError,
) -> T:
    """Decode a JSON object whose ``version`` member must equal ``version``.

    The version is checked before the shape, so a file from a newer trionsq says so
    instead of listing missing fields. ``null`` is refused like any wrong type (these
    files never contain it). Every failure is an ``error`` (the file's own
    :class:`StorageFormatError`) naming ``what`` and the JSON path of the problem.
    """
    try:
        raw = orjson.loads(data)
    except orjson.JSONDecodeError as exc:
        raise error(f"{what}: not JSON ({exc})") from exc
    if not isinstance(raw, dict):
        raise error(f"{what}: expected a JSON object")
    found = raw.get("version")
    if type(found) is not int:
        raise error(f"{what}: no integer format version")
    if found != version:
        raise error(
            f"{what}: format version {found} is not supported (this trionsq reads {version})"
        )
    try:
        return converter.structure(raw, cls)
    except cattrs.BaseValidationError as exc:
        details = "; ".join(cattrs.transform_error(exc))
        raise error(f"{what}: {details}") from exc
    except (TypeError, ValueError, KeyError) as exc:
        raise error(f"{what}: {exc}") from exc
    except RecursionError:
        raise error(f"{what}: JSON nested too deeply") from None
