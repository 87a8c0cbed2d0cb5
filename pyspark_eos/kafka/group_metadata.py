"""librdkafka's consumer-group metadata, the bytes a transactional producer sends with offsets.

confluent-kafka hands the metadata over as an opaque serialized blob (it pickles, and works in
another process). Its layout is librdkafka's private format, read here and nowhere else:
``CGMDv2:`` + native int32 generation + group NUL + member NUL + a byte that is 0 when an
instance id follows + [instance NUL].
"""
from __future__ import annotations

import struct

from ..errors import EosKafkaError

_METADATA_MAGIC = b"CGMDv2:"


def parse_group_metadata(metadata: bytes) -> tuple[int, str, str, str | None]:
    """(generation, group id, member id, instance id) from librdkafka's serialized metadata."""
    if not metadata.startswith(_METADATA_MAGIC):
        raise EosKafkaError(f"unrecognised consumer group metadata {metadata[:16]!r}: is confluent-kafka 2.x installed?")
    body = metadata[len(_METADATA_MAGIC):]
    (generation,) = struct.unpack("=i", body[:4])
    group, member, rest = body[4:].split(b"\0", 2)
    instance = rest[1:].split(b"\0", 1)[0].decode() if rest[:1] == b"\0" else None
    return generation, group.decode(), member.decode(), instance
