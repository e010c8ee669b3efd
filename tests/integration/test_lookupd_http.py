"""The lookupd's HTTP API over real sockets (spec http-api.md §1, §4): every endpoint's
status, exact JSON (keys in nsqlookupd's order), headers and envelope."""

from __future__ import annotations

import time
from typing import TYPE_CHECKING, Final

import httpx
import orjson
import pytest
import trio
import trio.testing

from trionsq import __version__
from trionsq.lookupd.http_api import GO_ZERO_TIME_UNIX_NANO
from trionsq.version import NSQD_RELEASE

from .lookupd_peers import RawPeers, nsqd_info, peers, start_lookupd

if TYPE_CHECKING:
    from collections.abc import AsyncIterator

    from trionsq.lookupd.server import LookupdAddresses

__all__ = ["peers"]  # the fixture

JSON_TYPE: Final = "application/json; charset=utf-8"
TEXT_TYPE: Final = "text/plain; charset=utf-8"
V1: Final = "nsq; version=1.0"
LEGACY: Final = {"Accept": "application/vnd.nsq; version=0.3"}
V1_ACCEPT: Final = {"Accept": "application/vnd.nsq; version=1.0"}


@pytest.fixture
async def lookupd(nursery: trio.Nursery) -> LookupdAddresses:
    return await start_lookupd(nursery)


@pytest.fixture
async def http(lookupd: LookupdAddresses) -> AsyncIterator[httpx.AsyncClient]:
    host, port = lookupd.http
    async with httpx.AsyncClient(base_url=f"http://{host}:{port}", timeout=10.0) as client:
        yield client


def ordered(response: httpx.Response) -> list[str]:
    """Top-level JSON keys in the order sent."""
    return list(orjson.loads(response.content))


def expect_json(response: httpx.Response, value: object) -> None:
    assert response.status_code == 200
    assert response.headers["content-type"] == JSON_TYPE
    assert response.headers["x-nsq-content-type"] == V1
    assert response.json() == value


def expect_error(response: httpx.Response, status: int, message: str) -> None:
    assert response.status_code == status
    assert response.headers["content-type"] == JSON_TYPE
    assert response.headers["x-nsq-content-type"] == V1
    assert response.content == b'{"message":"%s"}' % message.encode()


def expect_empty(response: httpx.Response) -> None:
    assert response.status_code == 200
    assert response.content == b""
    assert response.headers["x-nsq-content-type"] == V1


def peer_json(remote: str, host: str = "nsqd1", port: int = 4150) -> dict[str, object]:
    return {
        "remote_address": remote,
        "hostname": host,
        "broadcast_address": host,
        "tcp_port": port,
        "http_port": 4151,
        "version": "1.3.0",
        "topology_zone": "z1",
        "topology_region": "r1",
    }


PEER_KEYS: Final = list(peer_json(""))


# ---------------------------------------------------------------- routing, /ping, /info


async def test_ping_is_plain_ok_without_the_v1_header(http: httpx.AsyncClient) -> None:
    response = await http.get("/ping")
    assert (response.status_code, response.content) == (200, b"OK")
    assert response.headers["content-type"] == TEXT_TYPE
    assert "x-nsq-content-type" not in response.headers


async def test_info_is_the_version_v1_or_in_the_legacy_envelope_when_accept_asks(
    http: httpx.AsyncClient,
) -> None:
    info = {"version": NSQD_RELEASE, "trionsq_version": __version__}
    expect_json(await http.get("/info"), info)
    expect_json(await http.get("/info", headers=V1_ACCEPT), info)
    legacy = await http.get("/info", headers=LEGACY)
    assert legacy.status_code == 200
    assert legacy.content == (
        b'{"status_code":200,"status_txt":"OK","data":{"version":"%s","trionsq_version":"%s"}}'
        % (NSQD_RELEASE.encode(), __version__.encode())
    )
    assert "x-nsq-content-type" not in legacy.headers


async def test_unknown_path_is_404_and_wrong_method_405(http: httpx.AsyncClient) -> None:
    expect_error(await http.get("/nope"), 404, "NOT_FOUND")
    expect_error(await http.get("/topic/create?topic=t"), 405, "METHOD_NOT_ALLOWED")
    expect_error(await http.post("/lookup?topic=t"), 405, "METHOD_NOT_ALLOWED")
    expect_error(await http.post("/ping"), 405, "METHOD_NOT_ALLOWED")


