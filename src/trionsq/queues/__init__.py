"""Storage: the log per topic partition, cursors per channel, in-flight and deferred tables.

Design §2 and §5. The broker issue brings the in-memory log and the in-flight table,
the durable-storage issue the segment files; both live here behind one interface.
"""
