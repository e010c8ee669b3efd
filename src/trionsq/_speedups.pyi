"""Types of the optional C module (src/trionsq/_speedups.c); see trionsq.speedups."""

from collections.abc import Callable, Sequence
from typing import Final

from .broker.channel import Delivery
from .protocol.tubemq import Frame, FrameError
from .queues.record import Record

FIXED_SIZE: Final[int]
MESSAGE_HEAD: Final[int]

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
def tubemq_frames(
    buffer: bytes,
    pos: int,
    limit: int,
    longest: int,
    make: type[Frame],
    out: list[Frame | FrameError],
    /,
) -> int: ...
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
