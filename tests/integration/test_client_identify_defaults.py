"""Every client's default IDENTIFY is accepted by a default broker (issue 13, point 3).

Each body is what that client sends when left at its defaults, key for key (read from
its source; host names and pids are placeholders). The table and the sources are in
docs/protocol.md, "What clients send in IDENTIFY". A broker that refuses one of these
refuses every connection that client makes.
"""

from __future__ import annotations

import json
import struct
from typing import TYPE_CHECKING

import pytest

from trionsq import NsqdConfig
from trionsq.protocol import Fin, Pub, Rdy, Sub
from trionsq.protocol.client import MessageFrame, Response

from .raw import next_frame, next_message, ok

if TYPE_CHECKING:
    from trionsq.nursery_tree import BoundAddresses
    from trionsq.testing import ProtocolClient


def go_map(**fields: object) -> bytes:
    """A Go ``map[string]interface{}`` through encoding/json: keys sorted, no spaces."""
    return json.dumps(fields, sort_keys=True, separators=(",", ":")).encode()


UPSTREAM_GO_NSQ = go_map(  # nsqio/go-nsq 1.1.0, Conn.identify
    client_id="worker",
    hostname="worker.example.com",
    user_agent="go-nsq/1.1.0",
    short_id="worker",
    long_id="worker.example.com",
    tls_v1=False,
    deflate=False,
    deflate_level=6,
    snappy=False,
    feature_negotiation=True,
    heartbeat_interval=30_000,
    sample_rate=0,
    output_buffer_size=16_384,
    output_buffer_timeout=250,
    msg_timeout=0,
    topology_region="",
    topology_zone="",
)
YOUZAN_GO_NSQ = go_map(  # youzan/go-nsq 1.7.12 HA, Conn.identify (defaults since 2019)
    client_id="4242",
    hostname="worker.example.com",
    user_agent="go-nsq/1.7.12 HA",
    short_id="4242",
    long_id="worker.example.com",
    tls_v1=False,
    deflate=False,
    deflate_level=6,
    snappy=False,
    multiplexing=False,
    feature_negotiation=True,
    heartbeat_interval=30_000,
    sample_rate=0,
    output_buffer_size=0,
    output_buffer_timeout=150,
    msg_timeout=0,
    desired_tag="",
)
YOUZAN_GO_NSQ_10MS = go_map(  # the report: the same client with 10 ms
    **{**json.loads(YOUZAN_GO_NSQ), "output_buffer_timeout": 10}
)
YOUZAN_JAVA = (  # youzan/nsqJavaSDK 2.4.2.2-RELEASE, NSQConfig.identify(false), byte for byte
    b'{"client_id":"4242", "hostname":"10.0.0.7", "feature_negotiation": true, '
    b'"heartbeat_interval":30000, "msg_timeout":60000,"extend_support":false,'
    b'"user_agent": "Java/com.youzan/NSQ-Client/2.4.2.2-RELEASE", "ext_filter":'
    b'{"type":1,"inverse":false,"filter_ext_key":"","filter_data":""}}'
)
PYNSQ = json.dumps(  # nsqio/pynsq 0.9.1, AsyncConn._on_connect (msg_timeout only if set)
    {
        "short_id": "worker",
        "long_id": "worker.example.com",
        "client_id": "worker",
        "hostname": "worker.example.com",
        "heartbeat_interval": 30_000,
        "feature_negotiation": True,
        "tls_v1": False,
        "snappy": False,
        "deflate": False,
        "deflate_level": 6,
        "output_buffer_timeout": 250,
        "output_buffer_size": 16_384,
        "sample_rate": 0,
        "user_agent": "pynsq/0.9.1",
    }
).encode()
GNSQ = json.dumps(  # wtolson/gnsq 1.0.2, NsqdTCPClient.identify
    {
        "client_id": "worker",
        "hostname": "worker.example.com",
        "feature_negotiation": True,
        "heartbeat_interval": 30_000,
        "output_buffer_size": 16_384,
        "output_buffer_timeout": 250,
        "tls_v1": False,
        "snappy": False,
        "deflate": False,
        "deflate_level": 6,
        "sample_rate": 0,
        "user_agent": "gnsq/1.0.2",
    }
).encode()
ANSQ = json.dumps(  # list-family/ansq 0.3, attr.asdict(ConnectionFeatures())
    {
        "client_id": "worker",
        "hostname": "worker.example.com",
        "user_agent": "ansq/0.3.0",
        "deflate": False,
        "deflate_level": 6,
        "feature_negotiation": True,
        "heartbeat_interval": 30_000,
        "sample_rate": 0,
        "snappy": False,
        "tls_v1": False,
        "msg_timeout": 60_000,
    }
).encode()
NSQJS = json.dumps(  # dudleycarr/nsqjs 0.13.0, NSQDConnection.identify (null keys dropped)
    {
        "client_id": "worker",
        "deflate": False,
        "deflate_level": 6,
        "feature_negotiation": True,
        "heartbeat_interval": 30_000,
        "hostname": "worker.example.com",
        "long_id": "worker.example.com",
        "short_id": "worker",
        "snappy": False,
        "tls_v1": False,
        "user_agent": "nsqjs/0.13.0",
    },
    separators=(",", ":"),
).encode()


