"""GET /admin on a real broker and a real lookupd: the page's files over real sockets, and
the /nodes answers the page tells the two apart by."""

from __future__ import annotations

from typing import TYPE_CHECKING

import httpx
import pytest

if TYPE_CHECKING:
    from trionsq.lookupd.server import LookupdAddresses
    from trionsq.nursery_tree import BoundAddresses
    from trionsq.testing import NsqCluster

FILES = [
    ("/admin", "text/html; charset=utf-8", "<!doctype html>"),
    ("/admin/", "text/html; charset=utf-8", "<!doctype html>"),
    ("/admin/admin.js", "text/javascript; charset=utf-8", "// trionsq's admin page"),
    ("/admin/admin.css", "text/css; charset=utf-8", "/* trionsq's admin page"),
]


async def check_page(base: str) -> None:
    async with httpx.AsyncClient(base_url=base) as client:
        for path, content_type, start in FILES:
            response = await client.get(path)
            assert response.status_code == 200, path
            assert response.headers["content-type"] == content_type
            assert response.headers["cache-control"] == "no-cache"
            assert response.text.startswith(start)
            head = await client.head(path)
            assert head.status_code == 200
            assert head.content == b""
            assert head.headers["content-length"] == str(len(response.content))
        assert '<script type="module" src="/admin/admin.js">' in (await client.get("/admin")).text
        missing = await client.get("/admin/missing.js")
        assert missing.status_code == 404
        assert (await client.post("/admin")).status_code == 405


async def test_broker_serves_the_admin_page(nsqd: BoundAddresses) -> None:
    assert nsqd.http is not None
    host, port = nsqd.http
    await check_page(f"http://{host}:{port}")
    async with httpx.AsyncClient() as client:  # the page's sign that it is on a broker
        assert (await client.get(f"http://{host}:{port}/nodes")).status_code == 404


async def test_lookupd_serves_the_admin_page(lookupd: LookupdAddresses) -> None:
    host, port = lookupd.http
    await check_page(f"http://{host}:{port}")
    async with httpx.AsyncClient() as client:  # the page's sign that it is on a lookupd
        nodes = await client.get(f"http://{host}:{port}/nodes")
    assert nodes.status_code == 200
    assert nodes.json() == {"producers": []}


@pytest.mark.nsq_cluster(brokers=1, lookupds=1)
async def test_nodes_gives_the_page_each_brokers_stream_address(nsq_cluster: NsqCluster) -> None:
    """What the cluster page builds ws://<broadcast_address>:<http_port>/admin/stream from."""
    host, port = nsq_cluster.lookupds[0].http
    async with httpx.AsyncClient() as client:
        (node,) = (await client.get(f"http://{host}:{port}/nodes")).json()["producers"]
    assert node["broadcast_address"] == "127.0.0.1"
    assert nsq_cluster.brokers[0].http == ("127.0.0.1", node["http_port"])
