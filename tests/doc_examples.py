"""The code blocks of the user docs, read so the suite can run them (issue 31, item 7):
every ``python``, ``sh`` and ``bash`` block of the docs in :data:`DOCS` is an example
that runs as is against a local broker on nsqd's ports (127.0.0.1:4150 TCP, :4151
HTTP; a lookupd on :4160/:4161), so the docs cannot drift from the code.

A block says what else it needs in an HTML comment right above it (unseen on a
rendered page), ``<!-- example: lookupd -->``, a comma-separated list of
:data:`NEEDS`; without one it needs a broker only. Blocks of other languages (json,
yaml, text, none) are shapes and output, not examples.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Final

import attrs

ROOT: Final = Path(__file__).resolve().parents[1]
DOCS: Final = ("docs/client.md", "docs/extensions.md", "docs/admin.md", "docs/spark.md")
RUNNABLE: Final = frozenset({"python", "sh", "bash"})
NEEDS: Final = {
    "broker": "a broker on 127.0.0.1:4150/4151 (the default)",
    "lookupd": "a lookupd on 127.0.0.1:4160/4161 and the broker registered with it",
    "tls": "the broker has a certificate; the example trusts the CA in ca.pem",
    "auth": "the broker asks an auth server, which grants the secret the-secret",
    "own broker": "the example starts its own broker on 127.0.0.1:4150/4151",
    "pytest": "a pytest test file, run by pytest (its fixtures start the broker)",
    "spark": "Python run in one SparkSession, `spark` (as pyspark's shell gives)",
    "not run": "never run: the comment says why and what exercises it instead",
}
_FENCE: Final = re.compile(r"^```(\S*)\s*$")
_MARK: Final = re.compile(r"^<!--\s*example:\s*(.*?)\s*-->\s*$")


@attrs.frozen
class Example:
    """One runnable block."""

    doc: str
    line: int
    """The line of its opening fence (1-based)."""
    language: str
    code: str
    needs: frozenset[str]
    why_not: str = ""
    """For ``not run``: the reason given."""

    @property
    def name(self) -> str:
        return f"{self.doc}:{self.line}"


def examples(doc: str) -> list[Example]:
    """Every runnable block of ``doc`` (a path under the repository), in order.

    Raises:
        ValueError: a marker names a need that is not in :data:`NEEDS`, or a block
            is not closed.
    """
    lines = (ROOT / doc).read_text().splitlines()
    found: list[Example] = []
    index = 0
    while index < len(lines):
        fence = _FENCE.match(lines[index])
        if fence is None:
            index += 1
            continue
        start = index
        index += 1
        while index < len(lines) and lines[index] != "```":
            index += 1
        if index == len(lines):
            raise ValueError(f"{doc}:{start + 1}: the block is never closed")
        language = fence[1]
        mark = _MARK.match(lines[start - 1]) if start else None
        if language in RUNNABLE:
            needs, why_not = _needs(doc, start + 1, mark[1] if mark else "broker")
            if doc == "docs/spark.md" and language == "python" and "not run" not in needs:
                needs |= {"spark"}
            code = "\n".join(lines[start + 1 : index]) + "\n"
            found.append(Example(doc, start + 1, language, code, needs, why_not))
        elif mark is not None:
            raise ValueError(f"{doc}:{start + 1}: a {language or 'plain'} block runs nothing")
        index += 1
    return found


def _needs(doc: str, line: int, text: str) -> tuple[frozenset[str], str]:
    if text.startswith("not run"):
        reason = text.removeprefix("not run").lstrip(" :")
        if not reason:
            raise ValueError(f"{doc}:{line}: 'not run' must say why")
        return frozenset({"not run"}), reason
    needs = frozenset(part.strip() for part in text.split(",") if part.strip())
    unknown = needs - NEEDS.keys()
    if unknown or not needs:
        raise ValueError(f"{doc}:{line}: unknown needs {sorted(unknown)} (from {sorted(NEEDS)})")
    return needs, ""


def all_examples() -> list[Example]:
    return [example for doc in DOCS for example in examples(doc)]


def with_addresses(code: str, places: dict[str, str]) -> str:
    """``code`` with each default of ``places`` replaced by its actual value, in one
    pass: a port handed out by the kernel may begin like another default (41501
    holds 4150), so replacing one after another could rewrite a replacement. An
    address is replaced only whole (not followed by another digit)."""
    if not places:
        return code
    pattern = "|".join(re.escape(default) + r"(?!\d)" for default in places)
    return re.sub(pattern, lambda found: places[found.group(0)], code)
