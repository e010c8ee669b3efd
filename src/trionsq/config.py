"""The broker's configuration: nsqd's option names and defaults (spec defaults.md).

Durations are seconds here; the command lines accept nsqd's Go syntax (``60s``,
``100ms``). Every nsqd option has a field, even where trionsq does not act on it
yet, so nsqd command lines and config files are accepted unchanged; what a field
does arrives with its issue.
"""

from __future__ import annotations

import enum
import hashlib
import socket
import zlib
from typing import TYPE_CHECKING, Final, Self, Unpack

import attrs

from .addresses import parse_origin, split_host_port
from .cluster.etcd_access import EtcdOptions, EtcdSettings, check_etcd_endpoints
from .config_values import ConfigError, address_text, address_texts, checked_fields, seconds
from .protocol.settings import ServerSettings

if TYPE_CHECKING:
    from collections.abc import Iterable, Mapping

    from .addresses import Address

__all__ = [
    "ADMIN_STREAM_MODES",
    "AUTH_HTTP_REQUEST_METHODS",
    "EXPERIMENTS",
    "LOG_LEVELS",
    "LOOPBACK_QUIET",
    "TLS_CLIENT_AUTH_POLICIES",
    "TLS_VERSIONS",
    "ConfigError",
    "NsqdConfig",
    "NsqdOptions",
    "TlsRequired",
    "check_addresses",
    "default_node_id",
    "split_host_port",
    "with_default_port",
]

LOG_LEVELS: Final = ("debug", "info", "warn", "error", "fatal")
TLS_VERSIONS: Final = ("ssl3.0", "tls1.0", "tls1.1", "tls1.2", "tls1.3")
TLS_CLIENT_AUTH_POLICIES: Final = ("", "require", "require-verify")
AUTH_HTTP_REQUEST_METHODS: Final = ("get", "post")
EXPERIMENTS: Final = ("topology-aware-consumption",)
ADMIN_STREAM_MODES: Final = ("read-write", "read-only", "off")
"""``--admin-stream``: actions and bodies too; neither; no stream at all."""


LOOPBACK_QUIET: Final = {"output_buffer_timeout": 0.001, "client_timeout": 2 * 86_400.0}
"""What :meth:`NsqdConfig.loopback` changes besides the listeners (docs/testing.md):
a 1 ms output buffer instead of nsqd's 250 ms, so a consumer with room for more gets
each message at once; and a default heartbeat once a day instead of every 30 s (a
client that asks in IDENTIFY still gets its interval), so an idle broker does not
wake for nothing: over 127.0.0.1 a peer that goes away closes its socket, which the
broker sees at once. ``output_buffer_timeout=0.25`` and ``client_timeout=60.0`` give
nsqd's back."""


class TlsRequired(enum.IntEnum):
    """``--tls-required``; the numbers are nsqd's, as its ``/config`` API shows them."""

    NO = 0
    EXCEPT_HTTP = 1
    """``tcp-https``: TCP clients must upgrade; plain HTTP stays open."""
    YES = 2


def default_node_id() -> int:
    """nsqd's default ``--node-id``: the CRC-32 of the MD5 of the hostname, mod 1024,
    so one host keeps one id across restarts without configuration."""
    digest = hashlib.md5(socket.gethostname().encode(), usedforsecurity=False).digest()
    return zlib.crc32(digest) % 1024


TUBEMQ_MASTER_PORT: Final = 8715
"""TubeMQ's default master port, for ``--tubemq-master-address`` without one."""
TUBEMQ_BROKER_PORT: Final = 8123
"""TubeMQ's default broker port, for ``--tubemq-broker-address`` without one."""


def with_default_port(address: str, port: int) -> tuple[str, int]:
    """``host[:port]`` (``[v6][:port]`` too) to a pair, ``port`` when none is given; an
    empty host means every interface.

    Raises:
        ValueError: a port that is not a number in [0, 65535].
    """
    host, colon, _ = address.rpartition(":")
    bracketed_without_port = address.startswith("[") and address.endswith("]")
    if not colon or bracketed_without_port or (host.count(":") and not host.startswith("[")):
        return address.strip("[]") or "0.0.0.0", port  # noqa: S104 - every interface
    return split_host_port(address)


