"""Every option of the broker and the lookupd, declared once.

The drop-in ``nsqd``/``nsqlookupd`` commands read these in Go's flag syntax
(``goflags``); ``trionsq serve``/``trionsq lookupd`` offer the same options through
click (``cli``), and both resolve them the same way (flags, then ``-config``, then
defaults), so an option documented for one works on the other. Defaults are the
config classes' (``NsqdConfig``, ``LookupdConfig``), so the two never disagree.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Final

import attrs

from . import goflags
from .config import (
    ADMIN_STREAM_MODES,
    EXPERIMENTS,
    LOG_LEVELS,
    TLS_VERSIONS,
    NsqdConfig,
    TlsRequired,
)
from .goflags import FlagSpec, Kind
from .lookupd.config import LookupdConfig

if TYPE_CHECKING:
    from collections.abc import Callable

__all__ = ["NSQD_FLAGS", "NSQLOOKUPD_FLAGS"]

_D: Final = NsqdConfig()
"""The defaults every flag shows and falls back to."""


def _log_level(text: str) -> str:
    level = text.lower()
    if level not in LOG_LEVELS:
        raise ValueError(f"unknown log level {text!r}, expected one of {', '.join(LOG_LEVELS)}")
    return level


def _tls_required(text: str) -> TlsRequired:
    """nsqd's ``--tls-required``: a boolean, or ``tcp-https`` for "TCP only"."""
    lowered = text.lower()
    if lowered == "tcp-https":
        return TlsRequired.EXCEPT_HTTP
    try:
        return TlsRequired.YES if goflags.parse_go_bool(lowered) else TlsRequired.NO
    except ValueError:
        raise ValueError(f"{text!r} is not true, false or tcp-https") from None


def _tls_min_version(text: str) -> str:
    lowered = text.lower()
    if lowered == "":
        return _D.tls_min_version
    if lowered not in TLS_VERSIONS:
        raise ValueError(f"unknown TLS version {text!r}, expected one of {', '.join(TLS_VERSIONS)}")
    return lowered


def _not(text: str) -> bool:
    """``-in-memory`` sets ``persist`` to the opposite of its Go boolean."""
    return not goflags.parse_go_bool(text)


def _flag(
    name: str,
    kind: Kind,
    text: str,
    *,
    dest: str | None = None,
    cfg_key: str | None = None,
    parse: Callable[[str], goflags.FlagValue] | None = None,
    bool_flag: bool = False,
    default_text: str | None = None,
) -> FlagSpec:
    """An nsqd option whose default is NsqdConfig's, so the two never disagree."""
    field = dest or name.replace("-", "_")
    default: goflags.FlagValue = getattr(_D, field)
    spec = FlagSpec(
        name,
        kind,
        default,
        text,
        dest=field,
        cfg_key=cfg_key or field,
        parse=parse,
        bool_flag=bool_flag or kind is Kind.BOOL,
    )
    return spec if default_text is None else attrs.evolve(spec, default_text=default_text)


STR, BOOL, INT, DUR = Kind.STRING, Kind.BOOL, Kind.INT, Kind.DURATION


def _etcd_security_flags() -> tuple[FlagSpec, ...]:
    """TLS and user for etcd, etcdctl's meanings; the same on nsqd and nsqlookupd
    (docs/replication.md, "Securing etcd"). All default to empty on both."""
    return (
        FlagSpec(
            "etcd-cacert",
            STR,
            default="",
            help="CA bundle (PEM) verifying etcd's certificate, with https:// endpoints (default: the system's)",
        ),
        FlagSpec(
            "etcd-cert",
            STR,
            default="",
            help="client certificate (PEM) for an etcd with --client-cert-auth (with -etcd-key)",
        ),
        FlagSpec("etcd-key", STR, default="", help="private key (PEM) of -etcd-cert"),
        FlagSpec("etcd-username", STR, default="", help="etcd user (with -etcd-password)"),
        FlagSpec(
            "cluster-leadership-username",
            STR,
            default="",
            help="Youzan's name of -etcd-username",
            dest="etcd_username",
        ),
        FlagSpec(
            "etcd-password",
            STR,
            default="",
            help="password of -etcd-username (never shown by /config, /stats or logs)",
        ),
        FlagSpec(
            "cluster-leadership-password",
            STR,
            default="",
            help="Youzan's name of -etcd-password",
            dest="etcd_password",
        ),
    )


