"""Decoding the records Kafka's coordinators keep in their internal topics.

confluent-kafka's AdminClient has no ListTransactions/DescribeTransactions (KIP-664) and does not
return a classic group's generation, but both live in compacted internal topics any client with
Read on them can consume: the transaction coordinator writes one ``TransactionLogValue`` per
transactional id to ``__transaction_state``, the group coordinator one ``GroupMetadataValue`` per
classic group to ``__consumer_offsets``. A key or value starts with its int16 record version;
the schemas are Kafka's ``TransactionLogKey/Value.json`` and ``GroupMetadataKey/Value.json``
(value versions 1+ and 4+ use the flexible encoding: varint lengths and tagged fields).
"""
from __future__ import annotations

import struct
from dataclasses import dataclass

TRANSACTION_LOG_KEY = 0
GROUP_METADATA_KEY = 2

# Kafka's TransactionState ids.
TRANSACTION_STATES = ("Empty", "Ongoing", "PrepareCommit", "PrepareAbort", "CompleteCommit", "CompleteAbort",
                      "Dead", "PrepareEpochFence")


class _Reader:
    def __init__(self, data: bytes, flexible: bool = False):
        self.data, self.position, self.flexible = data, 0, flexible

    def _unpack(self, fmt: str):
        (value,) = struct.unpack_from(fmt, self.data, self.position)
        self.position += struct.calcsize(fmt)
        return value

    def int8(self) -> int:
        return self._unpack(">b")

    def int16(self) -> int:
        return self._unpack(">h")

    def int32(self) -> int:
        return self._unpack(">i")

    def int64(self) -> int:
        return self._unpack(">q")

    def uvarint(self) -> int:
        shift = value = 0
        while True:
            byte = self.data[self.position]
            self.position += 1
            value |= (byte & 0x7F) << shift
            if not byte & 0x80:
                return value
            shift += 7

    def _length(self, fixed) -> int:
        """A string, bytes or array length (-1 for null): a varint of length + 1 when flexible."""
        return self.uvarint() - 1 if self.flexible else fixed()

    def string(self) -> str | None:
        length = self._length(self.int16)
        if length < 0:
            return None
        text = self.data[self.position:self.position + length].decode()
        self.position += length
        return text

    def bytes(self) -> bytes | None:
        length = self._length(self.int32)
        if length < 0:
            return None
        self.position += length
        return self.data[self.position - length:self.position]

    def array(self, element) -> list | None:
        count = self._length(self.int32)
        return None if count < 0 else [element() for _ in range(count)]

    def struct_end(self) -> None:
        """Skip a flexible struct's tagged fields (none of them is needed here)."""
        if self.flexible:
            for _ in range(self.uvarint()):
                self.uvarint()
                self.position += self.uvarint()


def record_key(data: bytes) -> tuple[int, str] | None:
    """(key type, transactional id or group) of a coordinator record key; None for other key types."""
    reader = _Reader(data)
    kind = reader.int16()
    if kind not in (TRANSACTION_LOG_KEY, GROUP_METADATA_KEY):
        return None
    return kind, reader.string()


@dataclass(frozen=True)
class TransactionState:
    transactional_id: str
    producer_id: int
    producer_epoch: int
    timeout_ms: int
    state: str
    partitions: tuple[str, ...]  # "topic-partition" of the transaction's partitions
    last_update_ms: int
    start_ms: int


def transaction_state(transactional_id: str, value: bytes) -> TransactionState:
    version = struct.unpack_from(">h", value)[0]
    reader = _Reader(value[2:], flexible=version >= 1)
    producer_id, epoch, timeout, status = reader.int64(), reader.int16(), reader.int32(), reader.int8()

    def partitions_of_topic() -> list[str]:
        topic = reader.string()
        ids = reader.array(reader.int32)
        reader.struct_end()
        return [f"{topic}-{partition}" for partition in ids]

    topics = reader.array(partitions_of_topic) or []
    last_update, start = reader.int64(), reader.int64()
    state = TRANSACTION_STATES[status] if 0 <= status < len(TRANSACTION_STATES) else f"unknown({status})"
    return TransactionState(transactional_id, producer_id, epoch, timeout, state,
                            tuple(name for topic in topics for name in topic), last_update, start)


@dataclass(frozen=True)
class GroupMetadata:
    protocol_type: str
    generation: int
    protocol: str | None
    leader: str | None
    members: tuple[tuple[str, str | None], ...]  # (member id, group instance id)


def group_metadata(value: bytes) -> GroupMetadata:
    version = struct.unpack_from(">h", value)[0]
    reader = _Reader(value[2:], flexible=version >= 4)
    protocol_type, generation, protocol, leader = reader.string(), reader.int32(), reader.string(), reader.string()
    if version >= 2:
        reader.int64()  # currentStateTimestamp

    def member() -> tuple[str, str | None]:
        member_id = reader.string()
        instance_id = reader.string() if version >= 3 else None
        reader.string(), reader.string()  # clientId, clientHost
        if version >= 1:
            reader.int32()  # rebalanceTimeout
        reader.int32(), reader.bytes(), reader.bytes()  # sessionTimeout, subscription, assignment
        reader.struct_end()
        return member_id, instance_id

    members = reader.array(member) or []
    return GroupMetadata(protocol_type, generation, protocol, leader, tuple(members))


def java_string_hash(text: str) -> int:
    """Java's String.hashCode (UTF-16 code units, 32-bit overflow)."""
    encoded = text.encode("utf-16-be")
    value = 0
    for index in range(0, len(encoded), 2):
        value = (31 * value + int.from_bytes(encoded[index:index + 2], "big")) & 0xFFFFFFFF
    return value - (1 << 32) if value >= 1 << 31 else value


def coordinator_partition(key: str, partitions: int) -> int:
    """The internal-topic partition a group or transactional id lives in (Kafka's
    ``Utils.abs(key.hashCode()) % partitions``, where abs(Integer.MIN_VALUE) is 0)."""
    hashed = java_string_hash(key)
    return (0 if hashed == -(1 << 31) else abs(hashed)) % partitions
