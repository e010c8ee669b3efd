"""Errors out of the client's nurseries as themselves.

Every client context manager runs its tasks in a nursery, so an error raised in
the caller's block (or by a connection's SUB) would come out wrapped in an
:class:`ExceptionGroup` of one. Callers write ``except NsqError``; a group holding
a single error is therefore unwrapped (the inner traceback is kept). Groups of
several errors stay groups: each matters. The error keeps its own ``__cause__``
(a TLS failure's :class:`ssl.SSLError`): only the group is left out of its chain.
"""

from __future__ import annotations

from contextlib import contextmanager
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from collections.abc import Iterator

__all__ = ["single_errors"]


@contextmanager
def single_errors() -> Iterator[None]:
    """Re-raise a one-error group (nested or not) as that error, cause kept."""
    try:
        yield
    except BaseExceptionGroup as group:
        inner: BaseException = group
        while isinstance(inner, BaseExceptionGroup) and len(inner.exceptions) == 1:
            inner = inner.exceptions[0]
        if inner is group or isinstance(inner, BaseExceptionGroup):
            raise
        raise inner from inner.__cause__
