"""How a broker or a lookupd reaches a secured etcd: TLS and etcd's user authentication.

The options mean what etcdctl's do: ``--etcd-cacert`` the CA bundle that verifies
etcd's server certificate (none: the system's trust store), ``--etcd-cert`` and
``--etcd-key`` the client certificate etcd asks for with ``--client-cert-auth``,
``--etcd-username``/``--etcd-password`` a user of etcd's role-based access (the
client trades them for a token at ``/v3/auth/authenticate``). Checked once at
start (:meth:`EtcdAccess.check`), so a missing file or a half-given pair is one
line, before anything listens.
"""

from __future__ import annotations

import ssl
from typing import TypedDict

import attrs

from ..config_values import ConfigError, checked_fields

__all__ = ["EtcdAccess", "EtcdOptions", "EtcdSettings", "check_etcd_endpoints"]


@attrs.frozen
class EtcdAccess:
    """TLS files and credentials for etcd (all empty: plain ``http://``, no user)."""

    cacert: str = ""
    cert: str = ""
    key: str = ""
    username: str = ""
    password: str = attrs.field(default="", repr=False)
    """Never shown: not in ``repr``, logs, ``/config`` or ``/stats``."""

    @property
    def tls_files_given(self) -> bool:
        return bool(self.cacert or self.cert or self.key)

    def ssl_context(self) -> ssl.SSLContext:
        """A client context verifying etcd's certificate (against ``cacert``, else the
        system store) and showing ``cert``/``key`` when given.

        Raises:
            ConfigError: a file that cannot be read or is not PEM of the right kind.
        """
        try:
            context = ssl.create_default_context(cafile=self.cacert or None)
        except (OSError, ssl.SSLError) as error:
            raise ConfigError(f"--etcd-cacert {self.cacert!r}: {_reason(error)}") from None
        if self.cert:
            try:
                context.load_cert_chain(self.cert, self.key or None)
            except (OSError, ssl.SSLError) as error:
                raise ConfigError(
                    f"--etcd-cert {self.cert!r} / --etcd-key {self.key!r}: {_reason(error)}"
                ) from None
        return context

    def check(self, schemes: set[str]) -> None:
        """Refuse what cannot work with endpoints of these ``schemes``.

        Raises:
            ConfigError: one line naming the flag.
        """
        if len(schemes) > 1:
            raise ConfigError("--etcd-endpoints mixes http:// and https:// URLs")
        if self.tls_files_given and schemes == {"http"}:
            raise ConfigError("--etcd-cacert, --etcd-cert and --etcd-key need https:// endpoints")
        if bool(self.cert) != bool(self.key):
            raise ConfigError("--etcd-cert and --etcd-key go together: give both or neither")
        if bool(self.username) != bool(self.password):
            raise ConfigError(
                "--etcd-username and --etcd-password go together: give both or neither"
            )
        if schemes == {"https"}:
            self.ssl_context()  # the files are read now, not at the first call


class EtcdOptions(TypedDict, total=False):
    """The etcd options a broker's and a lookupd's typed keywords share
    (``NsqdOptions`` and ``LookupdOptions`` extend it)."""

    etcd_endpoints: tuple[str, ...]
    etcd_cacert: str
    etcd_cert: str
    etcd_key: str
    etcd_username: str
    etcd_password: str


@attrs.frozen(field_transformer=checked_fields)
class EtcdSettings:
    """The etcd fields of a broker's and a lookupd's configurations (both extend it),
    declared once, and what they read from them."""

    etcd_endpoints: tuple[str, ...] = ()
    """etcd client URLs (Youzan's ``cluster-leadership-addresses``); set, the broker
    joins a replicated cluster and the lookupd campaigns to coordinate it
    (docs/replication.md). Empty: a single broker, a plain nsqlookupd, as without it."""
    etcd_cacert: str = ""
    """CA bundle (PEM) verifying etcd's certificate with ``https://`` endpoints (""
    : the system store); etcdctl's ``--cacert``. docs/replication.md, "Securing etcd"."""
    etcd_cert: str = ""
    """Client certificate (PEM) for an etcd run with ``--client-cert-auth``."""
    etcd_key: str = ""
    """Its private key (PEM)."""
    etcd_username: str = ""
    """etcd user (Youzan's ``cluster-leadership-username``); "": none."""
    etcd_password: str = attrs.field(default="", repr=False)
    """Its password (Youzan's ``cluster-leadership-password``): never shown."""

    @property
    def etcd_urls(self) -> tuple[str, ...]:
        """``etcd_endpoints`` with comma-separated values split (``--etcd-endpoints
        URL[,URL]``, or the option repeated)."""
        return tuple(url for given in self.etcd_endpoints for url in given.split(",") if url)

    @property
    def etcd_access(self) -> EtcdAccess:
        """The TLS files and user for etcd."""
        return EtcdAccess(
            self.etcd_cacert, self.etcd_cert, self.etcd_key, self.etcd_username, self.etcd_password
        )


def check_etcd_endpoints(urls: tuple[str, ...], access: EtcdAccess) -> None:
    """Refuse endpoint URLs that are not ``http(s)://<host>:<port>``, and TLS files
    or credentials that cannot work with them.

    Raises:
        ConfigError: one line naming the flag.
    """
    schemes = set()
    for url in urls:
        scheme, _, rest = url.partition("://") if "://" in url else ("http", "", url)
        address = rest.rstrip("/")
        if scheme not in ("http", "https") or ":" not in address or "/" in address:
            raise ConfigError(f"--etcd-endpoints takes http(s)://<host>:<port> URLs, got {url!r}")
        schemes.add(scheme)
    access.check(schemes)


def _reason(error: OSError) -> str:
    if isinstance(error, ssl.SSLError) or not error.strerror:
        return str(error)
    return error.strerror
