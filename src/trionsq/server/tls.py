"""nsqd's TLS: one server context for the TCP upgrade and HTTPS, and /stats names.

nsqd builds one ``tls.Config`` (``buildTLSConfig``) and uses it for both the
IDENTIFY ``tls_v1`` upgrade and the HTTPS listener; :func:`server_tls_context` is
that construction here, so the two cannot drift apart. ``/stats`` reports the
version and cipher suite under Go's names (``prettyConnectionState``), which
:func:`tls_version_name` and :func:`cipher_suite_name` reproduce, "Unknown <n>"
included.

One difference from nsqd: ``--tls-client-auth-policy=require`` asks for a client
certificate without verifying it in Go; Python's ``ssl`` cannot accept an
unverified certificate, so here it is verified like ``require-verify``.
"""

from __future__ import annotations

import functools
import ssl
from typing import TYPE_CHECKING, Final

if TYPE_CHECKING:
    from ..config import NsqdConfig

__all__ = ["cipher_suite_name", "peer_common_name", "server_tls_context", "tls_version_name"]

_MIN_VERSIONS: Final = {"tls1.2": ssl.TLSVersion.TLSv1_2, "tls1.3": ssl.TLSVersion.TLSv1_3}
"""Minimums above Python's own; ssl3.0..tls1.1 keep its default (TLS 1.2, as
OpenSSL 3's security level refuses older versions whatever the minimum says)."""
_VERSION_NAMES: Final = {
    "TLSv1": "TLS1.0",
    "TLSv1.1": "TLS1.1",
    "TLSv1.2": "TLS1.2",
    "TLSv1.3": "TLS1.3",
}
_VERSION_NUMBERS: Final = {"SSLv3": 0x0300}
_GO_SUITE_NAMES: Final = {
    0x0005: "TLS_RSA_WITH_RC4_128_SHA",
    0x000A: "TLS_RSA_WITH_3DES_EDE_CBC_SHA",
    0x002F: "TLS_RSA_WITH_AES_128_CBC_SHA",
    0x0035: "TLS_RSA_WITH_AES_256_CBC_SHA",
    0xC007: "TLS_ECDHE_ECDSA_WITH_RC4_128_SHA",
    0xC009: "TLS_ECDHE_ECDSA_WITH_AES_128_CBC_SHA",
    0xC00A: "TLS_ECDHE_ECDSA_WITH_AES_256_CBC_SHA",
    0xC011: "TLS_ECDHE_RSA_WITH_RC4_128_SHA",
    0xC012: "TLS_ECDHE_RSA_WITH_3DES_EDE_CBC_SHA",
    0xC013: "TLS_ECDHE_RSA_WITH_AES_128_CBC_SHA",
    0xC014: "TLS_ECDHE_RSA_WITH_AES_256_CBC_SHA",
    0xC02F: "TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256",
    0xC02B: "TLS_ECDHE_ECDSA_WITH_AES_128_GCM_SHA256",
}
"""The suites nsqd names; any other is "Unknown <IANA number>" in its /stats."""


def server_tls_context(config: NsqdConfig) -> ssl.SSLContext:
    """nsqd's server TLS config: certificate, client-certificate policy, minimum version.

    No policy: no client certificate is asked for. ``require``/``require-verify``:
    one must be sent and verify against ``--tls-root-ca-file`` (the system's CAs
    when it is not set, as Go does with no ``ClientCAs``).
    """
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    context.load_cert_chain(config.tls_cert, config.tls_key)
    minimum = _MIN_VERSIONS.get(config.tls_min_version)
    if minimum is not None:
        context.minimum_version = minimum
    if config.tls_client_auth_policy:
        context.verify_mode = ssl.CERT_REQUIRED
        if config.tls_root_ca_file:
            context.load_verify_locations(cafile=config.tls_root_ca_file)
        else:
            context.load_default_certs(ssl.Purpose.CLIENT_AUTH)
    return context


def tls_version_name(version: str | None) -> str:
    """``TLSv1.3`` -> ``TLS1.3``, as nsqd's /stats prints a connection's version."""
    if version is None:
        return ""
    name = _VERSION_NAMES.get(version)
    if name is not None:
        return name
    return f"Unknown {_VERSION_NUMBERS.get(version, 0)}"


def cipher_suite_name(openssl_name: str | None) -> str:
    """The suite under Go's name for the ones nsqd names, else ``Unknown <number>``.

    OpenSSL names suites its own way (``ECDHE-RSA-AES128-GCM-SHA256``); OpenSSL's
    full cipher list maps that name to the IANA number nsqd switches on.
    """
    if openssl_name is None:
        return ""
    number = _suite_numbers().get(openssl_name, 0)
    return _GO_SUITE_NAMES.get(number, f"Unknown {number}")


@functools.cache
def _suite_numbers() -> dict[str, int]:
    """OpenSSL suite name -> IANA number, for every suite this OpenSSL knows."""
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.set_ciphers("ALL:@SECLEVEL=0")
    return {cipher["name"]: cipher["id"] & 0xFFFF for cipher in context.get_ciphers()}


def peer_common_name(certificate: dict[str, object] | None) -> str:
    """The subject CN of a verified peer certificate (``getpeercert()``), or ``""``.

    nsqd passes it to the auth server as ``common_name``.
    """
    if not certificate:
        return ""
    subject = certificate.get("subject", ())
    if not isinstance(subject, tuple):
        return ""
    for rdn in subject:
        for key, value in rdn:
            if key == "commonName":
                return str(value)
    return ""