@pytest.fixture
def nsqd_config() -> NsqdConfig:
    """nsqd's own output buffer default (250 ms), which a loopback broker lowers to
    1 ms: the clients that send no ``output_buffer_timeout`` must be told nsqd's."""
    return NsqdConfig.loopback(output_buffer_timeout=0.25)


CLIENTS = [
    pytest.param(UPSTREAM_GO_NSQ, 16_384, 250, id="go-nsq"),
    pytest.param(YOUZAN_GO_NSQ, 16_384, 150, id="youzan-go-nsq"),
    pytest.param(YOUZAN_GO_NSQ_10MS, 16_384, 10, id="youzan-go-nsq-10ms"),
    pytest.param(YOUZAN_JAVA, 16_384, 250, id="youzan-java"),
    pytest.param(PYNSQ, 16_384, 250, id="pynsq"),
    pytest.param(GNSQ, 16_384, 250, id="gnsq"),
    pytest.param(ANSQ, 16_384, 250, id="ansq"),
    pytest.param(NSQJS, 16_384, 250, id="nsqjs"),
]


@pytest.mark.parametrize(("body", "buffer_size", "buffer_timeout"), CLIENTS)
async def test_a_clients_default_identify_is_accepted_and_the_connection_works(
    nsqd: BoundAddresses,
    nsqd_client: ProtocolClient,
    body: bytes,
    buffer_size: int,
    buffer_timeout: int,
) -> None:
    client = nsqd_client
    await client.stream.send_all(b"IDENTIFY\n" + struct.pack(">i", len(body)) + body)
    reply = await next_frame(client)
    assert isinstance(reply, Response), reply  # an ErrorReply here is the bug
    settled = json.loads(reply.data)
    assert settled["output_buffer_size"] == buffer_size
    assert settled["output_buffer_timeout"] == buffer_timeout
    assert settled["msg_timeout"] == 60_000
    assert (settled["tls_v1"], settled["snappy"], settled["deflate"]) == (False, False, False)

    await client.send(Pub("defaults", body))
    assert ok(await next_frame(client))
    await client.send(Sub("defaults", "ch"))
    assert ok(await next_frame(client))
    await client.send(Rdy(1))
    message = await next_message(client)
    assert message.body == body
    await client.send(Fin(message.id), Pub("defaults", b"after the FIN"))
    frames = [await next_frame(client), await next_frame(client)]  # OK and message, any order
    assert sum(ok(frame) for frame in frames) == 1  # the FIN drew no error
    (delivered,) = [frame for frame in frames if isinstance(frame, MessageFrame)]
    assert delivered.message.body == b"after the FIN"
