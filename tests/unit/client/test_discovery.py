"""Reading lookupd's answers: Youzan's partitions and meta, upstream's producers,
with and without the status envelope, and /listlookup's capitalised shape."""

from __future__ import annotations

import orjson
import pytest

from trionsq.client.discovery import (
    Placement,
    Target,
    merge,
    parse_listlookup,
    parse_lookup,
    parse_nodes,
)


def peer(host: str, tcp: int) -> dict[str, object]:
    return {
        "id": f"{host}:{tcp + 1}",
        "remote_address": f"{host}:5000",
        "hostname": "h",
        "broadcast_address": host,
        "tcp_port": tcp,
        "http_port": tcp + 1,
        "version": "0.3.7-HA.1.13.0",
        "distributed_id": f"{host}:{tcp + 2}:1",
    }


def test_youzan_answer_gives_one_target_per_partition_leader_and_the_meta() -> None:
    body = orjson.dumps(
        {
            "status_code": 200,
            "status_txt": "OK",
            "data": {
                "channels": ["c"],
                "meta": {
                    "partition_num": 3,
                    "replica": 2,
                    "extend_support": True,
                    "ordered": False,
                },
                "partitions": {
                    "0": peer("10.0.0.1", 4150),
                    "2": peer("10.0.0.2", 4150),
                    "1": peer("10.0.0.1", 4150),
                },
                "producers": [peer("10.0.0.1", 4150), peer("10.0.0.2", 4150)],
            },
        }
    )
    assert parse_lookup(body) == Placement(
        (
            Target("10.0.0.1:4150", 0),
            Target("10.0.0.1:4150", 1),
            Target("10.0.0.2:4150", 2),
        ),
        partition_count=3,
        ordered=False,
        extend_support=True,
    )


def test_upstream_answer_without_envelope_gives_one_target_per_producer() -> None:
    body = orjson.dumps({"channels": [], "producers": [peer("127.0.0.1", 4150), peer("::1", 4250)]})
    placement = parse_lookup(body)
    assert placement.targets == (Target("127.0.0.1:4150"), Target("[::1]:4250"))
    assert placement.partition_count is None


def test_unusable_peers_and_negative_partitions_are_left_out() -> None:
    body = orjson.dumps(
        {
            "partitions": {
                "-1": peer("10.0.0.1", 1),
                "x": peer("10.0.0.1", 2),
                "0": {"broadcast_address": "", "tcp_port": 3},
                "1": peer("10.0.0.9", 4),
            }
        }
    )
    placement = parse_lookup(body)
    assert placement.targets == (Target("10.0.0.9:4", 1),)
    assert placement.partition_count == 2  # no meta: the highest partition listed says


@pytest.mark.parametrize("body", [b"[1]", b"not json"])
def test_a_lookup_answer_that_is_not_an_object_is_a_value_error(body: bytes) -> None:
    with pytest.raises(ValueError):  # noqa: PT011 - orjson's and ours
        parse_lookup(body)


def test_listlookup_names_every_node_and_nothing_for_empty_or_upstream_answers() -> None:
    node = {
        "ID": "a",
        "NodeIP": "10.0.0.5",
        "TcpPort": "4160",
        "HttpPort": "4161",
        "RpcPort": "",
        "Epoch": 0,
    }
    body = orjson.dumps(
        {"lookupdnodes": [node, {**node, "NodeIP": "fe80::1"}], "lookupdleader": node}
    )
    assert parse_listlookup(body) == ["10.0.0.5:4161", "[fe80::1]:4161"]
    assert parse_listlookup(b"") == []
    assert parse_listlookup(b"null") == []
    assert parse_listlookup(orjson.dumps({"status_code": 200, "data": None})) == []


def test_nodes_lists_every_broker() -> None:
    body = orjson.dumps({"producers": [peer("10.0.0.2", 1), peer("10.0.0.1", 1), {"x": 1}]})
    assert parse_nodes(body) == [Target("10.0.0.1:1"), Target("10.0.0.2:1")]


def test_merge_is_the_union_of_every_lookupds_answer() -> None:
    a = Placement((Target("h:1", 0),), 2, ordered=True)
    b = Placement((Target("h:1", 0), Target("h:2", 1)), 2, extend_support=True)
    assert merge([a, b, Placement()]) == Placement(
        (Target("h:1", 0), Target("h:2", 1)), 2, ordered=True, extend_support=True
    )


def test_a_producer_leading_no_partition_is_a_target_without_one() -> None:
    """Youzan's go-nsq consumer's rule: a broker listed under ``producers`` but under
    no partition (an nsqd that knows none) is read with a plain SUB."""
    one, two = peer("10.0.0.1", 4150), peer("10.0.0.2", 4150)
    body = orjson.dumps({"partitions": {"0": one, "1": one}, "producers": [one, two]})
    placement = parse_lookup(body)
    assert placement.targets == (
        Target("10.0.0.1:4150", 0),
        Target("10.0.0.1:4150", 1),
        Target("10.0.0.2:4150"),
    )
    assert placement.partition_count == 2
    plain = orjson.dumps({"partitions": {}, "producers": [two, one], "meta": {"partition_num": 1}})
    assert parse_lookup(plain).targets == (Target("10.0.0.1:4150"), Target("10.0.0.2:4150"))


def test_merge_reads_a_broker_through_its_partitions_only() -> None:
    """One lookupd lists a partition of a broker, another the broker alone: one
    connection per partition, none more for the broker."""
    youzan = Placement((Target("h:1", 0),), 1)
    upstream = Placement((Target("h:1"), Target("h:2")))
    assert merge([youzan, upstream]).targets == (Target("h:1", 0), Target("h:2"))
