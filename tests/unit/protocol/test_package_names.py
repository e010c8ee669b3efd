"""trionsq.protocol names its lazy re-exports three times on purpose (the typing-only
imports, the lazy table, ``__all__``): they must name the same things, each from
the module it really lives in."""

from __future__ import annotations

import ast
import importlib
from pathlib import Path

import trionsq.protocol as package


def _typing_imports() -> dict[str, str]:
    tree = ast.parse(Path(package.__file__).read_text(encoding="utf-8"))
    found: dict[str, str] = {}
    for node in tree.body:
        if isinstance(node, ast.If) and ast.unparse(node.test) == "TYPE_CHECKING":
            for statement in node.body:
                assert isinstance(statement, ast.ImportFrom), ast.unparse(statement)
                assert statement.level == 1
                assert statement.module is not None
                for alias in statement.names:
                    found[alias.name] = statement.module
    return found


def test_the_three_lists_agree() -> None:
    typing_imports = _typing_imports()
    assert typing_imports, "no typing-only imports found"
    assert typing_imports == package._WHERE
    assert sorted(package.__all__) == sorted(typing_imports)


def test_each_name_is_its_modules() -> None:
    for name, module in package._WHERE.items():
        value = getattr(package, name)
        assert value is getattr(importlib.import_module(f"trionsq.protocol.{module}"), name)
