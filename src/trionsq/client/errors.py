"""What the client raises: one base, :class:`NsqClientError`, and a class per kind of
failure, each raised ``from`` what caused it (the ``OSError`` of a refused connect,
the ``ssl.SSLError`` of a certificate that does not verify, the HTTP error of the
last lookupd asked), so ``except NsqClientError`` catches everything the client
itself decides is a failure and the traceback still says why::

    NsqClientError
    ├── NsqConnectionError      cannot connect, or lost (also an OSError)
    │   ├── ConnectionClosedError   ended before the command's answer came
    │   └── NsqTlsError         the TLS handshake failed        ┐ NsqSecurityError
    ├── NsqError                the broker's error frame (code)  │
    │   └── NsqAuthError        AUTH needed, refused, or denied ┘
    ├── NsqDiscoveryError       no lookupd answered, or no broker for the topic
    └── NsqConfigError          bad settings or arguments (also a ValueError)

``NsqConnectionError`` stays an ``OSError`` and ``NsqConfigError`` a ``ValueError``,
which the client raised before: code catching those keeps working.
"""

from __future__ import annotations

import warnings
from typing import TYPE_CHECKING, Final

if TYPE_CHECKING:
    from ..protocol.client import ErrorReply

# The exception classes, which the package re-exports; AUTH_CODES, error_for and
# renamed are the client modules' own helpers.
__all__ = [
    "ConnectionClosedError",
    "NsqAuthError",
    "NsqClientError",
    "NsqConfigError",
    "NsqConnectionError",
    "NsqDiscoveryError",
    "NsqError",
    "NsqSecurityError",
    "NsqTlsError",
]

AUTH_CODES: Final = frozenset(
    {"E_AUTH_REQUIRED", "E_AUTH_FIRST", "E_AUTH_FAILED", "E_AUTH_DISABLED", "E_UNAUTHORIZED"}
)
"""The broker's answers about AUTH (nsqd's, and the client's own E_AUTH_REQUIRED)."""


class NsqClientError(Exception):
    """Every failure the client reports."""


class NsqConnectionError(NsqClientError, OSError):
    """The broker could not be reached, or the connection was lost."""


class ConnectionClosedError(NsqConnectionError):
    """The connection ended before the command's answer came."""


class NsqSecurityError(NsqClientError):
    """TLS or AUTH failed: retrying the same way will not help."""


class NsqTlsError(NsqSecurityError, NsqConnectionError):
    """The TLS handshake failed; ``__cause__`` is the :class:`ssl.SSLError` (a
    certificate that does not verify, a name that does not match...)."""


class NsqError(NsqClientError):
    """An error frame from the broker, as the answer to a command: ``code`` is its
    code (``E_BAD_TOPIC``...), ``fatal`` whether the broker closes the connection."""

    def __init__(self, reply: ErrorReply) -> None:
        super().__init__(reply.error.text)  # "CODE description", as the frame says
        self.code = reply.code
        self.fatal = reply.fatal


class NsqAuthError(NsqError, NsqSecurityError):
    """The broker wants AUTH and got no secret, refused it, or denies the command."""


class NsqDiscoveryError(NsqClientError):
    """No lookupd answered about the topic (``__cause__``: the last one's error), or
    none knows a broker for it."""


class NsqConfigError(NsqClientError, ValueError):
    """Settings or arguments the client cannot work with."""


def error_for(reply: ErrorReply) -> NsqError:
    """The exception for an error frame: :class:`NsqAuthError` for AUTH's codes."""
    return NsqAuthError(reply) if reply.code in AUTH_CODES else NsqError(reply)


_RENAMED: Final = {"LookupError_": NsqDiscoveryError}


def renamed(module: str, name: str) -> type[NsqClientError]:
    """A class asked for under its old name (a module's ``__getattr__``): the class,
    with a :class:`DeprecationWarning` naming the new one.

    Raises:
        AttributeError: ``name`` was never a name of ``module``.
    """
    new = _RENAMED.get(name)
    if new is None:
        raise AttributeError(f"module {module!r} has no attribute {name!r}")
    message = f"{name} is deprecated: use {new.__name__} (trionsq.client)"
    warnings.warn(message, DeprecationWarning, stacklevel=3)
    return new
