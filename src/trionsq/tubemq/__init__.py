"""TubeMQ's client RPC as another face of the broker (docs/tubemq.md).

A TubeMQ SDK pointed at ``--tubemq-master-address`` registers its producers and
consumers here and is sent to ``--tubemq-broker-address`` for messages; both are
served by this process, over the same topics, partitions and channels as NSQ's
protocol and HTTP. A TubeMQ consumer group is a channel, dealt over its members by
the broker's consumer-group engine (through :mod:`.groups`); a pull takes messages
through the channel's own delivery machinery (PULL credit, in-flight table), so a
confirmed pack is finished exactly once and an unconfirmed one goes back.

Modules: :mod:`.leases` (pure deadline table), :mod:`.messages` (TubeMQ data <-> NSQ
records), :mod:`.groups` (the adapter to the group engine, and a consumer's seat on
a partition), :mod:`.node` (the state both services share, and its timer),
:mod:`.master` and :mod:`.broker_service` (the calls), :mod:`.connection` (one TCP
connection: a reader and a writer task), :mod:`.serve` (the listeners).
"""
