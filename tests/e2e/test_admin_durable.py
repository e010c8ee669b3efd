"""An admin change the HTTP API answered 200 survives a kill -9 right after the answer
(issue 30's dead-letter topic came back plain because metadata.json was written up to a
second later; the same held for any topic created ext, a partition count, a pause, a
dead-letter bound, a rate limit or a TTL). The answer now waits for metadata.json."""

from __future__ import annotations

import signal
from typing import TYPE_CHECKING

import httpx
import pytest
import trio

from trionsq.protocol import MAGIC_V2, InternalCreateTopic
from trionsq.protocol.client import ClientConnection, Response, encode_commands

from .test_crash_recovery import start_listening

if TYPE_CHECKING:
    from pathlib import Path

CHANGES = [
    ("/topic/create?topic=e&ext=true&partition_num=3", "e", {"ext": True, "partitions": 3}),
    ("/topic/pause?topic=p", "p", {"paused": True}),
    ("/channel/dead_letter?topic=d&channel=c&max_attempts=4", "d", {"max_attempts": 4}),
    ("/channel/rate_limit?topic=r&channel=c&msgs_per_sec=50", "r", {"rate_limit_msgs": 50}),
    ("/channel/pause?topic=q&channel=c", "q", {"channel_paused": True}),
    ("/topic/ttl?topic=t&ttl=90s", "t", {"ttl": "1m30s"}),
]
EXT_HEADER = "%7B%22a%22%3A%22b%22%7D"  # {"a":"b"}


async def observed(http: httpx.AsyncClient, topic: str) -> dict[str, object]:
    """What each change of CHANGES looks like from outside, by its keys."""
    stats = (await http.get("/stats?format=json")).json()
    (found,) = [t for t in stats["topics"] if t["topic_name"] == topic]
    channel = found["channels"][0] if found["channels"] else {}
    pub_ext = await http.post(f"/pub_ext?topic={topic}&partition=0&ext={EXT_HEADER}", content=b"m")
    return {
        "ext": pub_ext.status_code == 200,
        "partitions": len(found["partitions"]),
        "paused": found["paused"],
        "max_attempts": channel.get("max_attempts", 0),
        "rate_limit_msgs": channel.get("rate_limit_msgs", 0),
        "channel_paused": channel.get("paused", False),
        "ttl": channel.get("ttl", ""),
    }


@pytest.mark.parametrize(("target", "topic", "expected"), CHANGES, ids=[c[1] for c in CHANGES])
async def test_an_answered_admin_change_survives_kill_9(
    tmp_path: Path, target: str, topic: str, expected: dict[str, object]
) -> None:
    process, ports = await start_listening(tmp_path, "-http-address=127.0.0.1:0")
    base = f"http://127.0.0.1:{ports['HTTP']}"
    try:
        async with httpx.AsyncClient(base_url=base) as http:
            if not target.startswith("/topic/create"):
                assert (await http.post(f"/topic/create?topic={topic}")).status_code == 200
                assert (await http.post(f"/channel/create?topic={topic}&channel=c")).is_success
                await trio.sleep(1.5)  # the topic itself is on disk: only the change is new
            assert (await http.post(target)).status_code == 200
    finally:
        process.send_signal(signal.SIGKILL)
        await process.wait()
    process, ports = await start_listening(tmp_path, "-http-address=127.0.0.1:0")
    try:
        async with httpx.AsyncClient(base_url=f"http://127.0.0.1:{ports['HTTP']}") as http:
            seen = await observed(http, topic)
    finally:
        process.send_signal(signal.SIGTERM)
        await process.wait()
    assert {key: seen[key] for key in expected} == expected


async def test_a_partition_created_over_tcp_survives_kill_9(tmp_path: Path) -> None:
    """Youzan's INTERNAL_CREATE_TOPIC is answered OK once metadata.json holds the
    partitions and the ext flag, as HTTP's /topic/create."""
    process, ports = await start_listening(tmp_path, "-http-address=127.0.0.1:0")
    try:
        codec = ClientConnection()
        frames: list[object] = []
        async with await trio.open_tcp_stream("127.0.0.1", ports["TCP"]) as stream:
            create = InternalCreateTopic("y", 2, ext=True)
            await stream.send_all(MAGIC_V2 + encode_commands([create]))
            while not frames:
                frames = list(codec.receive_data(await stream.receive_some(4096)))
        assert isinstance(frames[0], Response)
        assert frames[0].is_ok
    finally:
        process.send_signal(signal.SIGKILL)
        await process.wait()
    process, ports = await start_listening(tmp_path, "-http-address=127.0.0.1:0")
    try:
        async with httpx.AsyncClient(base_url=f"http://127.0.0.1:{ports['HTTP']}") as http:
            seen = await observed(http, "y")
    finally:
        process.send_signal(signal.SIGTERM)
        await process.wait()
    assert (seen["ext"], seen["partitions"]) == (True, 3)
