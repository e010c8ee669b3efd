"""pynsq, gnsq and ansq from PyPI publish and consume through trionsq: REQ, competing
consumers on one channel, and a second channel that gets every message."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import TYPE_CHECKING

import pytest
import trio

from trionsq import NsqdConfig, serve_nsqd

if TYPE_CHECKING:
    from trionsq.nursery_tree import BoundAddresses

CLIENTS = Path(__file__).with_name("clients")
COUNT = 200


@pytest.mark.parametrize("client", ["pynsq", "gnsq", "ansq"])
async def test_round_trip(client: str, nursery: trio.Nursery) -> None:
    addresses: BoundAddresses = await nursery.start(serve_nsqd, NsqdConfig.loopback())
    host, port = addresses.tcp
    script = CLIENTS / f"{client}_roundtrip.py"
    with trio.fail_after(60):
        result = await trio.run_process(
            [sys.executable, str(script), f"{host}:{port}", f"rt_{client}", str(COUNT)],
            capture_stdout=True,
            capture_stderr=True,
            check=False,
            stdin=subprocess.DEVNULL,
        )
    assert result.returncode == 0, result.stderr.decode()[-3000:]
    summary = json.loads(result.stdout.decode().strip().splitlines()[-1])
    everything = sorted(f"m{i}" for i in range(COUNT))
    shared: dict[str, list[int]] = summary["seen"]["shared"]
    assert sorted(shared) == everything
    assert shared["m0"] == [1, 2]  # requeued once, redelivered with attempts 2
    assert all(attempts == [1] for body, attempts in shared.items() if body != "m0")
    other: dict[str, list[int]] = summary["seen"]["other"]
    assert sorted(other) == everything  # a second channel gets every message
    assert all(attempts == [1] for attempts in other.values())
    counts: dict[str, int] = summary["per_consumer"]
    assert counts["shared-1"] > 0  # both consumers of "shared" got some
    assert counts["shared-2"] > 0
    assert counts["shared-1"] + counts["shared-2"] == COUNT + 1  # each once, m0 twice