# ---------------------------------------------------------------- /topics, /channels


async def test_topics_lists_every_topic_key_and_empty_is_a_list(
    http: httpx.AsyncClient,
) -> None:
    expect_json(await http.get("/topics"), {"topics": []})
    expect_empty(await http.post("/topic/create?topic=a"))
    expect_empty(await http.post("/channel/create?topic=b&channel=c"))
    expect_json(await http.get("/topics"), {"topics": ["a", "b"]})
    legacy = await http.get("/topics", headers=LEGACY)
    assert legacy.json() == {"status_code": 200, "status_txt": "OK", "data": {"topics": ["a", "b"]}}


async def test_channels_of_a_topic_unknown_topic_is_empty_missing_topic_is_400(
    http: httpx.AsyncClient,
) -> None:
    expect_error(await http.get("/channels"), 400, "MISSING_ARG_TOPIC")
    expect_json(await http.get("/channels?topic=none"), {"channels": []})
    await http.post("/channel/create?topic=t&channel=c1")
    await http.post("/channel/create?topic=t&channel=c2")
    expect_json(await http.get("/channels?topic=t"), {"channels": ["c1", "c2"]})
    legacy = await http.get("/channels", headers=LEGACY)
    assert legacy.status_code == 500  # every legacy error is a 500
    assert legacy.content == b'{"status_code":500,"status_txt":"MISSING_ARG_TOPIC","data":null}'


# ---------------------------------------------------------------- /lookup


async def test_lookup_argument_errors_and_topic_not_found(http: httpx.AsyncClient) -> None:
    expect_error(await http.get("/lookup"), 400, "MISSING_ARG_TOPIC")
    expect_error(await http.get("/lookup?topic=a;b"), 400, "INVALID_REQUEST")
    expect_error(await http.get("/lookup?topic=none"), 404, "TOPIC_NOT_FOUND")
    expect_error(await http.get("/lookup?topic="), 404, "TOPIC_NOT_FOUND")
    legacy = await http.get("/lookup?topic=none", headers=LEGACY)
    assert legacy.status_code == 500
    assert legacy.json() == {"status_code": 500, "status_txt": "TOPIC_NOT_FOUND", "data": None}


async def test_lookup_of_a_topic_key_without_producers_is_200_with_empty_lists(
    http: httpx.AsyncClient,
) -> None:
    await http.post("/topic/create?topic=t")
    response = await http.get("/lookup?topic=t")
    assert response.content == b'{"channels":[],"producers":[]}'


async def test_lookup_lists_channels_and_registered_producers_in_peer_shape(
    http: httpx.AsyncClient, lookupd: LookupdAddresses, peers: RawPeers
) -> None:
    one = await peers.connect(lookupd)
    two = await peers.connect(lookupd)
    await one.identify(nsqd_info(4150, host="nsqd1"))
    await two.identify(nsqd_info(4250, host="nsqd2"))
    await one.register("t", "c")
    await two.register("t")
    await two.register("other")
    response = await http.get("/lookup?topic=t")
    assert ordered(response) == ["channels", "producers"]
    expect_json(
        response,
        {
            "channels": ["c"],
            "producers": [
                peer_json(one.local_address, "nsqd1", 4150),
                peer_json(two.local_address, "nsqd2", 4250),
            ],
        },
    )
    assert list(orjson.loads(response.content)["producers"][0]) == PEER_KEYS
    legacy = await http.get("/lookup?topic=t", headers=LEGACY)
    assert legacy.json()["data"] == response.json()


async def test_lookup_forgets_a_producer_whose_connection_closed(
    http: httpx.AsyncClient, lookupd: LookupdAddresses, peers: RawPeers
) -> None:
    peer = await peers.connect(lookupd)
    await peer.identify()
    await peer.register("t", "c")
    await peer.aclose()
    await trio.testing.wait_all_tasks_blocked(cushion=0.02)
    expect_json(await http.get("/lookup?topic=t"), {"channels": ["c"], "producers": []})