def _logging_flags(defaults: NsqdConfig | LookupdConfig) -> tuple[FlagSpec, ...]:
    """The logging flags nsqd and nsqlookupd share, with one command's defaults."""
    return (
        FlagSpec(
            "log-level",
            STR,
            default=defaults.log_level,
            help="least severe level logged: debug, info, warn, error or fatal",
            parse=_log_level,
            default_text=defaults.log_level.upper(),
        ),
        FlagSpec(
            "log-prefix",
            STR,
            default=defaults.log_prefix,
            help="text at the start of every log line",
        ),
        FlagSpec(
            "verbose",
            BOOL,
            default=False,
            help="[deprecated] ignored; see -log-level",
            option=False,
        ),
    )


# fmt: off
NSQD_FLAGS: Final[tuple[FlagSpec, ...]] = (
    FlagSpec("version", BOOL, default=False, help="print the version and exit", option=False),
    FlagSpec("config", STR, default="", help="a TOML file of options (keys: flag names with _)", option=False),
    *_logging_flags(_D),
    _flag("node-id", INT, "node part of message IDs, in [0,1024); the default comes from the hostname",
          dest="node_id", cfg_key="id"),
    FlagSpec("worker-id", BOOL, default=False, help="[deprecated] ignored; see -node-id", option=False),
    _flag("https-address", STR, "<addr>:<port> for HTTPS clients (used when -tls-cert/-tls-key are set)"),
    _flag("http-address", STR, "<addr>:<port> for HTTP clients; empty disables HTTP"),
    _flag("tcp-address", STR, "<addr>:<port> for TCP clients; port 0 picks a free port"),
    _flag("auth-http-address", Kind.STRING_LIST, "<addr>:<port> or URL of an auth server (repeatable)",
          dest="auth_http_addresses", cfg_key="auth_http_addresses"),
    _flag("auth-http-request-method", STR, "HTTP method for auth server requests: get or post"),
    _flag("broadcast-address", STR, "address registered with nsqlookupd"),
    _flag("broadcast-tcp-port", INT, "TCP port registered with nsqlookupd (0: the bound TCP port)"),
    _flag("broadcast-http-port", INT, "HTTP port registered with nsqlookupd (0: the bound HTTP port)"),
    _flag("lookupd-tcp-address", Kind.STRING_LIST, "<addr>:<port> of an nsqlookupd (repeatable)",
          dest="lookupd_tcp_addresses", cfg_key="nsqlookupd_tcp_addresses"),
    _flag("http-client-connect-timeout", DUR, "connect timeout of outgoing HTTP requests"),
    _flag("http-client-request-timeout", DUR, "total timeout of outgoing HTTP requests"),
    _flag("topology-region", STR, "region of this node, for topology-aware consumption"),
    _flag("topology-zone", STR, "zone of this node, for topology-aware consumption"),
    _flag("data-path", STR, "directory for message logs and metadata (default: current directory)"),
    _flag("mem-queue-size", INT, "messages an #ephemeral topic or channel holds before dropping"),
    _flag("max-bytes-per-file", INT, "size in bytes at which a log segment file is rolled"),
    _flag("sync-every", INT, "writes between fsyncs of a log"),
    _flag("sync-timeout", DUR, "longest time between fsyncs of a log with writes"),
    _flag("queue-scan-worker-pool-max", INT, "accepted for nsqd compatibility (timeouts use deadlines)"),
    _flag("queue-scan-selection-count", INT, "accepted for nsqd compatibility (timeouts use deadlines)"),
    _flag("msg-timeout", DUR, "time a delivered message may go without FIN/REQ/TOUCH before redelivery"),
    _flag("max-msg-timeout", DUR, "largest msg_timeout a client may ask for"),
    _flag("max-msg-size", INT, "largest message body in bytes"),
    _flag("max-req-timeout", DUR, "longest delay for REQ and DPUB"),
    _flag("max-body-size", INT, "largest command body (MPUB, IDENTIFY, AUTH) in bytes"),
    _flag("max-heartbeat-interval", DUR, "largest heartbeat interval a client may ask for"),
    _flag("max-rdy-count", INT, "largest RDY a client may send"),
    _flag("max-output-buffer-size", INT, "largest output_buffer_size a client may ask for, in bytes"),
    _flag("max-output-buffer-timeout", DUR, "largest output_buffer_timeout a client may ask for"),
    _flag("min-output-buffer-timeout", DUR, "smallest output_buffer_timeout a client may ask for"),
    _flag("output-buffer-timeout", DUR, "default time buffered messages may wait before being written"),
    _flag("max-channel-consumers", INT, "most consumers per channel (0: unlimited)"),
    _flag("statsd-address", STR, "UDP <addr>:<port> of a statsd to push metrics to"),
    _flag("statsd-interval", DUR, "time between statsd pushes"),
    _flag("statsd-mem-stats", BOOL, "include memory statistics in statsd pushes"),
    _flag("statsd-prefix", STR, "prefix of statsd keys (%s: this node's host key)"),
    _flag("statsd-udp-packet-size", INT, "largest statsd UDP packet in bytes"),
    _flag("statsd-exclude-ephemeral", BOOL, "leave #ephemeral topics and channels out of statsd"),
    _flag("e2e-processing-latency-percentile", Kind.FLOAT_LIST,
          "end-to-end latency percentile to track, in (0,1] (repeatable or comma-separated)",
          dest="e2e_processing_latency_percentiles", cfg_key="e2e_processing_latency_percentiles"),
    _flag("e2e-processing-latency-window-time", DUR, "window of the end-to-end latency percentiles"),
    _flag("tls-cert", STR, "certificate file (PEM); with -tls-key enables TLS and HTTPS"),
    _flag("tls-key", STR, "private key file (PEM)"),
    _flag("tls-client-auth-policy", STR, "client certificates: require or require-verify"),
    _flag("tls-root-ca-file", STR, "CA file (PEM) to verify client certificates"),
    _flag("tls-required", STR, "require TLS from clients: true, false or tcp-https",
          parse=_tls_required, bool_flag=True),
    _flag("tls-min-version", STR, "oldest TLS version accepted: " + ", ".join(TLS_VERSIONS),
          parse=_tls_min_version, default_text=_D.tls_min_version),
    _flag("deflate", BOOL, "let clients negotiate deflate compression"),
    _flag("max-deflate-level", INT, "highest deflate level a client may ask for, 1..9"),
    _flag("snappy", BOOL, "let clients negotiate snappy compression"),
    _flag("enable-experiment", Kind.STRING_LIST,
          "turn on an experimental feature (repeatable): " + ", ".join(EXPERIMENTS)),
    # trionsq's own, after nsqd's
    _flag("in-memory", BOOL, "keep everything in memory and write nothing under -data-path (lost at exit)",
          dest="persist", parse=_not, bool_flag=True),
    _flag("retention", DUR, "how long consumed log segments are kept (0: deleted once every channel is done)"),
    _flag("shutdown-grace", DUR, "at SIGINT/SIGTERM, time consumers get to finish the messages they hold (a second signal stops at once)"),
    _flag("trace-log", BOOL, "log each traced message at publish and at each delivery (Youzan's trace log)"),
    _flag("tubemq-master-address", STR, "<addr>[:<port>] for TubeMQ SDKs' master calls (port 8715 if none; empty: off; needs -tubemq-broker-address)"),
    _flag("tubemq-broker-address", STR, "<addr>[:<port>] for TubeMQ SDKs' broker calls (port 8123 if none; empty: off)"),
    _flag("etcd-endpoints", Kind.STRING_LIST, "etcd client URL http(s)://<host>:<port> (repeatable or comma-separated): join a replicated cluster (docs/replication.md)"),
    _flag("cluster-leadership-addresses", Kind.STRING_LIST, "Youzan's name of -etcd-endpoints",
          dest="etcd_endpoints", cfg_key="cluster_leadership_addresses"),
    *_etcd_security_flags(),
    _flag("cluster-id", STR, "the cluster's name in etcd (with -etcd-endpoints)"),
    _flag("replication-address", STR, "<addr>:<port> followers fetch from (empty: the TCP host, a free port)"),
    _flag("cluster-lease-ttl", DUR, "etcd lease of the broker: a dead broker is replaced within it"),
    _flag("replica-lag-time", DUR, "an in-sync follower behind the leader for longer leaves the ISR"),
    _flag("lookupd-ping-interval", DUR, "time between PINGs to each nsqlookupd (nsqd: 15s), which hides a broker silent for its -inactive-producer-timeout"),
    _flag("group-rebalance-delay", DUR, "time a consumer group's membership must be still before its partitions are dealt again"),
    _flag("idempotency-window", INT, "##idempotency_key values each partition remembers to store each at most once (0: off)"),
    _flag("ttl-dead-letter", BOOL, "send messages past their TTL to their channel's dead-letter topic, when it has a max_attempts bound"),
    _flag("max-open-files", INT, "segment and delays files held open at most, least recently used closed first (0: as the open-file limit allows)"),
    _flag("admin-stream", STR, "the admin stream at /admin/stream: " + ", ".join(ADMIN_STREAM_MODES)
          + " (read-only: no actions, no message bodies; off: 404)"),
    _flag("admin-secret", STR, "secret the admin stream's actions and body samples need (not with -auth-http-address)"),
    _flag("admin-allowed-origins", Kind.STRING_LIST,
          "browser origin (<scheme>://<host>[:<port>], or *) besides the broker's own that may open the admin stream (repeatable)"),
    _flag("admin-max-subscribers", INT, "most admin streams open at once"),
)
# fmt: on
"""Every nsqd flag (defaults.md), in nsqd's order, then trionsq's own."""

