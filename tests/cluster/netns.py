"""Network namespaces made by a test: hosts on a bridge of their own, cut and healed.

Every address is the test's own: a hub namespace holds a bridge, each host is a
namespace with one veth pair into it and an address of a private /24 that exists
only inside these namespaces (nothing is added to the namespace the test runs in).
A host is cut off from others with blackhole routes in its own namespace (no
iptables needed), and healed by removing them. Needs root (CI and developers run
as root here); everything is removed at the end.
"""

from __future__ import annotations

import contextlib
import secrets
import subprocess
from typing import TYPE_CHECKING

import attrs

if TYPE_CHECKING:
    from collections.abc import Iterator, Sequence

__all__ = ["Sandbox", "sandbox"]


def _ip(*arguments: str) -> None:
    subprocess.run(["ip", *arguments], check=True, capture_output=True)  # noqa: S603, S607


@attrs.define
class Sandbox:
    """Hosts by name: their namespace and address."""

    tag: str
    subnet: str
    """The first three octets, e.g. ``10.235.17``."""
    hosts: dict[str, tuple[str, str]] = attrs.Factory(dict)
    """name -> (namespace, address)."""

    @property
    def hub(self) -> str:
        return f"tq{self.tag}hub"

    def add(self, name: str, number: int) -> str:
        """A host ``name`` at ``<subnet>.<number>``; returns its address."""
        namespace = f"tq{self.tag}{name}"
        address = f"{self.subnet}.{number}"
        outside, inside = f"tq{self.tag}{number}a", f"tq{self.tag}{number}b"
        _ip("netns", "add", namespace)
        _ip("-n", namespace, "link", "set", "lo", "up")
        _ip(
            "link",
            "add",
            outside,
            "netns",
            self.hub,
            "type",
            "veth",
            "peer",
            "name",
            inside,
            "netns",
            namespace,
        )
        _ip("-n", self.hub, "link", "set", outside, "master", "br0", "up")
        _ip("-n", namespace, "addr", "add", f"{address}/24", "dev", inside)
        _ip("-n", namespace, "link", "set", inside, "up")
        self.hosts[name] = (namespace, address)
        return address

    def run_in(self, name: str) -> list[str]:
        """The command prefix that runs a program on host ``name``."""
        return ["ip", "netns", "exec", self.hosts[name][0]]

    def cut(self, name: str, others: Sequence[str]) -> None:
        """``name`` can no longer send to ``others`` (so no connection between them works)."""
        namespace = self.hosts[name][0]
        for other in others:
            _ip("-n", namespace, "route", "add", "blackhole", f"{self.hosts[other][1]}/32")

    def heal(self, name: str, others: Sequence[str]) -> None:
        """Undo :meth:`cut`."""
        namespace = self.hosts[name][0]
        for other in others:
            with contextlib.suppress(subprocess.CalledProcessError):
                _ip("-n", namespace, "route", "del", "blackhole", f"{self.hosts[other][1]}/32")

    def remove(self) -> None:
        """Delete every namespace (their veths go with them)."""
        for namespace in [*(ns for ns, _ in self.hosts.values()), self.hub]:
            with contextlib.suppress(subprocess.CalledProcessError):
                _ip("netns", "del", namespace)


@contextlib.contextmanager
def sandbox() -> Iterator[Sandbox]:
    """A hub with its bridge; add hosts with :meth:`Sandbox.add`."""
    tag = secrets.token_hex(2)
    made = Sandbox(tag, f"10.235.{secrets.randbelow(200) + 20}")
    try:
        _ip("netns", "add", made.hub)
        _ip("-n", made.hub, "link", "add", "br0", "type", "bridge")
        _ip("-n", made.hub, "link", "set", "br0", "up")
        yield made
    finally:
        made.remove()
