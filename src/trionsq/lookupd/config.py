"""nsqlookupd's options (spec defaults.md, "nsqlookupd (upstream)") as one frozen value."""

from __future__ import annotations

import socket
from typing import TYPE_CHECKING, Unpack

import attrs

from ..cluster.etcd_access import EtcdOptions, EtcdSettings, check_etcd_endpoints
from ..config import LOG_LEVELS, ConfigError, Listeners, check_addresses
from ..config_values import address_text, checked_fields, seconds

if TYPE_CHECKING:
    from ..addresses import Address

__all__ = ["LookupdConfig", "LookupdOptions"]


@attrs.frozen(field_transformer=checked_fields)
class LookupdConfig(Listeners, EtcdSettings):
    """Options of ``nsqlookupd`` / ``trionsq lookupd`` / ``serve_lookupd``.

    Field = flag name with ``_``; durations are seconds.
    """

    tcp_address: str = attrs.field(default="0.0.0.0:4160", converter=address_text)
    """Where nsqd instances connect (TCP protocol V1); port 0 picks a free port."""
    http_address: str = attrs.field(default="0.0.0.0:4161", converter=address_text)
    """Where consumers and nsqadmin ask (``/lookup``, ``/nodes`` ...)."""
    broadcast_address: str = attrs.field(factory=socket.gethostname)
    """The address this lookupd gives in its IDENTIFY reply."""
    inactive_producer_timeout: float = attrs.field(default=300.0, converter=seconds)
    """Producers not heard from (IDENTIFY or PING) for longer are hidden from
    ``/lookup`` and ``/nodes``; nothing is deleted, a later PING shows them again."""
    tombstone_lifetime: float = attrs.field(default=45.0, converter=seconds)
    """How long ``/topic/tombstone`` hides a producer of a topic from ``/lookup``."""
    log_level: str = "info"
    log_prefix: str = "[nsqlookupd] "
    cluster_id: str = "trionsq"
    cluster_lease_ttl: float = attrs.field(default=2.0, converter=seconds)
    """The coordinator's etcd lease: a dead coordinator is replaced within it."""
    min_isr: int = 1
    """Fewest in-sync replicas a replicated topic needs to take writes, unless its
    ``/topic/create`` gives ``min_isr`` (at most its replica count)."""

    @classmethod
    def loopback(cls, **changes: Unpack[LookupdOptions]) -> LookupdConfig:
        """Both listeners on 127.0.0.1 with a free port, and brokers kept active for a
        day without a PING (a broker that goes away closes its connection, which
        unregisters it at once): for tests and embedding."""
        options: dict[str, object] = {
            "tcp_address": "127.0.0.1:0",
            "http_address": "127.0.0.1:0",
            "broadcast_address": "127.0.0.1",
            "inactive_producer_timeout": 86_400.0,
        }
        options.update(changes)
        return cls.from_options(options)

    def validate(self) -> None:
        """Refuse what cannot run, before anything listens.

        Raises:
            ConfigError: one line naming the flag and the offending value.
        """
        check_addresses(
            ("tcp-address", self.tcp_address, False), ("http-address", self.http_address, False)
        )
        if self.log_level not in LOG_LEVELS:
            raise ConfigError(
                f"--log-level must be one of {', '.join(LOG_LEVELS)}, got {self.log_level!r}"
            )
        if self.min_isr < 1:
            raise ConfigError(f"--min-isr must be at least 1, got {self.min_isr}")
        if self.etcd_endpoints:
            check_etcd_endpoints(self.etcd_urls, self.etcd_access)
        if self.etcd_endpoints and self.cluster_lease_ttl < 1:
            raise ConfigError(
                f"--cluster-lease-ttl must be 1s or more, got {self.cluster_lease_ttl}s"
            )
        for flag, duration in (
            ("inactive-producer-timeout", self.inactive_producer_timeout),
            ("tombstone-lifetime", self.tombstone_lifetime),
        ):
            if duration < 0:
                raise ConfigError(f"--{flag} must not be negative, got {duration}s")


class LookupdOptions(EtcdOptions, total=False):
    """Every :class:`LookupdConfig` field as an optional keyword, as the constructor
    takes it: what :meth:`LookupdConfig.loopback` takes (typed, so mypy catches a
    misspelt option). tests/unit/test_typed_options.py keeps it in step."""

    tcp_address: Address
    http_address: Address
    broadcast_address: str
    inactive_producer_timeout: float | str
    tombstone_lifetime: float | str
    log_level: str
    log_prefix: str
    cluster_id: str
    cluster_lease_ttl: float | str
    min_isr: int
