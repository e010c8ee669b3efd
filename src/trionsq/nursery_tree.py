"""Where every long-lived task of a broker process gets its parent.

The tree this module builds (design §3); a task not named here has no place in
trionsq::

    serve_nsqd(config, task_status)                  this module: builds the tree
    ├── broker nursery
    │   ├── per topic partition: log writer/sync task         queues/
    │   │   └── per channel [own CancelScope; delete = cancel]
    │   │       ├── router task    cursor -> ready consumers   dispatch/
    │   │       └── expiry task    in-flight + deferred deadlines
    │   └── metadata persister (debounced on a dirty Event)
    ├── TCP listener -> per connection nursery
    │   ├── reader task            bytes -> protocol events -> broker calls
    │   └── messagePump task       outbound buffer -> send_all; heartbeats
    ├── HTTP listener (h11 connection loop)
    ├── admin websocket listener (trio-websocket)
    └── lookupd peers: one task per lookupd address
    task_status.started(BoundAddresses(...))   # after every listener accepts

State of the build: the protocol core (``trionsq.protocol``) is in place; the broker
issue adds ``serve_nsqd`` here and the nurseries above, branch by branch.
"""

from __future__ import annotations

from typing import Final

__all__ = ["TREE"]

TREE: Final = (
    ("serve_nsqd", None),
    ("broker nursery", "serve_nsqd"),
    ("partition log writer", "broker nursery"),
    ("channel router", "partition log writer"),
    ("channel expiry", "partition log writer"),
    ("metadata persister", "broker nursery"),
    ("tcp listener", "serve_nsqd"),
    ("connection nursery", "tcp listener"),
    ("connection reader", "connection nursery"),
    ("connection message pump", "connection nursery"),
    ("http listener", "serve_nsqd"),
    ("admin websocket listener", "serve_nsqd"),
    ("lookupd peer", "serve_nsqd"),
)
"""Each long-lived task and the task or nursery that is its parent, as data, so the
tree in the docstring and the code that builds it can be checked against each other."""
