"""gnsq's HTTP client (NsqdHTTPClient, from PyPI) drives trionsq's nsqd HTTP API: every
call succeeds the way gnsq expects, and /stats (read through gnsq too) shows each one
took effect."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import TYPE_CHECKING

import trio

from trionsq import NsqdConfig, serve_nsqd

if TYPE_CHECKING:
    from trionsq.nursery_tree import BoundAddresses

CLIENTS = Path(__file__).with_name("clients")


async def test_gnsq_http_client(nursery: trio.Nursery) -> None:
    addresses: BoundAddresses = await nursery.start(serve_nsqd, NsqdConfig.loopback())
    assert addresses.http is not None
    host, port = addresses.http
    with trio.fail_after(60):
        result = await trio.run_process(
            [sys.executable, str(CLIENTS / "gnsq_http.py"), host, str(port)],
            capture_stdout=True,
            capture_stderr=True,
            check=False,
            stdin=subprocess.DEVNULL,
        )
    assert result.returncode == 0, result.stderr.decode()[-3000:]
    steps = json.loads(result.stdout.decode().strip().splitlines()[-1])
    failed = {name: outcome for name, outcome in steps.items() if "ok" not in outcome}
    assert list(failed) == ["delete_missing_topic"], failed
    assert "404" in failed["delete_missing_topic"]["error"]
    ok = {name: outcome["ok"] for name, outcome in steps.items() if "ok" in outcome}

    assert ok["ping"] == "OK"
    assert ok["info"]["tcp_port"] == addresses.tcp[1]
    assert ok["info"]["http_port"] == port
    for name in ("publish", "publish_deferred", "multipublish", "multipublish_binary"):
        assert ok[name] == "OK", name
    admin = [
        "create_topic",
        "create_topic_again",
        "create_channel",
        "pause_topic",
        "pause_channel",
        "unpause_topic",
        "unpause_channel",
        "empty_channel",
        "empty_topic",
        "delete_channel",
        "delete_topic",
    ]
    assert {name: ok[name] for name in admin} == dict.fromkeys(admin, "")

    # each /stats step's topics by name (a topic filter naming no topic gives null)
    stats = {
        name: {t["topic_name"]: t for t in value["topics"] or ()}
        for name, value in ok.items()
        if name.startswith("stats_")
    }
    published = stats["stats_published"]["g"]
    assert published["message_count"] == 6
    (channel,) = published["channels"]
    assert (channel["channel_name"], channel["message_count"]) == ("c", 6)
    # five to deliver and one deferred: nsqd defers a DPUB in each channel at publish
    assert (channel["depth"], channel["deferred_count"]) == (5, 1)

    paused = stats["stats_paused"]["g"]
    assert paused["paused"] is True
    assert [c["paused"] for c in paused["channels"]] == [True]
    unpaused = stats["stats_unpaused"]["g"]
    assert unpaused["paused"] is False
    assert [c["paused"] for c in unpaused["channels"]] == [False]

    (emptied,) = stats["stats_channel_emptied"]["g"]["channels"]
    assert (emptied["depth"], emptied["deferred_count"], emptied["in_flight_count"]) == (0, 0, 0)

    full = stats["stats_topic_full"]["h"]
    assert (full["depth"], full["message_count"], full["channels"]) == (2, 2, [])
    assert stats["stats_topic_emptied"]["h"]["depth"] == 0

    assert stats["stats_channel_deleted"]["g"]["channels"] == []
    assert stats["stats_topic_deleted"] == {}
    assert ok["stats_topic_deleted"]["topics"] is None
    assert list(stats["stats_all"]) == ["h"]
    assert set(addresses.broker.topics) == {"h"}
