"""Replicas and failover coordinated by etcd (docs/replication.md).

``etcd`` is the v3 client (JSON gateway over the project's HTTP client),
``etcd_process`` starts a real etcd for tests and benchmarks, ``keys`` is the key
layout under a cluster name, ``placement`` and ``isr`` are the sans-IO decisions
(where replicas go, who leads, what is committed), ``membership`` and
``coordinator`` the tasks that apply them through etcd.
"""
