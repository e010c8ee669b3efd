"""Broker semantics: topics, channels and consumers as plain state (spec semantics.md).

The Trio tasks that drive these (router, expiry, connections) live in dispatch/ and
the servers; nothing in this package awaits.
"""
