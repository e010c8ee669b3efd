"""Dispatch: one router task per channel moving batches of messages to ready consumers.

Design §4 (batching, tag routing, ordered partitions) and §5 (the expiry task whose
cancel-scope deadline follows the earliest in-flight or deferred deadline).
"""