# ---------------------------------------------------------------- /nodes, /debug


async def test_nodes_lists_identified_peers_with_topics_and_tombstones(
    http: httpx.AsyncClient, lookupd: LookupdAddresses, peers: RawPeers
) -> None:
    expect_json(await http.get("/nodes"), {"producers": []})
    peer = await peers.connect(lookupd)
    idle = await peers.connect(lookupd)
    await peer.identify()
    await idle.identify(nsqd_info(4250, host="idle"))
    await peer.register("t", "c")
    await peer.register("u")
    expect_empty(await http.post("/topic/tombstone?topic=u&node=nsqd1:4151"))
    response = await http.get("/nodes")
    expect_json(
        response,
        {
            "producers": [
                {
                    **peer_json(peer.local_address),
                    "tombstones": [False, True],
                    "topics": ["t", "u"],
                },
                {**peer_json(idle.local_address, "idle", 4250), "tombstones": [], "topics": []},
            ]
        },
    )
    assert list(response.json()["producers"][0]) == [*PEER_KEYS, "tombstones", "topics"]


async def test_debug_maps_each_registration_to_its_producers_with_unix_nano_times(
    http: httpx.AsyncClient, lookupd: LookupdAddresses, peers: RawPeers
) -> None:
    expect_json(await http.get("/debug"), {})
    before = time.time_ns()
    peer = await peers.connect(lookupd)
    await peer.identify()
    await peer.register("t", "c")
    await http.post("/topic/create?topic=empty")  # no producers: not listed
    await http.post("/topic/tombstone?topic=t&node=nsqd1:4151")
    response = await http.get("/debug")
    after = time.time_ns()
    data = response.json()
    assert ordered(response) == ["channel:t:c", "client::", "topic:t:"]  # sorted, as Go
    entry = data["topic:t:"][0]
    assert list(entry) == [
        "broadcast_address",
        "hostname",
        "http_port",
        "id",
        "last_update",
        "tcp_port",
        "tombstoned",
        "tombstoned_at",
        "topology_region",
        "topology_zone",
        "version",
    ]
    assert before - 50_000_000 <= entry["last_update"] <= after
    assert before - 50_000_000 <= entry["tombstoned_at"] <= after
    assert {key: entry[key] for key in ("id", "tombstoned", "tcp_port", "hostname")} == {
        "id": peer.local_address,
        "tombstoned": True,
        "tcp_port": 4150,
        "hostname": "nsqd1",
    }
    assert data["channel:t:c"][0]["tombstoned"] is False
    assert data["channel:t:c"][0]["tombstoned_at"] == GO_ZERO_TIME_UNIX_NANO


# ---------------------------------------------------------------- write endpoints


async def test_topic_create_validates_and_is_idempotent(http: httpx.AsyncClient) -> None:
    expect_error(await http.post("/topic/create"), 400, "MISSING_ARG_TOPIC")
    expect_error(await http.post("/topic/create?topic=bad!"), 400, "INVALID_ARG_TOPIC")
    expect_error(await http.post("/topic/create?topic=%zz"), 400, "INVALID_REQUEST")
    expect_empty(await http.post("/topic/create?topic=t"))
    expect_empty(await http.post("/topic/create?topic=t"))
    # write endpoints are V1 only: a legacy Accept still gets the V1 error
    expect_error(await http.post("/topic/create", headers=LEGACY), 400, "MISSING_ARG_TOPIC")
    expect_json(await http.get("/topics"), {"topics": ["t"]})


async def test_topic_delete_removes_the_topic_and_its_channels_even_unknown_is_ok(
    http: httpx.AsyncClient,
) -> None:
    expect_error(await http.post("/topic/delete"), 400, "MISSING_ARG_TOPIC")
    expect_empty(await http.post("/topic/delete?topic=never"))
    await http.post("/channel/create?topic=t&channel=c")
    await http.post("/topic/create?topic=keep")
    expect_empty(await http.post("/topic/delete?topic=t"))
    expect_json(await http.get("/topics"), {"topics": ["keep"]})
    expect_json(await http.get("/channels?topic=t"), {"channels": []})


