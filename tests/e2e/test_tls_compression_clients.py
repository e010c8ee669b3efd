"""gnsq and pynsq from PyPI publish and consume over IDENTIFY's upgrades: TLS
(verifying a trustme CA), snappy, deflate, TLS+snappy and TLS+deflate."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import attrs
import pytest
import trio
import trustme

from trionsq import NsqdConfig, serve_nsqd

CLIENTS = Path(__file__).with_name("clients")
COUNT = 50
FEATURES = ["tls", "snappy", "deflate", "tls,snappy", "tls,deflate"]


@pytest.mark.parametrize("client", ["gnsq", "pynsq"])
async def test_upgraded_round_trip(client: str, nursery: trio.Nursery, tmp_path: Path) -> None:
    """Each feature set on its own topic, all at once against one broker."""
    ca = trustme.CA()
    server = ca.issue_cert("localhost", "127.0.0.1")
    ca_file, cert_file, key_file = (tmp_path / n for n in ("ca.pem", "cert.pem", "key.pem"))
    ca.cert_pem.write_to_path(str(ca_file))
    server.cert_chain_pems[0].write_to_path(str(cert_file))
    server.private_key_pem.write_to_path(str(key_file))
    config = attrs.evolve(NsqdConfig.loopback(), tls_cert=str(cert_file), tls_key=str(key_file))
    addresses = await nursery.start(serve_nsqd, config)
    host, port = addresses.tcp
    script = CLIENTS / f"{client}_upgraded.py"
    results: dict[str, subprocess.CompletedProcess[bytes]] = {}

    async def run(features: str) -> None:
        topic = "up_" + features.replace(",", "_")
        arguments = [f"{host}:{port}", topic, str(COUNT), features, str(ca_file)]
        results[features] = await trio.run_process(
            [sys.executable, str(script), *arguments],
            capture_stdout=True,
            capture_stderr=True,
            check=False,
            stdin=subprocess.DEVNULL,
        )

    with trio.fail_after(60):
        async with trio.open_nursery() as runs:
            for features in FEATURES:
                runs.start_soon(run, features)
    expected = sorted(f"m{i}" for i in range(COUNT))
    for features in FEATURES:
        result = results[features]
        assert result.returncode == 0, (features, result.stderr.decode()[-3000:])
        summary = json.loads(result.stdout.decode().strip().splitlines()[-1])
        assert sorted(summary["received"]) == expected, (features, result.stderr.decode()[-3000:])
        assert summary.get("published", ["ok", "ok"]) == ["ok", "ok"]
    stats = [client.statistics() for client in addresses.broker.clients.values()]
    assert stats == [] or all(s.tls or s.snappy or s.deflate for s in stats)
