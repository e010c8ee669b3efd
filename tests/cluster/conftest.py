"""A real etcd for the cluster tests: one single-node etcd per test module.

Each test works under a cluster name of its own (``cluster_id``), so the tests of a
module share the etcd without seeing each other's keys.
"""

from __future__ import annotations

import itertools
from typing import TYPE_CHECKING

import pytest

from trionsq.cluster.etcd_process import EtcdServer, etcd_available, start_etcd

if TYPE_CHECKING:
    from collections.abc import Iterator

_names = itertools.count()


@pytest.fixture(scope="module")
def etcd(tmp_path_factory: pytest.TempPathFactory) -> Iterator[EtcdServer]:
    """A running single-node etcd on loopback, for the whole module."""
    if not etcd_available():
        pytest.fail("etcd is not installed: `make unit` installs Debian's etcd-server")
    server = start_etcd(tmp_path_factory.mktemp("etcd"))
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture
def cluster_id() -> str:
    """A cluster name no other test of the run uses."""
    return f"c{next(_names)}"