@pytest.mark.parametrize(
    ("query", "message"),
    [
        ("", "MISSING_ARG_TOPIC"),
        ("?topic=bad!", "INVALID_ARG_TOPIC"),
        ("?topic=t", "MISSING_ARG_CHANNEL"),
        ("?topic=t&channel=bad!", "INVALID_ARG_CHANNEL"),
    ],
)
async def test_channel_endpoints_check_topic_then_channel(
    http: httpx.AsyncClient, query: str, message: str
) -> None:
    for path in ("/channel/create", "/channel/delete"):
        expect_error(await http.post(path + query), 400, message)


async def test_channel_create_adds_topic_too_and_delete_of_missing_channel_is_404(
    http: httpx.AsyncClient,
) -> None:
    expect_error(await http.post("/channel/delete?topic=t&channel=c"), 404, "CHANNEL_NOT_FOUND")
    expect_empty(await http.post("/channel/create?topic=t&channel=c"))
    expect_json(await http.get("/lookup?topic=t"), {"channels": ["c"], "producers": []})
    expect_empty(await http.post("/channel/delete?topic=t&channel=c"))
    expect_json(await http.get("/lookup?topic=t"), {"channels": [], "producers": []})


async def test_tombstone_needs_topic_then_node_and_unknown_node_is_no_error(
    http: httpx.AsyncClient,
) -> None:
    expect_error(await http.post("/topic/tombstone"), 400, "MISSING_ARG_TOPIC")
    expect_error(await http.post("/topic/tombstone?topic=t"), 400, "MISSING_ARG_NODE")
    expect_empty(await http.post("/topic/tombstone?topic=t&node=nowhere:1"))


# ---------------------------------------------------------------- time (autojump clock)


async def test_tombstone_hides_the_producer_from_lookup_for_exactly_the_lifetime(
    nursery: trio.Nursery, peers: RawPeers, autojump_clock: trio.testing.MockClock
) -> None:
    autojump_clock.autojump_threshold = 0.1  # real sockets: never jump while bytes are in flight
    lookupd = await start_lookupd(nursery, tombstone_lifetime=45.0)
    host, port = lookupd.http
    peer = await peers.connect(lookupd)
    await peer.identify()
    await peer.register("t")
    async with httpx.AsyncClient(base_url=f"http://{host}:{port}") as http:
        await http.post("/topic/tombstone?topic=t&node=nsqd1:4151")
        marked = trio.current_time()
        expect_json(await http.get("/lookup?topic=t"), {"channels": [], "producers": []})
        nodes = (await http.get("/nodes")).json()["producers"]
        assert [node["tombstones"] for node in nodes] == [[True]]
        await trio.sleep_until(marked + 44.0)
        expect_json(await http.get("/lookup?topic=t"), {"channels": [], "producers": []})
        await trio.sleep_until(marked + 45.0)
        expect_json(
            await http.get("/lookup?topic=t"),
            {"channels": [], "producers": [peer_json(peer.local_address)]},
        )
        nodes = (await http.get("/nodes")).json()["producers"]
        assert [node["tombstones"] for node in nodes] == [[False]]


async def test_a_producer_silent_past_the_inactivity_timeout_leaves_lookup_and_nodes(
    nursery: trio.Nursery, peers: RawPeers, autojump_clock: trio.testing.MockClock
) -> None:
    autojump_clock.autojump_threshold = 0.1  # real sockets: never jump while bytes are in flight
    lookupd = await start_lookupd(nursery, inactive_producer_timeout=300.0)
    host, port = lookupd.http
    peer = await peers.connect(lookupd)
    await peer.identify()
    identified = trio.current_time()
    await peer.register("t")
    async with httpx.AsyncClient(base_url=f"http://{host}:{port}") as http:
        await trio.sleep_until(identified + 299.0)
        assert len((await http.get("/lookup?topic=t")).json()["producers"]) == 1
        await trio.sleep_until(identified + 301.0)
        expect_json(await http.get("/lookup?topic=t"), {"channels": [], "producers": []})
        expect_json(await http.get("/nodes"), {"producers": []})
        await peer.send(b"PING\n")
        assert await peer.reply() == b"OK"
        assert len((await http.get("/lookup?topic=t")).json()["producers"]) == 1
        assert len((await http.get("/nodes")).json()["producers"]) == 1