def check_addresses(*given: tuple[str, str, bool]) -> None:
    """Each ``(flag, address, optional)`` names a ``host:port`` (or nothing, when
    optional).

    Raises:
        ConfigError: one line naming the first flag that does not.
    """
    for flag, address, optional in given:
        if optional and not address:
            continue
        try:
            split_host_port(address)
        except ValueError:
            raise ConfigError(
                f"--{flag} must be <addr>:<port> with a port in [0,65535], got {address!r}"
            ) from None


class Listeners:
    """What a broker's and a lookupd's configurations share: their making from the
    options the command lines resolve, and their TCP and HTTP addresses, split."""

    __slots__ = ()

    tcp_address: str
    http_address: str

    @classmethod
    def from_options(cls, options: Mapping[str, object]) -> Self:
        """Build from field name -> value (what the command lines resolve).

        Raises:
            TypeError: a name that is not a field.
        """
        return cls(**options)

    @property
    def tcp_host_port(self) -> tuple[str, int]:
        """``tcp_address`` split; an empty host means every interface."""
        return split_host_port(self.tcp_address)

    @property
    def http_host_port(self) -> tuple[str, int]:
        """``http_address`` split; an empty host means every interface (nsqd: check
        ``http_address`` first, ``""`` disables HTTP)."""
        return split_host_port(self.http_address)


