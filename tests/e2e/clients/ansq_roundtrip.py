"""ansq (asyncio) publishes N messages, then consumes them, requeueing m0 once.

Usage: python ansq_roundtrip.py HOST:PORT TOPIC COUNT; prints a JSON summary.
"""

from __future__ import annotations

import asyncio
import json
import sys

from ansq import create_reader, create_writer


async def main(address: str, topic: str, count: int) -> dict[str, object]:
    writer = await create_writer(nsqd_tcp_addresses=[address])
    published = [str(await writer.pub(topic, b"m0"))]
    published.append(str(await writer.mpub(topic, *[b"m%d" % i for i in range(1, count)])))
    await writer.close()
    seen: dict[str, list[int]] = {}
    reader = await create_reader(topic=topic, channel="ansq", nsqd_tcp_addresses=[address])
    async for message in reader.messages():
        body = message.body.decode()
        seen.setdefault(body, []).append(message.attempts)
        if body == "m0" and message.attempts == 1:
            await message.req(0)
            continue
        await message.fin()
        if len(seen) == count:
            break
    await reader.close()
    return {"published": published, "seen": seen}


result = asyncio.run(asyncio.wait_for(main(sys.argv[1], sys.argv[2], int(sys.argv[3])), 30))
print(json.dumps(result))
