"""Types of the optional C module (src/trionsq/_speedups.c); see trionsq.speedups."""

from collections.abc import Sequence
from typing import Final

from typing_extensions import Buffer

from .broker.channel import Delivery
from .protocol.keyed_parts import _read_keyed_parts_py
from .protocol.tubemq import _split_frames_py
from .protocol.tubemq_sends import _send_run_py
from .protocol.whole_publishes import _mpub_bodies_py
from .queues.record import Record
from .queues.record_codec import _append_record_py, _decode_run_py
from .queues.record_runs import _scan_copies_py
from .spark.keyed_chunks import _keyed_chunks_py

# A C function has no Python signature to import: where a pure-Python twin takes the
# same arguments, its signature is the C function's (the C entry takes them positionally).

FIXED_SIZE: Final[int]
MESSAGE_HEAD: Final[int]

# keyed publishing (issue 32), _speedups_publish.c
def key_digests(keys: Sequence[str | None], /) -> list[bytes | None] | None: ...

read_keyed_parts = _read_keyed_parts_py
keyed_chunks = _keyed_chunks_py

def blake2b(data: Buffer, /) -> bytes: ...

# twin of queues.record_codec._encode_general_py, with its arguments in the C order
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

# a replica's copies (issue 35), _speedups_replica.c
scan_copies = _scan_copies_py

# a plain PUB's append (issue 37), _speedups_append.c
append_record = _append_record_py

# an MPUB's bodies on the publish fast path, _speedups_bodies.c
mpub_bodies = _mpub_bodies_py

# the consume path's
decode_run = _decode_run_py

# twin of queues.record_codec._encode_plain_py, plus make
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
def binary_id_frames(deliveries: Sequence[Delivery], /) -> bytes: ...

# TubeMQ's frames and SendMessage runs (issue 36)
tubemq_frames = _split_frames_py
tubemq_send_run = _send_run_py

def use_record_layout(cls: type[Record], names: Sequence[str], /) -> None: ...
def crc32(data: bytes, /) -> int: ...