@attrs.frozen(field_transformer=checked_fields)
class NsqdConfig(Listeners, EtcdSettings):
    """Options of ``nsqd`` / ``trionsq serve`` / ``serve_nsqd``; field = flag with ``_``.

    Three fields are named after their flag, not their config-file key:
    ``node_id`` (key ``id``), ``lookupd_tcp_addresses`` (key
    ``nsqlookupd_tcp_addresses``; flag ``lookupd-tcp-address``, repeatable) and
    the plural list fields of the repeatable flags ``auth-http-address`` and
    ``e2e-processing-latency-percentile``.
    """

    # identity and logging
    node_id: int = attrs.field(factory=default_node_id)
    log_level: str = "info"
    log_prefix: str = "[nsqd] "

    # listeners and cluster
    tcp_address: str = attrs.field(default="0.0.0.0:4150", converter=address_text)
    http_address: str = attrs.field(default="0.0.0.0:4151", converter=address_text)
    """``""`` disables the HTTP listener."""
    https_address: str = attrs.field(default="0.0.0.0:4152", converter=address_text)
    """Used only when ``tls_cert``/``tls_key`` are set."""
    broadcast_address: str = attrs.field(factory=socket.gethostname)
    broadcast_tcp_port: int = 0
    """0: the port the TCP listener really bound."""
    broadcast_http_port: int = 0
    """0: the port the HTTP listener really bound."""
    lookupd_tcp_addresses: tuple[str, ...] = attrs.field(default=(), converter=address_texts)
    lookupd_ping_interval: float = attrs.field(default=15.0, converter=seconds)
    """trionsq's own: time between PINGs to each lookupd (nsqd's is a fixed 15 s). A
    lookupd hides a broker it has not heard from for its inactive_producer_timeout."""
    auth_http_addresses: tuple[str, ...] = attrs.field(default=(), converter=address_texts)
    auth_http_request_method: str = "get"
    http_client_connect_timeout: float = attrs.field(default=2.0, converter=seconds)
    http_client_request_timeout: float = attrs.field(default=5.0, converter=seconds)
    topology_region: str = ""
    topology_zone: str = ""
    trace_log: bool = False
    """trionsq's own (Youzan's trace log): log each traced message at publish and
    at each delivery (``trionsq.trace`` logger)."""
    idempotency_window: int = 1_000_000
    """trionsq's own: ``##idempotency_key`` values each partition remembers (the most
    recently stored; 0 turns deduplication off). docs/extensions.md, "Idempotent
    publishing"."""
    ttl_dead_letter: bool = False
    """trionsq's own: a message past its TTL goes to its channel's dead-letter topic
    (with ``##dead_reason: ttl``) when the channel has a dead-letter bound, instead of
    being dropped. docs/extensions.md, "Message TTL"."""
    tubemq_master_address: str = attrs.field(default="", converter=address_text)
    """trionsq's own: ``<addr>[:<port>]`` of TubeMQ's master service (port 8715 when
    none is given); empty: off. docs/tubemq.md."""
    tubemq_broker_address: str = attrs.field(default="", converter=address_text)
    """trionsq's own: ``<addr>[:<port>]`` of TubeMQ's broker service (port 8123 when
    none is given); empty: off. Set both or neither."""
    cluster_id: str = "trionsq"
    """The cluster's name: its keys live under ``/trionsq/<cluster-id>/`` in etcd."""
    replication_address: str = attrs.field(default="", converter=address_text)
    """``<addr>:<port>`` where followers fetch from this broker ("": the TCP listener's
    host, a free port; etcd tells the others which)."""
    cluster_lease_ttl: float = attrs.field(default=2.0, converter=seconds)
    """Seconds the broker's etcd lease lasts without renewal: a dead broker is replaced
    as leader within it, and a leader cut off from etcd that long stops acknowledging."""
    replica_lag_time: float = attrs.field(default=5.0, converter=seconds)
    """An in-sync follower behind the leader's end for longer leaves the ISR."""
    group_rebalance_delay: float = attrs.field(default=1.0, converter=seconds)
    """trionsq's own: how long a consumer group's membership must stay unchanged
    before its partitions are dealt again (joins and departures within it count as
    one change). docs/extensions.md, "Consumer groups"."""

    # the admin stream (docs/admin.md), trionsq's own
    admin_stream: str = "read-write"
    """read-write, read-only (no actions, no message bodies in samples) or off (404)."""
    admin_secret: str = ""
    """Guards the stream's actions and body samples when AUTH is off ("": open)."""
    admin_allowed_origins: tuple[str, ...] = ()
    """Browser origins besides the broker's own (and its lookupds') that may open the
    stream (``*``: any)."""
    admin_max_subscribers: int = 100
    """Streams open at once (both listeners); more are closed with 1013."""

    # storage
    data_path: str = ""
    """``""``: the current directory."""
    retention: float = attrs.field(default=0.0, converter=seconds)
    """trionsq's own: keep consumed segments this many seconds (0: delete when every
    durable channel has confirmed them)."""
    shutdown_grace: float = attrs.field(default=5.0, converter=seconds)
    """trionsq's own: at SIGINT/SIGTERM, deliveries stop and consumers get this many
    seconds to finish what they hold before the broker stops (nsqd: none)."""
    persist: bool = True
    """Keep messages, channel positions and metadata under ``data_path`` (nsqd always
    does). False: everything in memory, nothing written (tests, embedding)."""
    mem_queue_size: int = 10_000
    max_bytes_per_file: int = 104_857_600
    sync_every: int = 2500
    sync_timeout: float = attrs.field(default=2.0, converter=seconds)
    max_open_files: int = 0
    """trionsq's own: segment and delays files held open at most (RocksDB's
    ``max_open_files``); the least recently used is closed for another and opened
    again when used. 0: as many as the open-file limit leaves after the reserve and
    the connections (docs/storage.md "Descriptors")."""

    # timeouts scanning (nsqd's queue scan loop; trionsq uses deadlines, design §5)
    queue_scan_worker_pool_max: int = 4
    queue_scan_selection_count: int = 20
    queue_scan_interval: float = attrs.field(default=0.1, converter=seconds)
    """No flag in nsqd."""
    queue_scan_refresh_interval: float = attrs.field(default=5.0, converter=seconds)
    """No flag in nsqd."""
    queue_scan_dirty_percent: float = 0.25
    """No flag in nsqd."""

    # messages and commands
    msg_timeout: float = attrs.field(default=60.0, converter=seconds)
    max_msg_timeout: float = attrs.field(default=900.0, converter=seconds)
    max_msg_size: int = 1_048_576
    max_body_size: int = 5_242_880
    max_req_timeout: float = attrs.field(default=3600.0, converter=seconds)
    client_timeout: float = attrs.field(default=60.0, converter=seconds)
    """No flag in nsqd; the default heartbeat interval is half of it."""

    # limits a client may negotiate
    max_heartbeat_interval: float = attrs.field(default=60.0, converter=seconds)
    max_rdy_count: int = 2500
    max_output_buffer_size: int = 65_536
    max_output_buffer_timeout: float = attrs.field(default=30.0, converter=seconds)
    min_output_buffer_timeout: float = attrs.field(default=0.010, converter=seconds)
    """nsqd says 25ms; 10ms is the floor Youzan's nsqd keeps (it has no flag and raises
    1-9 ms to 10), so every Youzan and upstream client's IDENTIFY is accepted
    (docs/protocol.md, "IDENTIFY defaults")."""
    output_buffer_timeout: float = attrs.field(default=0.25, converter=seconds)
    max_channel_consumers: int = 0
    """0: unlimited."""

    # statsd
    statsd_address: str = attrs.field(default="", converter=address_text)
    statsd_prefix: str = "nsq.%s"
    statsd_interval: float = attrs.field(default=60.0, converter=seconds)
    statsd_mem_stats: bool = True
    statsd_udp_packet_size: int = 508
    statsd_exclude_ephemeral: bool = False

    # end-to-end latency
    e2e_processing_latency_percentiles: tuple[float, ...] = ()
    e2e_processing_latency_window_time: float = attrs.field(default=600.0, converter=seconds)

    # TLS
    tls_cert: str = ""
    tls_key: str = ""
    tls_client_auth_policy: str = ""
    tls_root_ca_file: str = ""
    tls_required: TlsRequired = TlsRequired.NO
    tls_min_version: str = "tls1.0"

    # compression
    deflate: bool = True
    max_deflate_level: int = 6
    snappy: bool = True

    enable_experiment: tuple[str, ...] = ()

    @classmethod
    def loopback(cls, **changes: Unpack[NsqdOptions]) -> NsqdConfig:
        """Every listener on 127.0.0.1 with a free port, in memory unless a
        ``data_path`` is given, delivering at once and sending heartbeats daily unless
        a client asks for more (:data:`LOOPBACK_QUIET`): for tests and embedding."""
        options: dict[str, object] = {
            "tcp_address": "127.0.0.1:0",
            "http_address": "127.0.0.1:0",
            "https_address": "127.0.0.1:0",
            "persist": "data_path" in changes,
            **LOOPBACK_QUIET,
        }
        options.update(changes)
        return cls.from_options(options)

    @property
    def https_host_port(self) -> tuple[str, int]:
        """``https_address`` split; check ``tls_enabled`` and ``https_address`` first."""
        return split_host_port(self.https_address)

    @property
    def tubemq_master_host_port(self) -> tuple[str, int]:
        """``tubemq_master_address`` split, TubeMQ's master port when it has none."""
        return with_default_port(self.tubemq_master_address, TUBEMQ_MASTER_PORT)

    @property
    def tubemq_broker_host_port(self) -> tuple[str, int]:
        """``tubemq_broker_address`` split, TubeMQ's broker port when it has none."""
        return with_default_port(self.tubemq_broker_address, TUBEMQ_BROKER_PORT)

    @property
    def cluster_enabled(self) -> bool:
        """Whether the broker replicates through etcd (``--etcd-endpoints``)."""
        return bool(self.etcd_endpoints)

    @property
    def tubemq_enabled(self) -> bool:
        return bool(self.tubemq_master_address and self.tubemq_broker_address)

    @property
    def tls_enabled(self) -> bool:
        """A certificate is configured: IDENTIFY may offer TLS and HTTPS listens."""
        return bool(self.tls_cert and self.tls_key)

    @property
    def effective_tls_required(self) -> TlsRequired:
        """nsqd turns a client-certificate policy into "TLS required"."""
        if self.tls_client_auth_policy and self.tls_required == TlsRequired.NO:
            return TlsRequired.YES
        return self.tls_required

    def validate(self) -> None:
        """Refuse what nsqd refuses at startup (defaults.md), before anything listens.

        Raises:
            ConfigError: one line naming the flag and the offending value.
        """
        check_addresses(
            ("tcp-address", self.tcp_address, False),
            ("http-address", self.http_address, True),
            ("https-address", self.https_address, True),
        )
        self._validate_tubemq()
        if not 0 <= self.node_id < 1024:
            raise ConfigError(f"--node-id must be in [0,1024), got {self.node_id}")
        if not 1 <= self.max_deflate_level <= 9:
            raise ConfigError(f"--max-deflate-level must be in [1,9], got {self.max_deflate_level}")
        if self.log_level not in LOG_LEVELS:
            raise ConfigError(
                f"--log-level must be one of {', '.join(LOG_LEVELS)}, got {self.log_level!r}"
            )
        if self.auth_http_request_method not in AUTH_HTTP_REQUEST_METHODS:
            raise ConfigError(
                "--auth-http-request-method must be get or post,"
                f" got {self.auth_http_request_method!r}"
            )
        if self.lookupd_ping_interval <= 0:
            raise ConfigError(
                f"--lookupd-ping-interval must be more than 0, got {self.lookupd_ping_interval}"
            )
        if self.group_rebalance_delay < 0:
            raise ConfigError(
                f"--group-rebalance-delay must be 0 or more, got {self.group_rebalance_delay}"
            )
        if self.max_open_files < 0:
            raise ConfigError(f"--max-open-files must be 0 or more, got {self.max_open_files}")
        self._validate_cluster()
        if self.idempotency_window < 0:
            raise ConfigError(
                f"--idempotency-window must be 0 or more, got {self.idempotency_window}"
            )
        self._validate_admin()
        for percentile in self.e2e_processing_latency_percentiles:
            if not 0 < percentile <= 1:
                raise ConfigError(
                    "--e2e-processing-latency-percentile values must be in (0,1],"
                    f" got {percentile!r}"
                )
        self._validate_tls()

    def _validate_cluster(self) -> None:
        if not self.etcd_endpoints:
            return
        check_etcd_endpoints(self.etcd_urls, self.etcd_access)
        if not self.cluster_id or "/" in self.cluster_id:
            raise ConfigError(f"--cluster-id must be a name without '/', got {self.cluster_id!r}")
        if self.replication_address:
            try:
                split_host_port(self.replication_address)
            except ValueError:
                raise ConfigError(
                    f"--replication-address must be <addr>:<port>, got {self.replication_address!r}"
                ) from None
        if self.cluster_lease_ttl < 1:
            raise ConfigError(
                f"--cluster-lease-ttl must be 1s or more, got {self.cluster_lease_ttl}s"
            )
        if self.replica_lag_time <= 0:
            raise ConfigError(f"--replica-lag-time must be positive, got {self.replica_lag_time}s")

    def _validate_admin(self) -> None:
        if self.admin_stream not in ADMIN_STREAM_MODES:
            raise ConfigError(
                f"--admin-stream must be one of {', '.join(ADMIN_STREAM_MODES)},"
                f" got {self.admin_stream!r}"
            )
        if self.admin_max_subscribers < 1:
            raise ConfigError(
                f"--admin-max-subscribers must be 1 or more, got {self.admin_max_subscribers}"
            )
        if self.admin_secret and self.auth_http_addresses:
            raise ConfigError(
                "--admin-secret cannot be used with --auth-http-address: with AUTH on, the"
                " auth server's grants guard the admin stream's actions"
            )
        for origin in self.admin_allowed_origins:
            if origin != "*" and parse_origin(origin) is None:
                raise ConfigError(
                    "--admin-allowed-origins must be <scheme>://<host>[:<port>] or *,"
                    f" got {origin!r}"
                )

    def _validate_tubemq(self) -> None:
        if bool(self.tubemq_master_address) != bool(self.tubemq_broker_address):
            raise ConfigError(
                "--tubemq-master-address and --tubemq-broker-address must be given together"
            )
        for flag, address, port in (
            ("tubemq-master-address", self.tubemq_master_address, TUBEMQ_MASTER_PORT),
            ("tubemq-broker-address", self.tubemq_broker_address, TUBEMQ_BROKER_PORT),
        ):
            try:
                with_default_port(address, port)
            except ValueError:
                raise ConfigError(
                    f"--{flag} must be <addr>[:<port>] with a port in [0,65535], got {address!r}"
                ) from None

    def _validate_tls(self) -> None:
        if bool(self.tls_cert) != bool(self.tls_key):
            raise ConfigError("--tls-cert and --tls-key must be given together")
        if self.tls_min_version not in TLS_VERSIONS:
            raise ConfigError(
                f"--tls-min-version must be one of {', '.join(TLS_VERSIONS)},"
                f" got {self.tls_min_version!r}"
            )
        if self.tls_client_auth_policy not in TLS_CLIENT_AUTH_POLICIES:
            raise ConfigError(
                "--tls-client-auth-policy must be require or require-verify,"
                f" got {self.tls_client_auth_policy!r}"
            )
        if self.effective_tls_required != TlsRequired.NO and not self.tls_enabled:
            cause = "--tls-client-auth-policy" if self.tls_client_auth_policy else "--tls-required"
            raise ConfigError(f"{cause} needs TLS, but --tls-cert and --tls-key are not set")

    def server_settings(self, version: str) -> ServerSettings:
        """What the protocol state machine needs (AUTH is on with an auth server)."""

        def ms(seconds: float) -> int:
            return round(seconds * 1000)

        return ServerSettings(
            version=version,
            max_msg_size=self.max_msg_size,
            max_body_size=self.max_body_size,
            max_rdy_count=self.max_rdy_count,
            max_req_timeout_ms=ms(self.max_req_timeout),
            msg_timeout_ms=ms(self.msg_timeout),
            max_msg_timeout_ms=ms(self.max_msg_timeout),
            client_timeout_ms=ms(self.client_timeout),
            max_heartbeat_interval_ms=ms(self.max_heartbeat_interval),
            max_output_buffer_size=self.max_output_buffer_size,
            output_buffer_timeout_ms=ms(self.output_buffer_timeout),
            min_output_buffer_timeout_ms=ms(self.min_output_buffer_timeout),
            max_output_buffer_timeout_ms=ms(self.max_output_buffer_timeout),
            deflate=self.deflate,
            max_deflate_level=self.max_deflate_level,
            snappy=self.snappy,
            tls_available=self.tls_enabled,
            tls_required=self.effective_tls_required is not TlsRequired.NO,
            auth_enabled=bool(self.auth_http_addresses),
        )


