"""trionsq.client against the drop-in ``nsqd`` and ``nsqlookupd`` commands run as
upstream NSQ is run (flags in Go syntax, a broker registered with a lookupd, topics
created by the first PUB): discovery reads upstream's ``producers`` answer, a
consumer started before its topic exists finds it at the next lookup, and every
message arrives."""

from __future__ import annotations

import subprocess

import httpx
import trio

from trionsq.client import ConsumerSettings, Target, open_consumer, open_producer
from trionsq.client.discovery import parse_lookup

from .test_nsqd_command import NSQLOOKUPD, Nsqd, listening


async def start_lookupd() -> tuple[trio.Process, dict[str, tuple[bytes, str, int]]]:
    process = await trio.lowlevel.open_process(
        [str(NSQLOOKUPD), "-tcp-address=127.0.0.1:0", "-http-address=127.0.0.1:0"],
        stdin=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
    )
    assert process.stderr is not None
    stderr = b""
    with trio.fail_after(20):
        while not {"TCP", "HTTP"} <= listening(stderr).keys():
            chunk = await process.stderr.receive_some(4096)
            assert chunk, f"nsqlookupd exited early: {stderr!r}"
            stderr += chunk
    return process, listening(stderr)


async def until_listed(http: httpx.AsyncClient, path: str, key: str) -> httpx.Response:
    with trio.fail_after(20):
        while True:
            response = await http.get(path)
            if response.status_code == 200 and response.json().get(key):
                return response
            await trio.sleep(0.05)


async def test_the_client_works_with_the_drop_in_commands_as_upstream_nsq() -> None:
    lookupd, lookupd_at = await start_lookupd()
    nsqd: Nsqd | None = None
    try:
        lookupd_tcp = f"127.0.0.1:{lookupd_at['TCP'][2]}"
        lookupd_http = f"127.0.0.1:{lookupd_at['HTTP'][2]}"
        nsqd = await Nsqd.start(
            "-tcp-address=127.0.0.1:0",
            "-http-address=127.0.0.1:0",
            f"-lookupd-tcp-address={lookupd_tcp}",
            "-broadcast-address=127.0.0.1",
        )
        nsqd_tcp = f"127.0.0.1:{(await nsqd.wait_listening('TCP', 'HTTP'))['TCP'][2]}"
        settings = ConsumerSettings(lookup_interval=0.3)
        async with httpx.AsyncClient(base_url=f"http://{lookupd_http}") as http:
            await until_listed(http, "/nodes", "producers")
            # a consumer of a topic nobody has published yet: lookupd knows nothing
            async with open_consumer("up", "c", lookupd=lookupd_http, settings=settings) as early:
                assert early.connections == 0
                async with open_producer(lookupd=lookupd_http) as producer:
                    for i in range(100):  # no lookupd knows "up": /nodes names the nsqd
                        await producer.publish("up", b"%d" % i)
                    await producer.publish_many("up", [b"%d" % i for i in range(100, 200)])
                upstream = await until_listed(http, "/lookup?topic=up", "producers")
                assert "partitions" not in upstream.json()
                assert parse_lookup(upstream.content).targets == (Target(nsqd_tcp),)
                bodies = set()
                with trio.fail_after(20):
                    async for message in early:  # found at a later lookup
                        bodies.add(message.body)
                        message.finish()
                        if len(bodies) == 200:
                            break
                assert early.connections == 1
                assert early.discovery is not None
                assert early.discovery.lookups >= 2
        assert bodies == {b"%d" % i for i in range(200)}
    finally:
        if nsqd is not None:
            await nsqd.aclose()
        lookupd.kill()
        await lookupd.wait()
        if lookupd.stderr is not None:
            await lookupd.stderr.aclose()
