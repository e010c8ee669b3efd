"""A real etcd on loopback in a directory of its own, for tests and benchmarks.

Debian's ``etcd-server`` (the Makefile installs it, as it installs chromium) is
started with every member's client and peer listener on 127.0.0.1 and a free
port; :func:`start_etcd` returns once each member answers ``/health``. Blocking
code (``subprocess``), so pytest's synchronous module-scoped fixtures and the
benchmark scripts can both use it.

With :class:`EtcdTls` files the client listeners speak TLS and ask for client
certificates (``--client-cert-auth``); :meth:`EtcdServer.enable_auth` then turns
on etcd's users, as an operator does with etcdctl.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import socket
import ssl
import subprocess
import time
import urllib.error
import urllib.request
from pathlib import Path
from typing import Final

import attrs
import orjson

__all__ = [
    "ETCD_BINARY",
    "EtcdMember",
    "EtcdServer",
    "EtcdTls",
    "end_process",
    "etcd_available",
    "free_port",
    "start_etcd",
]

ETCD_BINARY: Final = os.environ.get("TRIONSQ_ETCD", "etcd")
START_TIMEOUT: Final = 30.0


def etcd_available() -> bool:
    """Whether an ``etcd`` binary is on the PATH (``make unit`` installs one)."""
    return shutil.which(ETCD_BINARY) is not None


def free_port() -> int:
    """A free loopback TCP port (free now: a process started next binds it)."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


def end_process(process: subprocess.Popen[bytes], sig: int, *, timeout: float) -> None:
    """Send ``sig`` (SIGTERM: stop; SIGKILL: a crash) and reap the process, killing it
    if it has not gone within ``timeout`` seconds."""
    with contextlib.suppress(ProcessLookupError):
        process.send_signal(sig)
    try:
        process.wait(timeout=timeout)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait()


@attrs.frozen
class EtcdTls:
    """PEM files for an etcd that serves TLS and wants client certificates: the CA
    that signed both sides, the server's pair, and a client pair."""

    ca: Path
    server_cert: Path
    server_key: Path
    client_cert: Path
    client_key: Path

    @property
    def server_arguments(self) -> list[str]:
        """etcd's flags for TLS on the client listener, client certificates required."""
        return [
            f"--cert-file={self.server_cert}",
            f"--key-file={self.server_key}",
            f"--trusted-ca-file={self.ca}",
            "--client-cert-auth",
        ]

    @property
    def client_flags(self) -> tuple[str, ...]:
        """trionsq's flags to reach it."""
        return (
            f"--etcd-cacert={self.ca}",
            f"--etcd-cert={self.client_cert}",
            f"--etcd-key={self.client_key}",
        )

    def client_context(self) -> ssl.SSLContext:
        """A client context trusting the CA and showing the client certificate."""
        context = ssl.create_default_context(cafile=str(self.ca))
        context.load_cert_chain(self.client_cert, self.client_key)
        return context


@attrs.define
class EtcdMember:
    """One etcd process: its name, directory, ports and (while running) process."""

    name: str
    directory: Path
    client_port: int
    peer_port: int
    initial_cluster: str
    host: str = "127.0.0.1"
    prefix: tuple[str, ...] = ()
    """What the command runs under (e.g. ``ip netns exec NS``: another network namespace)."""
    process: subprocess.Popen[bytes] | None = None
    started_once: bool = False
    tls: EtcdTls | None = None
    extra: tuple[str, ...] = ()
    """More etcd flags (``--auth-token-ttl=1``...)."""

    @property
    def url(self) -> str:
        """The client URL (``http(s)://<host>:port``)."""
        scheme = "https" if self.tls is not None else "http"
        return f"{scheme}://{self.host}:{self.client_port}"

    def start(self) -> None:
        """Start (or restart, keeping its data) this member."""
        arguments = [
            *self.prefix,
            ETCD_BINARY,
            f"--name={self.name}",
            f"--data-dir={self.directory / 'data'}",
            f"--listen-client-urls={self.url}",
            f"--advertise-client-urls={self.url}",
            f"--listen-peer-urls=http://{self.host}:{self.peer_port}",
            f"--initial-advertise-peer-urls=http://{self.host}:{self.peer_port}",
            f"--initial-cluster={self.initial_cluster}",
            f"--initial-cluster-state={'existing' if self.started_once else 'new'}",
            "--heartbeat-interval=50",
            "--election-timeout=500",
            *(self.tls.server_arguments if self.tls is not None else ()),
            *self.extra,
        ]
        self.directory.mkdir(parents=True, exist_ok=True)
        with open(self.directory / "etcd.log", "ab") as log:
            self.process = subprocess.Popen(arguments, stdout=log, stderr=subprocess.STDOUT)  # noqa: S603 - our own arguments
        self.started_once = True

    def healthy(self) -> bool:
        """Whether the member answers ``/health`` with ``true``."""
        context = self.tls.client_context() if self.tls is not None else None
        try:
            with urllib.request.urlopen(f"{self.url}/health", timeout=1, context=context) as reply:  # noqa: S310 - loopback
                return b'"true"' in reply.read()
        except (urllib.error.URLError, OSError, ValueError):
            return False

    def gateway(self, path: str, request: dict[str, object], token: str = "") -> dict[str, object]:
        """POST ``request`` to etcd's JSON gateway (as etcdctl would ask), its reply.

        Raises:
            urllib.error.HTTPError: etcd refused it.
        """
        post = urllib.request.Request(  # noqa: S310 - our own loopback URL
            f"{self.url}{path}", data=orjson.dumps(request), method="POST"
        )
        if token:
            post.add_header("Authorization", token)
        context = self.tls.client_context() if self.tls is not None else None
        try:
            with urllib.request.urlopen(post, timeout=5, context=context) as reply:  # noqa: S310 - loopback
                answer: dict[str, object] = orjson.loads(reply.read())
                return answer
        except urllib.error.HTTPError as error:
            error.close()  # its socket, else left to the garbage collector
            raise

    def stop(self, sig: int = signal.SIGTERM) -> None:
        """Stop the process (SIGKILL for a crash) and wait for it."""
        if self.process is None:
            return
        end_process(self.process, sig, timeout=10)
        self.process = None


