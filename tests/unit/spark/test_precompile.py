"""``python -m trionsq.spark.precompile``: compiled twins in a zip that zipimport loads, every
original entry kept, nothing loaded that does not match the running interpreter."""

from __future__ import annotations

import importlib.util
import subprocess
import sys
import zipfile
from typing import TYPE_CHECKING

import pytest

from trionsq.spark.precompile import PrecompileError, precompile

if TYPE_CHECKING:
    from pathlib import Path

COMMAND = (sys.executable, "-m", "trionsq.spark.precompile")
SOURCES = {
    "pkg/__init__.py": b"from .mod import answer\n",
    "pkg/mod.py": b"def answer():\n    return 42\n",
    "pkg/tests/__init__.py": b"",
    "pkg/tests/test_mod.py": b"assert True\n",
    "pkg/broken.py": b"def (:\n",
    "pkg/data.txt": b"not python",
}


def make_zip(path: Path, extra: dict[str, bytes] | None = None) -> Path:
    with zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED) as made:
        for name, data in {**SOURCES, **(extra or {})}.items():
            made.writestr(name, data)
    return path


def imported_from(archive: Path, module: str) -> str:
    """The ``__file__`` of ``module`` imported from ``archive`` in a fresh interpreter."""
    code = (
        f"import sys; sys.path.insert(0, {str(archive)!r}); import {module} as m; print(m.__file__)"
    )
    return subprocess.run(  # noqa: S603 - this interpreter, a test's own code
        [sys.executable, "-c", code], check=True, capture_output=True, text=True
    ).stdout.strip()


def test_modules_load_compiled_and_every_entry_stays_as_it_was(tmp_path: Path) -> None:
    archive = make_zip(tmp_path / "pyspark.zip")
    assert imported_from(archive, "pkg.mod").endswith("pkg/mod.py")
    done = precompile(archive)
    assert (done.compiled, done.skipped) == (2, ("pkg/broken.py",))
    with zipfile.ZipFile(archive) as result:
        assert {name: result.read(name) for name in SOURCES} == SOURCES
        names = set(result.namelist())
    assert names - set(SOURCES) == {"pkg/__init__.pyc", "pkg/mod.pyc"}  # no tests, no broken
    assert imported_from(archive, "pkg.mod").endswith("pkg/mod.pyc")
    assert imported_from(archive, "pkg.tests.test_mod").endswith("test_mod.py")


def test_a_second_run_changes_nothing(tmp_path: Path) -> None:
    archive = make_zip(tmp_path / "pyspark.zip")
    precompile(archive)
    before = archive.read_bytes()
    again = precompile(archive)
    assert (again.compiled, again.summary()) == (0, f"{archive}: already compiled for this Python")
    assert archive.read_bytes() == before


def test_another_interpreters_twins_are_replaced_and_never_loaded(tmp_path: Path) -> None:
    """A pyc of another Python (another magic number) is passed over by zipimport; the
    tool replaces it with this interpreter's."""
    foreign = b"\x00\x00\r\n" + bytes(12) + b"garbage"
    archive = make_zip(tmp_path / "pyspark.zip", {"pkg/mod.pyc": foreign})
    assert imported_from(archive, "pkg.mod").endswith("pkg/mod.py")
    assert precompile(archive).compiled == 2
    with zipfile.ZipFile(archive) as result:
        assert result.read("pkg/mod.pyc")[:4] == importlib.util.MAGIC_NUMBER
        assert result.namelist().count("pkg/mod.pyc") == 1
    assert imported_from(archive, "pkg.mod").endswith("pkg/mod.pyc")


def test_a_missing_or_broken_zip_is_one_clear_error_and_nothing_is_left_behind(
    tmp_path: Path,
) -> None:
    with pytest.raises(PrecompileError, match="No such file"):
        precompile(tmp_path / "absent.zip")
    (tmp_path / "bad.zip").write_bytes(b"not a zip")
    with pytest.raises(PrecompileError, match=r"bad\.zip: File is not a zip file"):
        precompile(tmp_path / "bad.zip")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["bad.zip"]


def test_the_command(tmp_path: Path) -> None:
    archive = make_zip(tmp_path / "pyspark.zip")
    run = subprocess.run(  # noqa: S603 - the installed command
        [*COMMAND, "--zip", str(archive)], capture_output=True, text=True
    )
    assert (run.returncode, run.stdout) == (0, f"{archive}: 2 modules compiled, 1 left as source\n")
    missing = subprocess.run(  # noqa: S603 - the installed command
        [*COMMAND, "--zip", str(tmp_path / "absent.zip")],
        capture_output=True,
        text=True,
    )
    assert missing.returncode == 1
    assert missing.stderr.startswith("error: ")
    assert missing.stderr.count("\n") == 1
