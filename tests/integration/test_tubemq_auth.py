"""TubeMQ's authorization over trionsq's AUTH (an auth server on real sockets): the
master authenticates a client's user name as the AUTH secret and checks its grants;
the token it hands back (with the visit token) lets the client into the broker."""

from __future__ import annotations

from typing import TYPE_CHECKING

from trionsq.protocol.tubemq import Method, Service
from trionsq.protocol.tubemq_formats import ErrCode, PartitionRef
from trionsq.protocol.tubemq_proto import broker_pb2, master_pb2

from ..auth_server import Reply, grant, start_auth_server
from .tubemq import start_tubemq

if TYPE_CHECKING:
    import trio

    from .tubemq import TubeClients

WRITER = grant([{"topic": "orders", "channels": [".*"], "permissions": ["publish"]}])
READER = grant([{"topic": "orders", "channels": ["billing"], "permissions": ["subscribe"]}])


def certificate(user: str) -> master_pb2.MasterCertificateInfo:
    return master_pb2.MasterCertificateInfo(
        authInfo=master_pb2.AuthenticateInfo(
            userName=user, timestamp=1, nonce=2, othParams="", signature="sig"
        )
    )


async def test_producers_and_consumers_pass_auth_with_their_grants_only(
    nursery: trio.Nursery, tube_clients: TubeClients
) -> None:
    server = await start_auth_server(
        nursery, {"writer": WRITER, "reader": READER}, default=Reply(status=403)
    )
    addresses = await start_tubemq(
        nursery, auth_http_addresses=(server.address,), group_rebalance_delay=0
    )
    addresses.broker.topic("orders")
    addresses.broker.topic("audit")
    master, broker = await tube_clients.pair(addresses)

    async def register(user: str | None, topics: list[str]) -> master_pb2.RegisterResponseM2P:
        request = master_pb2.RegisterRequestP2M(
            clientId="p", topicList=topics, brokerCheckSum=-1, hostName="h"
        )
        if user is not None:
            request.authInfo.CopyFrom(certificate(user))
        return await master.call(
            Service.MASTER, Method.PRODUCER_REGISTER, request, master_pb2.RegisterResponseM2P
        )

    anonymous = await register(None, ["orders"])
    assert (anonymous.errCode, anonymous.errMsg) == (
        ErrCode.CERTIFICATE_FAILURE,
        "Server required MasterCertificateInfo!",
    )
    stranger = await register("stranger", ["orders"])
    assert (stranger.errCode, stranger.errMsg) == (
        ErrCode.CERTIFICATE_FAILURE,
        "Illegal value: userName or password is not correct!",
    )
    elsewhere = await register("writer", ["orders", "audit"])
    assert (elsewhere.errCode, elsewhere.errMsg) == (
        ErrCode.FORBIDDEN,
        "Not authorized to produce to topic audit",
    )
    allowed = await register("writer", ["orders"])
    assert allowed.success
    token = allowed.authorizedInfo.authAuthorizedToken
    visit = allowed.authorizedInfo.visitAuthorizedToken
    assert token
    assert [r.path for r in server.requests][-1].startswith("/auth")

    async def send(info: broker_pb2.AuthorizedInfo | None) -> broker_pb2.SendMessageResponseB2P:
        request = broker.message_request("p", "orders", 0, b"m")
        if info is not None:
            request.authInfo.CopyFrom(info)
        return await broker.call(
            Service.BROKER_WRITE, Method.SEND_MESSAGE, request, broker_pb2.SendMessageResponseB2P
        )

    bare = await send(None)
    assert (bare.errCode, bare.errMsg) == (415, "Authorized Info is required!")
    wrong_visit = await send(broker_pb2.AuthorizedInfo(visitAuthorizedToken=visit + 1))
    assert wrong_visit.errMsg == "Visit Authorized Token is invalid!"
    no_token = await send(broker_pb2.AuthorizedInfo(visitAuthorizedToken=visit))
    assert no_token.errMsg == "authAuthorizedToken is Blank!"
    good = broker_pb2.AuthorizedInfo(visitAuthorizedToken=visit, authAuthorizedToken=token)
    assert (await send(good)).success

    # a consumer: its group's grant lets it register with the master and at the broker
    consumer = master_pb2.RegisterRequestC2M(
        clientId="c", groupName="billing", hostName="h", topicList=["orders"]
    )
    consumer.authInfo.CopyFrom(certificate("reader"))
    joined = await master.call(
        Service.MASTER, Method.CONSUMER_REGISTER, consumer, master_pb2.RegisterResponseM2C
    )
    assert joined.success, joined
    other_group = master_pb2.RegisterRequestC2M()
    other_group.CopyFrom(consumer)
    other_group.groupName = "other"
    refused = await master.call(
        Service.MASTER, Method.CONSUMER_REGISTER, other_group, master_pb2.RegisterResponseM2C
    )
    assert (refused.errCode, refused.errMsg) == (
        ErrCode.FORBIDDEN,
        "Not authorized to consume topic orders as group other",
    )
    beat = await master.call(
        Service.MASTER,
        Method.CONSUMER_HEARTBEAT,
        master_pb2.HeartRequestC2M(
            clientId="c",
            groupName="billing",
            reportSubscribeInfo=False,
            authInfo=master_pb2.MasterCertificateInfo(
                authorizedToken=joined.authorizedInfo.authAuthorizedToken
            ),
        ),
        master_pb2.HeartResponseM2C,
    )
    assert beat.success, beat
    ref = PartitionRef(0, "", 0, "orders", 0)
    hold = broker_pb2.RegisterRequestC2B(
        opType=31,
        clientId="c",
        groupName="billing",
        topicName="orders",
        partitionId=0,
        readStatus=0,
    )
    refused_hold = await broker.call(
        Service.BROKER_READ, Method.BROKER_CONSUMER_REGISTER, hold, broker_pb2.RegisterResponseB2C
    )
    assert (refused_hold.errCode, refused_hold.errMsg) == (415, "Authorized Info is required!")
    hold.authInfo.CopyFrom(
        broker_pb2.AuthorizedInfo(
            visitAuthorizedToken=visit,
            authAuthorizedToken=joined.authorizedInfo.authAuthorizedToken,
        )
    )
    taken = await broker.call(
        Service.BROKER_READ, Method.BROKER_CONSUMER_REGISTER, hold, broker_pb2.RegisterResponseB2C
    )
    assert taken.success, taken
    pack = await broker.get_message("c", "billing", ref)
    assert [m.payLoadData for m in pack.messages] == [b"m"]
