"""Types of the optional C module (src/trionsq/_speedups.c); see trionsq.speedups."""

from array import array
from collections.abc import Callable, Sequence
from typing import Final

from typing_extensions import Buffer

from trionsq.protocol.commands import ExtMessage

from .broker.channel import Delivery
from .protocol.tubemq import Frame, FrameError
from .queues.record import Record

# Each function below repeats the signature of its pure-Python twin (named above it) on
# purpose: a C function has no Python signature to import, and the stub keeps its
# arguments positional-only as the C entry takes them.

FIXED_SIZE: Final[int]
MESSAGE_HEAD: Final[int]

# keyed publishing (issue 32), _speedups_publish.c
def key_digests(keys: Sequence[str | None], /) -> list[bytes | None] | None: ...

# twin of protocol.keyed_parts._read_keyed_parts_py
def read_keyed_parts(
    data: bytes,
    at: int,
    count: int,
    budget: int,
    max_msg: int,
    make: type[ExtMessage],
    out: list[ExtMessage],
    /,
) -> tuple[int, int, int, bool]: ...

# twin of queues.record_codec._encode_general_py (and of encode_plain below, plus exts)
def encode_ext(
    bodies: Sequence[bytes],
    exts: Sequence[bytes],
    ext_version: int,
    timestamp: int,
    first_id: int,
    offset: int,
    trace_ids: Sequence[int] | None,
    make: type[Record],
    /,
) -> tuple[bytes, list[Record], list[int]] | None: ...

# twin of spark.keyed_chunks._keyed_chunks_py
def keyed_chunks(
    offsets: Buffer,
    data: Buffer,
    first: int,
    count: int,
    wide: bool,
    prefix: bytes,
    extra: bytes,
    seen: dict[bytes, int],
    partitions: int,
    batch_size: int,
    /,
) -> list[tuple[int, int, bytes]]: ...
def blake2b(data: Buffer, /) -> bytes: ...

# a replica's copies (issue 35), _speedups_replica.c
# twin of queues.record_runs._scan_copies_py
def scan_copies(
    data: bytes, offset: int, first_id: int, /
) -> tuple[int, int, array[int], array[int]]: ...

# a plain PUB's append (issue 37), _speedups_append.c
# twin of queues.record_codec._append_record_py
def append_record(
    fd: int, body: bytes, timestamp: int, internal_id: int, offset: int, make: type[Record], /
) -> Record: ...

# the consume path's

# twin of queues.record_codec._decode_run_py
def decode_run(
    buffer: bytes,
    at: int,
    base: int,
    from_id: int,
    wanted: int,
    budget: int,
    make: type[Record],
    out: list[Record],
    /,
) -> tuple[int, int, int, bool]: ...

# twin of queues.record_codec._encode_plain_py (plus make)
def encode_plain(
    bodies: Sequence[bytes],
    timestamp: int,
    first_id: int,
    offset: int,
    trace_ids: Sequence[int] | None,
    make: type[Record],
    /,
) -> tuple[bytes, list[Record], list[int]] | None: ...
def hex_id_frames(deliveries: Sequence[Delivery], /) -> bytes: ...

# twin of protocol.tubemq._split_frames_py
def tubemq_frames(
    buffer: bytes,
    pos: int,
    limit: int,
    longest: int,
    make: type[Frame],
    out: list[Frame | FrameError],
    /,
) -> int: ...

# twin of protocol.tubemq_sends._send_run_py
def tubemq_send_run(
    frames: list[Frame | FrameError],
    start: int,
    make: type[Frame],
    prefix: bytes,
    method_first: bytes,
    leads: dict[int, bytes | None],
    lead_for: Callable[[int], bytes | None],
    tag: bytes,
    /,
) -> tuple[int, list[int], bytes]: ...
def crc32(data: bytes, /) -> int: ...
