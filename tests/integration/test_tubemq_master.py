"""TubeMQ's master service over real sockets: what producers and consumers are told,
field by field, since TubeMQ's SDKs read proto2 replies strictly (required fields,
the broker list, the partition table in every producer heartbeat)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from trionsq.protocol.tubemq_formats import ErrCode
from trionsq.protocol.tubemq_proto import master_pb2

from .tubemq import start_tubemq

if TYPE_CHECKING:
    import trio

    from .tubemq import TubeClients


async def test_producer_register_heartbeat_and_close(
    nursery: trio.Nursery, tube_clients: TubeClients
) -> None:
    addresses = await start_tubemq(nursery)
    addresses.broker.topic("orders", partitions=4)
    addresses.broker.topic("audit")
    master = await tube_clients.open(addresses.tubemq_master)
    node_id = addresses.broker.config.node_id
    host, port = addresses.tubemq_broker or ("", 0)
    registered = await master.register_producer("p-1", ["orders", "audit", "missing"])
    visit = registered.authorizedInfo.visitAuthorizedToken
    assert registered == master_pb2.RegisterResponseM2P(
        success=True,
        errCode=200,
        errMsg="OK!",
        brokerCheckSum=registered.brokerCheckSum,
        brokerInfos=[f"{node_id}:{host}:{port}"],
        authorizedInfo=master_pb2.MasterAuthorizedInfo(visitAuthorizedToken=visit),
    )
    assert registered.brokerCheckSum > 0
    check_sum = registered.brokerCheckSum
    # a heartbeat with the current checksum gets the partition table, not the brokers
    beat = await master.producer_heartbeat("p-1", ["orders", "audit", "missing"], check_sum)
    assert beat == master_pb2.HeartResponseM2P(
        success=True,
        errCode=200,
        errMsg="OK!",
        brokerCheckSum=check_sum,
        topicInfos=[f"audit#{node_id}:1:1#1048576", f"orders#{node_id}:4:1#1048576"],
        authorizedInfo=master_pb2.MasterAuthorizedInfo(visitAuthorizedToken=visit),
    )
    # a stale checksum (a restarted SDK: -1) gets the broker list again
    stale = await master.producer_heartbeat("p-1", ["orders"], -1)
    assert list(stale.brokerInfos) == [f"{node_id}:{host}:{port}"]
    assert list(stale.topicInfos) == [f"orders#{node_id}:4:1#1048576"]
    # /stats lists it as a publishing client of the TubeMQ kind once it sent
    closed = await master.call(
        1, 3, master_pb2.CloseRequestP2M(clientId="p-1"), master_pb2.CloseResponseM2P
    )
    assert closed == master_pb2.CloseResponseM2P(success=True, errCode=200, errMsg="OK!")
    gone = await master.producer_heartbeat("p-1", ["orders"], check_sum)
    assert (gone.success, gone.errCode, gone.errMsg, gone.brokerCheckSum) == (
        False,
        ErrCode.HB_NO_NODE,
        "Invalid node id:p-1, you have to append node first!",
        -1,
    )


async def test_producer_register_refusals(nursery: trio.Nursery, tube_clients: TubeClients) -> None:
    addresses = await start_tubemq(nursery)
    master = await tube_clients.open(addresses.tubemq_master)
    blank = await master.register_producer("   ", ["t"])
    assert (blank.success, blank.errCode, blank.errMsg, blank.brokerCheckSum) == (
        False,
        ErrCode.BAD_REQUEST,
        "Request miss necessary clientId data!",
        -1,
    )
    too_many = await master.register_producer("p", [f"t{i}" for i in range(1025)])
    assert too_many.errMsg == "Booked topic's count over max value, required max count is 1024"


async def test_consumer_register_refusals(nursery: trio.Nursery, tube_clients: TubeClients) -> None:
    addresses = await start_tubemq(nursery)
    addresses.broker.topic("orders", partitions=2)
    master = await tube_clients.open(addresses.tubemq_master)
    absent = await master.register_consumer("c", "g", ["orders", "nope", "gone"])
    assert (absent.success, absent.errCode, absent.errMsg) == (
        False,
        ErrCode.TOPIC_NOT_DEPLOYED,
        "Requested topic [[gone, nope]] not deployed!",
    )
    ephemeral = await master.register_consumer("c", "g#ephemeral", ["orders"])
    assert ephemeral.errCode == ErrCode.BAD_REQUEST
    assert ephemeral.errMsg.startswith("Illegal value: groupName g#ephemeral must be")
    none = await master.register_consumer("c", "g", [])
    assert none.errMsg == "Request miss necessary subscribed topicList data!"
    unknown_group = await master.consumer_heartbeat("c", "nobody", [])
    assert (unknown_group.errCode, unknown_group.errMsg) == (
        ErrCode.HB_NO_NODE,
        "Not found groupName nobody in holder!",
    )


async def test_consumer_register_reply_and_flow_control_fields(
    nursery: trio.Nursery, tube_clients: TubeClients
) -> None:
    addresses = await start_tubemq(nursery)
    addresses.broker.topic("orders", partitions=2)
    master = await tube_clients.open(addresses.tubemq_master)
    registered = await master.register_consumer("c-1", "g", ["orders"])
    visit = registered.authorizedInfo.visitAuthorizedToken
    # the SDK sent flow-control ids: TubeMQ's "no rule" values come back (the
    # channel's rate limit is applied by the broker to each pull instead)
    assert registered == master_pb2.RegisterResponseM2C(
        success=True,
        errCode=200,
        errMsg="OK!",
        notAllocated=False,
        defFlowCheckId=-2,
        defFlowControlInfo=" ",
        groupFlowCheckId=-2,
        groupFlowControlInfo=" ",
        ssdStoreId=-2,
        qryPriorityId=-2,
        authorizedInfo=master_pb2.MasterAuthorizedInfo(visitAuthorizedToken=visit),
    )
    # one seat per partition is a client of the group's channel in /stats
    stats = addresses.broker.find_channel("orders", "g")
    assert [list(c.consumers) for c in stats] != [[], []]
