"""A replicated cluster of real processes on one machine: etcd, a lookupd, brokers.

For the failover tests and benchmarks (and for trying replication by hand): every
process is ``trionsq serve`` / ``trionsq lookupd`` started as a subprocess with
fixed loopback ports, so a broker killed with SIGKILL comes back under the same
identity (``<broadcast address>:<TCP port>``) and data directory. Blocking code.
"""

from __future__ import annotations

import shutil
import signal
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path
from typing import Final

import attrs

from .etcd_process import EtcdServer, end_process, free_port

__all__ = ["BrokerProcess", "LocalCluster"]

TRIONSQ: Final = str(Path(sys.executable).with_name("trionsq"))
START_TIMEOUT: Final = 30.0


def _wait_http(
    port: int, path: str, process: subprocess.Popen[bytes], timeout: float, host: str = "127.0.0.1"
) -> None:
    deadline = time.monotonic() + timeout
    while True:
        try:
            with urllib.request.urlopen(f"http://{host}:{port}{path}", timeout=1):
                if process.poll() is None:  # else another process holds the port
                    return
        except (urllib.error.URLError, OSError):
            pass
        if process.poll() is not None:
            raise RuntimeError(f"process exited with {process.returncode} before answering {path}")
        if time.monotonic() > deadline:
            raise RuntimeError(f"no answer on :{port}{path} within {timeout}s")
        time.sleep(0.02)


@attrs.define
class BrokerProcess:
    """One broker: its ports, directory and (while running) process."""

    name: str
    tcp_port: int
    http_port: int
    directory: Path
    arguments: list[str]
    host: str = "127.0.0.1"
    prefix: tuple[str, ...] = ()
    """What the command runs under (``ip netns exec NS``: another network namespace)."""
    process: subprocess.Popen[bytes] | None = None

    @property
    def broker_id(self) -> str:
        """Its identity in etcd."""
        return f"{self.host}:{self.tcp_port}"

    def start(self) -> None:
        """Start (or restart) and wait until its HTTP answers."""
        self.directory.mkdir(parents=True, exist_ok=True)
        with open(self.directory / "broker.log", "ab") as log:
            self.process = subprocess.Popen(  # noqa: S603 - our own arguments
                [*self.prefix, TRIONSQ, "serve", *self.arguments],
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
            )
        _wait_http(self.http_port, "/ping", self.process, START_TIMEOUT, self.host)

    def kill(self, sig: int = signal.SIGKILL) -> None:
        """Send ``sig`` (SIGKILL: a crash) and reap it."""
        if self.process is None:
            return
        end_process(self.process, sig, timeout=15)
        self.process = None

    def wipe(self) -> None:
        """Remove its data directory (a lost disk); the broker must be stopped."""
        shutil.rmtree(self.directory / "data", ignore_errors=True)


@attrs.define
class LocalCluster:
    """etcd (given), one lookupd and ``brokers`` brokers under ``directory``."""

    directory: Path
    etcd: EtcdServer
    cluster_id: str = "local"
    brokers: list[BrokerProcess] = attrs.Factory(list)
    lookupd: subprocess.Popen[bytes] | None = None
    lookupd_http: int = 0
    lookupd_tcp: int = 0
    lease_ttl: str = "2s"
    lookupd_host: str = "127.0.0.1"
    """Where the lookupd listens (it runs in this process's network namespace)."""
    etcd_flags: tuple[str, ...] = ()
    """More flags for etcd, the lookupd's and each broker's (TLS files, user)."""
    open_file_limit: int = 0
    """RLIMIT_NOFILE (soft and hard) each broker runs under, through ``prlimit``
    (0: this process's)."""

    def start(
        self,
        count: int,
        *,
        extra: tuple[str, ...] = (),
        hosts: tuple[tuple[str, tuple[str, ...]], ...] = (),
    ) -> None:
        """The lookupd, then ``count`` brokers (on loopback, free ports; or on
        ``hosts``: (address, command prefix) each, ports 4150/4151)."""
        endpoints = ",".join(self.etcd.endpoints)
        self.lookupd_http, self.lookupd_tcp = free_port(), free_port()
        self.start_lookupd()
        for number in range(count):
            host, prefix = hosts[number] if hosts else ("127.0.0.1", ())
            if self.open_file_limit:
                limit = self.open_file_limit
                prefix = (*prefix, "prlimit", f"--nofile={limit}:{limit}", "--")
            tcp, http = (free_port(), free_port()) if not hosts else (4150, 4151)
            directory = self.directory / f"broker{number}"
            arguments = [
                f"--tcp-address={host}:{tcp}",
                f"--http-address={host}:{http}",
                f"--broadcast-address={host}",
                f"--data-path={directory / 'data'}",
                f"--etcd-endpoints={endpoints}",
                f"--cluster-id={self.cluster_id}",
                f"--cluster-lease-ttl={self.lease_ttl}",
                f"--lookupd-tcp-address={self.lookupd_host}:{self.lookupd_tcp}",
                "--log-level=info",
                *self.etcd_flags,
                *extra,
            ]
            broker = BrokerProcess(f"broker{number}", tcp, http, directory, arguments, host, prefix)
            (directory / "data").mkdir(parents=True, exist_ok=True)
            self.brokers.append(broker)
        for broker in self.brokers:
            broker.start()

    def start_lookupd(self) -> None:
        """Start (or restart, on the same ports) the lookupd and wait until it answers."""
        endpoints = ",".join(self.etcd.endpoints)
        with open(self.directory / "lookupd.log", "ab") as log:
            self.lookupd = subprocess.Popen(  # noqa: S603 - our own arguments
                [
                    TRIONSQ,
                    "lookupd",
                    f"--http-address={self.lookupd_host}:{self.lookupd_http}",
                    f"--tcp-address={self.lookupd_host}:{self.lookupd_tcp}",
                    f"--broadcast-address={self.lookupd_host}",
                    f"--etcd-endpoints={endpoints}",
                    f"--cluster-id={self.cluster_id}",
                    f"--cluster-lease-ttl={self.lease_ttl}",
                    *self.etcd_flags,
                ],
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
            )
        _wait_http(self.lookupd_http, "/ping", self.lookupd, START_TIMEOUT, self.lookupd_host)

    def kill_lookupd(self, sig: int = signal.SIGKILL) -> None:
        """Send the lookupd ``sig`` (SIGKILL: a crash) and reap it."""
        if self.lookupd is not None:
            end_process(self.lookupd, sig, timeout=10)
            self.lookupd = None

    def by_id(self, broker_id: str) -> BrokerProcess:
        """The broker etcd names ``broker_id``."""
        return next(b for b in self.brokers if b.broker_id == broker_id)

    def stop(self) -> None:
        """Stop every process (SIGTERM, then SIGKILL if slow)."""
        for broker in self.brokers:
            broker.kill(signal.SIGTERM)
        self.kill_lookupd(signal.SIGTERM)