@attrs.define
class EtcdServer:
    """A running etcd of one or more members."""

    members: list[EtcdMember]

    @property
    def endpoints(self) -> list[str]:
        """Every member's client URL."""
        return [member.url for member in self.members]

    def wait_healthy(self, timeout: float = START_TIMEOUT) -> None:
        """Block until every running member is healthy.

        Raises:
            RuntimeError: a member exited or stayed unhealthy past ``timeout``.
        """
        deadline = time.monotonic() + timeout
        for member in self.members:
            if member.process is None:
                continue
            while not member.healthy():
                if member.process.poll() is not None:
                    log = (member.directory / "etcd.log").read_text(errors="replace")[-2000:]
                    raise RuntimeError(f"etcd {member.name} exited: {log}")
                if time.monotonic() > deadline:
                    raise RuntimeError(f"etcd {member.name} not healthy after {timeout}s")
                time.sleep(0.05)

    def enable_auth(self, password: str) -> None:
        """Add user ``root`` with ``password`` and role ``root``, then turn on etcd's
        authentication (what ``etcdctl user add root; auth enable`` does)."""
        member = self.members[0]
        member.gateway("/v3/auth/user/add", {"name": "root", "password": password})
        member.gateway("/v3/auth/role/add", {"name": "root"})
        member.gateway("/v3/auth/user/grant", {"user": "root", "role": "root"})
        member.gateway("/v3/auth/enable", {})

    def token(self, password: str) -> str:
        """A token of user ``root`` (for changes a test makes as an operator)."""
        reply = self.members[0].gateway(
            "/v3/auth/authenticate", {"name": "root", "password": password}
        )
        return str(reply["token"])

    def stop(self) -> None:
        """Stop every member."""
        for member in self.members:
            member.stop()

    def start(self) -> None:
        """Start every stopped member again (keeping its data), and wait until healthy.

        Raises:
            RuntimeError: as :meth:`wait_healthy`.
        """
        for member in self.members:
            if member.process is None:
                member.start()
        self.wait_healthy()


def start_etcd(
    directory: Path,
    *,
    members: int = 1,
    host: str = "127.0.0.1",
    prefix: tuple[str, ...] = (),
    tls: EtcdTls | None = None,
    extra: tuple[str, ...] = (),
) -> EtcdServer:
    """Start an etcd of ``members`` members under ``directory`` and wait until healthy;
    on loopback (free ports), or on ``host`` run under ``prefix`` (another network
    namespace: etcd's own ports there); serving TLS with ``tls``, with ``extra`` flags."""
    names = [f"m{i}" for i in range(members)]
    if host == "127.0.0.1":
        ports = [(free_port(), free_port()) for _ in names]
    else:
        ports = [(2379 + 10 * i, 2380 + 10 * i) for i, _ in enumerate(names)]
    initial = ",".join(
        f"{n}=http://{host}:{peer}" for n, (_, peer) in zip(names, ports, strict=True)
    )
    server = EtcdServer(
        [
            EtcdMember(
                name, directory / name, client, peer, initial, host, prefix, tls=tls, extra=extra
            )
            for name, (client, peer) in zip(names, ports, strict=True)
        ]
    )
    for member in server.members:
        member.start()
    try:
        server.wait_healthy()
    except RuntimeError:
        server.stop()
        raise
    return server