_L: Final = LookupdConfig()
"""nsqlookupd's defaults, which its flags show and fall back to."""

# fmt: off
NSQLOOKUPD_FLAGS: Final[tuple[FlagSpec, ...]] = (
    FlagSpec("config", STR, default="", help="a TOML file of options (keys: flag names with _)", option=False),
    FlagSpec("version", BOOL, default=False, help="print the version and exit", option=False),
    *_logging_flags(_L),
    FlagSpec("tcp-address", STR, default=_L.tcp_address, help="<addr>:<port> for nsqd connections (TCP protocol V1)"),
    FlagSpec("http-address", STR, default=_L.http_address, help="<addr>:<port> for HTTP clients"),
    FlagSpec("broadcast-address", STR, default=_L.broadcast_address,
             help="address of this lookupd node (given to nsqd in the IDENTIFY reply)"),
    FlagSpec("inactive-producer-timeout", DUR, default=_L.inactive_producer_timeout,
             help="duration of time a producer will remain in the active list since its last ping"),
    FlagSpec("tombstone-lifetime", DUR, default=_L.tombstone_lifetime,
             help="duration of time a producer will remain tombstoned if registration remains"),
    # trionsq's own, after nsqlookupd's
    FlagSpec("etcd-endpoints", Kind.STRING_LIST, default=_L.etcd_endpoints,
             help="etcd client URL http(s)://<host>:<port> (repeatable or comma-separated): coordinate a replicated cluster"),
    FlagSpec("cluster-leadership-addresses", Kind.STRING_LIST, default=_L.etcd_endpoints,
             help="Youzan's name of -etcd-endpoints", dest="etcd_endpoints"),
    *_etcd_security_flags(),
    FlagSpec("cluster-id", STR, default=_L.cluster_id, help="the cluster's name in etcd"),
    FlagSpec("cluster-lease-ttl", DUR, default=_L.cluster_lease_ttl,
             help="etcd lease of the coordinator: a dead one is replaced within it"),
    FlagSpec("min-isr", INT, default=_L.min_isr,
             help="fewest in-sync replicas a replicated topic needs to take writes (a topic's own min_isr wins)"),
)
# fmt: on
"""nsqlookupd's flags (defaults.md), in nsqlookupd's order."""
