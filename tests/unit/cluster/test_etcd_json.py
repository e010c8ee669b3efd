"""The gateway's JSON shapes, without an etcd."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from trionsq.cluster import etcd_json
from trionsq.cluster.etcd import endpoint_address
from trionsq.cluster.etcd_json import Compare, EtcdReplyError, Op


@given(st.binary(min_size=1, max_size=8), st.binary(max_size=8))
def test_prefix_end_covers_exactly_the_prefix(prefix: bytes, tail: bytes) -> None:
    end = etcd_json.prefix_end(prefix)
    assert prefix <= prefix + tail < end or end == b"\x00"
    if end != b"\x00":
        assert not end.startswith(prefix)


def test_prefix_end_of_all_ff_is_every_key() -> None:
    assert etcd_json.prefix_end(b"\xff\xff") == b"\x00"
    assert etcd_json.prefix_end(b"a\xff") == b"b"


def test_range_reply_with_int64_strings() -> None:
    reply = etcd_json.decode_reply(
        b'{"header":{"revision":"7"},"kvs":[{"key":"YQ==","value":"Yg==","mod_revision":"7",'
        b'"lease":"42"}],"count":"1"}'
    )
    kvs, revision = etcd_json.parse_kvs(reply)
    assert revision == 7
    assert kvs[0].key == b"a"
    assert kvs[0].value == b"b"
    assert kvs[0].lease == 42
    assert kvs[0].create_revision == 0  # left out at zero


def test_error_reply_raises_with_its_code() -> None:
    with pytest.raises(EtcdReplyError, match="requested lease not found") as caught:
        etcd_json.decode_reply(
            b'{"error":"x","code":5,"message":"etcdserver: requested lease not found"}'
        )
    assert caught.value.code == 5


@pytest.mark.parametrize("body", [b"nope", b"[1]", b'{"kvs":{"a":1}}', b'{"kvs":[{"key":"*"}]}'])
def test_malformed_replies_are_refused(body: bytes) -> None:
    with pytest.raises(EtcdReplyError):
        etcd_json.parse_kvs(etcd_json.decode_reply(body))


def test_txn_request_shape() -> None:
    request = etcd_json.txn_json(
        [Compare(b"k", "CREATE", "EQUAL", 0), Compare(b"k", "VALUE", "NOT_EQUAL", b"v")],
        [Op("put", b"k", b"v", lease=9)],
        [Op("range", b"p", prefix=True), Op("delete", b"k")],
    )
    assert request == {
        "compare": [
            {"key": "aw==", "target": "CREATE", "result": "EQUAL", "create_revision": "0"},
            {"key": "aw==", "target": "VALUE", "result": "NOT_EQUAL", "value": "dg=="},
        ],
        "success": [{"request_put": {"key": "aw==", "value": "dg==", "lease": "9"}}],
        "failure": [
            {"request_range": {"key": "cA==", "range_end": "cQ=="}},
            {"request_delete_range": {"key": "aw=="}},
        ],
    }


def test_watch_message() -> None:
    batch = etcd_json.parse_watch(
        etcd_json.decode_reply(
            b'{"result":{"header":{"revision":"4"},"events":[{"type":"DELETE","kv":{"key":"YQ==",'
            b'"mod_revision":"4"}},{"kv":{"key":"Yg==","value":"MQ=="}}]}}'
        )
    )
    assert batch.revision == 4
    assert [(e.kind, e.kv.key) for e in batch.events] == [("DELETE", b"a"), ("PUT", b"b")]


@pytest.mark.parametrize(
    ("url", "address"),
    [
        ("http://127.0.0.1:2379", "127.0.0.1:2379"),
        ("https://etcd.example:2379", "etcd.example:2379"),
        ("127.0.0.1:2379/", "127.0.0.1:2379"),
    ],
)
def test_endpoint_address(url: str, address: str) -> None:
    assert endpoint_address(url) == address


@pytest.mark.parametrize("url", ["https://h", "http://h", ""])
def test_bad_endpoints(url: str) -> None:
    with pytest.raises(ValueError, match=r"not <addr>:<port>"):
        endpoint_address(url)
