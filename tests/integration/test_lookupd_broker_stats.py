"""The lookupd's ``GET /admin/broker_stats?broker=host:port`` (issue 31, item 8): the
/stats of a broker registered with it, fetched by the lookupd, so its admin page can
show a Go nsqd (which has no /admin/stream) that a browser could not read across
origins. Only brokers the lookupd lists are asked: it is no open proxy."""

from __future__ import annotations

from typing import TYPE_CHECKING

import httpx
import orjson

from .fake_go_nsqd import FakeGoNsqd
from .lookupd_peers import start_lookupd

if TYPE_CHECKING:
    import trio

    from trionsq.lookupd.server import LookupdAddresses


def base(lookupd: LookupdAddresses) -> str:
    host, port = lookupd.http
    return f"http://{host}:{port}"


async def test_a_registered_go_nsqd_s_stats_come_through_the_lookupd(
    nursery: trio.Nursery,
) -> None:
    lookupd = await start_lookupd(nursery)
    go = await nursery.start(FakeGoNsqd().serve, lookupd)
    async with httpx.AsyncClient(base_url=base(lookupd)) as http:
        first = await http.get("/admin/broker_stats", params={"broker": go.key})
        second = await http.get("/admin/broker_stats", params={"broker": go.key})
    assert first.status_code == 200, first.text
    assert first.headers["content-type"].startswith("application/json")
    stats = orjson.loads(first.content)
    assert stats["version"] == "1.3.0"
    assert [topic["topic_name"] for topic in stats["topics"]] == ["gotopic"]
    later = orjson.loads(second.content)
    assert later["topics"][0]["message_count"] > stats["topics"][0]["message_count"]


async def test_only_brokers_the_lookupd_lists_are_asked(nursery: trio.Nursery) -> None:
    lookupd = await start_lookupd(nursery)
    go = await nursery.start(FakeGoNsqd().serve, lookupd)
    async with httpx.AsyncClient(base_url=base(lookupd)) as http:
        unknown = await http.get("/admin/broker_stats", params={"broker": "127.0.0.1:9"})
        missing = await http.get("/admin/broker_stats")
        other_port = await http.get(
            "/admin/broker_stats", params={"broker": f"127.0.0.1:{lookupd.http[1]}"}
        )
    assert (unknown.status_code, unknown.json()) == (404, {"message": "UNKNOWN_BROKER"})
    assert (missing.status_code, missing.json()) == (400, {"message": "MISSING_ARG_BROKER"})
    assert other_port.status_code == 404
    assert go.answers == 0