class NsqdOptions(EtcdOptions, total=False):
    """Every :class:`NsqdConfig` field as an optional keyword, typed as the
    constructor takes it (durations as seconds or Go strings, addresses in either
    shape): what :meth:`NsqdConfig.loopback` takes, so mypy catches a misspelt or
    mistyped option. tests/unit/test_typed_options.py keeps it in step with the class."""

    node_id: int
    log_level: str
    log_prefix: str
    tcp_address: Address
    http_address: Address
    https_address: Address
    broadcast_address: str
    broadcast_tcp_port: int
    broadcast_http_port: int
    lookupd_tcp_addresses: Address | Iterable[Address]
    lookupd_ping_interval: float | str
    auth_http_addresses: Address | Iterable[Address]
    auth_http_request_method: str
    http_client_connect_timeout: float | str
    http_client_request_timeout: float | str
    topology_region: str
    topology_zone: str
    trace_log: bool
    idempotency_window: int
    ttl_dead_letter: bool
    tubemq_master_address: Address
    tubemq_broker_address: Address
    cluster_id: str
    replication_address: Address
    cluster_lease_ttl: float | str
    replica_lag_time: float | str
    group_rebalance_delay: float | str
    admin_stream: str
    admin_secret: str
    admin_allowed_origins: tuple[str, ...]
    admin_max_subscribers: int
    data_path: str
    retention: float | str
    shutdown_grace: float | str
    persist: bool
    mem_queue_size: int
    max_bytes_per_file: int
    sync_every: int
    sync_timeout: float | str
    max_open_files: int
    queue_scan_worker_pool_max: int
    queue_scan_selection_count: int
    queue_scan_interval: float | str
    queue_scan_refresh_interval: float | str
    queue_scan_dirty_percent: float
    msg_timeout: float | str
    max_msg_timeout: float | str
    max_msg_size: int
    max_body_size: int
    max_req_timeout: float | str
    client_timeout: float | str
    max_heartbeat_interval: float | str
    max_rdy_count: int
    max_output_buffer_size: int
    max_output_buffer_timeout: float | str
    min_output_buffer_timeout: float | str
    output_buffer_timeout: float | str
    max_channel_consumers: int
    statsd_address: Address
    statsd_prefix: str
    statsd_interval: float | str
    statsd_mem_stats: bool
    statsd_udp_packet_size: int
    statsd_exclude_ephemeral: bool
    e2e_processing_latency_percentiles: tuple[float, ...]
    e2e_processing_latency_window_time: float | str
    tls_cert: str
    tls_key: str
    tls_client_auth_policy: str
    tls_root_ca_file: str
    tls_required: TlsRequired
    tls_min_version: str
    deflate: bool
    max_deflate_level: int
    snappy: bool
    enable_experiment: tuple[str, ...]
