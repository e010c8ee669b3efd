"""Compiled modules inside PySpark's ``pyspark.zip``, so Spark's Python workers start warm.

Spark starts its Python daemons and workers with ``pyspark.zip`` first on their path, and
Python never writes bytecode for modules it imports from a zip: every new worker process
compiles PySpark again (0.7 s of CPU here for the daemon and worker modules alone, against
0.24 s with compiled files in the zip). That is most of why a session's first write job
is slower than the next ones (docs/spark.md, "The first job").

:func:`precompile` adds to the zip, beside each ``.py``, the ``.pyc`` that zipimport looks
for first: an unchecked hash-based pyc (PEP 552) for the running interpreter, so no
timestamp is compared. An interpreter of another version finds a foreign magic number,
passes the file over and compiles the source as before, so nothing can load wrong code.
Every entry already in the zip is kept as it was; PySpark's own test packages are left
out (workers never import them). The zip is replaced in one rename.

``python -m trionsq.spark.precompile [--zip PATH]`` runs it on the installed PySpark (or
the zip named); ``make`` does so after installing.
"""

from __future__ import annotations

import argparse
import contextlib
import importlib.util
import marshal
import os
import sys
import tempfile
import warnings
import zipfile
from pathlib import Path

import attrs

__all__ = [
    "PrecompileError",
    "Precompiled",
    "compiled_here",
    "installed_pyspark_zip",
    "main",
    "precompile",
]

_UNCHECKED_HASH_BASED = (0b01).to_bytes(4, "little")
"""PEP 552 flags: hash-based (bit 0), source not checked (bit 1 clear)."""


class PrecompileError(Exception):
    """The zip cannot be found, read or replaced; the message says which and why."""


@attrs.frozen
class Precompiled:
    """What :func:`precompile` did to one zip."""

    path: Path
    compiled: int
    """Modules given a ``.pyc`` now (0 when the zip already had this interpreter's)."""
    skipped: tuple[str, ...]
    """Sources that do not compile (zipimport reports them as before)."""

    def summary(self) -> str:
        if not self.compiled and not self.skipped:
            return f"{self.path}: already compiled for this Python"
        left = f", {len(self.skipped)} left as source" if self.skipped else ""
        return f"{self.path}: {self.compiled} modules compiled{left}"


def installed_pyspark_zip() -> Path:
    """The ``pyspark.zip`` Spark's workers import PySpark from, without importing it."""
    spec = importlib.util.find_spec("pyspark")
    if spec is None or not spec.submodule_search_locations:
        raise PrecompileError("PySpark is not installed (pip install 'trionsq[spark]')")
    package = Path(next(iter(spec.submodule_search_locations)))
    path = package / "python" / "lib" / "pyspark.zip"
    if not path.is_file():
        raise PrecompileError(f"{path}: no such file (is this a pip-installed PySpark?)")
    return path


def compiled_here(path: Path) -> bool:
    """True when the zip at ``path`` already has this interpreter's compiled modules."""
    try:
        with zipfile.ZipFile(path) as source:
            return _compiled_here(source, source.infolist())
    except (OSError, zipfile.BadZipFile) as error:
        raise PrecompileError(f"{path}: {error}") from None


def precompile(path: Path) -> Precompiled:
    """Give every module of the zip at ``path`` its compiled twin for this interpreter."""
    try:
        with zipfile.ZipFile(path) as source:
            entries = source.infolist()
            if _compiled_here(source, entries):
                return Precompiled(path, 0, ())
            return _rewrite(path, source, entries)
    except (OSError, zipfile.BadZipFile) as error:
        raise PrecompileError(f"{path}: {error}") from None


def _wanted(name: str) -> bool:
    return name.endswith(".py") and "/tests/" not in name


def _compiled_here(source: zipfile.ZipFile, entries: list[zipfile.ZipInfo]) -> bool:
    """True when the first module's ``.pyc`` is already this interpreter's."""
    names = {entry.filename for entry in entries}
    first = next((entry.filename for entry in entries if _wanted(entry.filename)), None)
    if first is None or f"{first}c" not in names:
        return first is None
    return source.read(f"{first}c")[:4] == importlib.util.MAGIC_NUMBER


def _rewrite(path: Path, source: zipfile.ZipFile, entries: list[zipfile.ZipInfo]) -> Precompiled:
    compiled = 0
    skipped: list[str] = []
    sources = {entry.filename for entry in entries if entry.filename.endswith(".py")}
    handle, temporary = tempfile.mkstemp(prefix=".pyspark-", suffix=".zip", dir=path.parent)
    os.close(handle)
    try:
        with zipfile.ZipFile(temporary, "w") as target:
            for entry in entries:
                if entry.filename.endswith(".pyc") and entry.filename[:-1] in sources:
                    continue  # another interpreter's twin: replaced below
                data = source.read(entry)
                target.writestr(entry, data)
                if not _wanted(entry.filename):
                    continue
                pyc = _hash_based_pyc(data, f"{path}{os.sep}{entry.filename}")
                if pyc is None:
                    skipped.append(entry.filename)
                    continue
                twin = zipfile.ZipInfo(f"{entry.filename}c", entry.date_time)
                target.writestr(twin, pyc, compress_type=zipfile.ZIP_DEFLATED)
                compiled += 1
        os.chmod(temporary, path.stat().st_mode & 0o777)
        os.replace(temporary, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(temporary)
        raise
    return Precompiled(path, compiled, tuple(skipped))


def _hash_based_pyc(source: bytes, filename: str) -> bytes | None:
    """The pyc zipimport loads for ``source`` (named ``filename`` in tracebacks)."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # SyntaxWarnings are PySpark's, not ours to print
        try:
            code = compile(source, filename, "exec", dont_inherit=True)
        except (SyntaxError, ValueError):
            return None
    return (
        importlib.util.MAGIC_NUMBER
        + _UNCHECKED_HASH_BASED
        + importlib.util.source_hash(source)
        + marshal.dumps(code)
    )


def main(argv: list[str] | None = None) -> int:
    """The command: one line saying what was done, or what is wrong (exit status 1)."""
    parser = argparse.ArgumentParser(
        prog="python -m trionsq.spark.precompile",
        description="Add compiled modules for this Python to PySpark's pyspark.zip, which "
        "Spark's Python workers import PySpark from (docs/spark.md, 'The first job').",
    )
    parser.add_argument("--zip", type=Path, help="the zip (default: the installed PySpark's)")
    args = parser.parse_args(argv)
    try:
        done = precompile(args.zip if args.zip is not None else installed_pyspark_zip())
    except PrecompileError as error:
        sys.stderr.write(f"error: {error}\n")
        return 1
    sys.stdout.write(f"{done.summary()}\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
