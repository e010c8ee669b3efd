"""ansq (asyncio): two readers share channel "shared", one reads channel "other";
then N messages are published (PUB m0, MPUB the rest) and m0 is requeued once.

Usage: python ansq_roundtrip.py HOST:PORT TOPIC COUNT; prints a JSON summary.
"""

from __future__ import annotations

import asyncio
import json
import sys

from ansq import create_reader, create_writer

seen: dict[str, dict[str, list[int]]] = {"shared": {}, "other": {}}
per_consumer: dict[str, int] = {"shared-1": 0, "shared-2": 0, "other": 0}


def finished(count: int) -> bool:
    shared, other = seen["shared"], seen["other"]
    return len(shared) == count and len(shared.get("m0", [])) == 2 and len(other) == count


async def consume(
    address: str, topic: str, name: str, channel: str, done: asyncio.Event, count: int
) -> None:
    reader = await create_reader(topic=topic, channel=channel, nsqd_tcp_addresses=[address])
    messages = reader.messages()
    try:
        while not done.is_set():
            next_message = asyncio.ensure_future(messages.__anext__())
            stop = asyncio.ensure_future(done.wait())
            await asyncio.wait({next_message, stop}, return_when=asyncio.FIRST_COMPLETED)
            stop.cancel()
            if not next_message.done():
                next_message.cancel()
                break
            message = next_message.result()
            body = message.body.decode()
            seen[channel].setdefault(body, []).append(message.attempts)
            per_consumer[name] += 1
            if channel == "shared" and body == "m0" and message.attempts == 1:
                await message.req(0)
                continue
            await message.fin()
            if finished(count):
                done.set()
    finally:
        await reader.close()


async def main(address: str, topic: str, count: int) -> dict[str, object]:
    done = asyncio.Event()
    readers = [
        asyncio.ensure_future(consume(address, topic, name, channel, done, count))
        for name, channel in (("shared-1", "shared"), ("shared-2", "shared"), ("other", "other"))
    ]
    await asyncio.sleep(1.0)  # every reader has subscribed by then
    writer = await create_writer(nsqd_tcp_addresses=[address])
    published = [str(await writer.pub(topic, b"m0"))]
    published.append(str(await writer.mpub(topic, *[b"m%d" % i for i in range(1, count)])))
    await writer.close()
    await done.wait()
    await asyncio.gather(*readers)
    return {"published": published, "seen": seen, "per_consumer": per_consumer}


result = asyncio.run(asyncio.wait_for(main(sys.argv[1], sys.argv[2], int(sys.argv[3])), 30))
print(json.dumps(result))
