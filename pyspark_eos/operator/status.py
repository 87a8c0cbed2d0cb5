"""What an operator needs to see of an exactly-once pipeline that kafka-consumer-groups cannot show.

Per input partition: the committed offset and whether an open transaction holds it (a stable
OffsetFetch answers UNSTABLE_OFFSET_COMMIT), the last stable offset and the lag, and what the sink
stamped in the commit metadata (batch, query, generation). For the group: its state, static
members and generation. For the pipeline's transactional ids (``<prefix>.<group>.``): each one's
state and, for an open transaction, its age — read from ``__transaction_state``, the only place a
librdkafka client can see them (coordinator_records). For the pipeline's claims topic (layout 2,
protocol/claims_layout): its name and how many records its control and claims logs keep.
"""
from __future__ import annotations

import json
import logging
import time
import uuid
from dataclasses import asdict, dataclass, field

from confluent_kafka import Consumer, ConsumerGroupTopicPartitions, IsolationLevel, KafkaError, KafkaException, TopicPartition
from confluent_kafka.admin import AdminClient, OffsetSpec

from ..errors import FormatVersionError, KafkaClientError
from ..kafka.backoff import with_retries
from ..kafka.cluster import reachable_admin
from ..kafka.group_offsets import describe_group as describe_group_once, fetch_committed_once
from ..kafka.options import DEFAULT_CLAIMS_TOPIC
from ..protocol.claims_layout import CLAIMS_PARTITION, CONTROL_PARTITION, PIPELINE_PARTITIONS, pipeline_topic
from ..protocol.commit_metadata import stored_metadata
from . import coordinator_records as records

log = logging.getLogger(__name__)

TRANSACTION_LOG = "__transaction_state"
GROUP_LOG = "__consumer_offsets"
REQUEST_TIMEOUT_S = 30.0
EARLIEST = -2  # in Spark's startingOffsets JSON
# How long the first request waits for a broker to answer: librdkafka retries a refused
# connection until a request's own timeout, so a wrong address would otherwise take 30 s to say so.
CONNECT_TIMEOUT_S = 10.0


@dataclass(frozen=True)
class PartitionStatus:
    topic: str
    partition: int
    committed: int | None  # the last committed offset (None: never committed)
    pending: bool  # an open transaction holds new offsets for it
    last_stable: int | None
    lag: int | None
    batch: str | None = None
    query: str | None = None
    generation: int | None = None


@dataclass(frozen=True)
class MemberStatus:
    member_id: str
    instance_id: str | None
    client_id: str
    host: str
    assignment: tuple[str, ...]


@dataclass(frozen=True)
class TransactionStatus:
    transactional_id: str
    state: str
    producer_id: int
    producer_epoch: int
    timeout_ms: int
    partitions: tuple[str, ...]
    open_for_s: float | None  # an Ongoing transaction's age
    updated_s_ago: float


@dataclass(frozen=True)
class ClaimsStatus:
    """The pipeline's own claims topic: records kept in its control log (plans, generation stamps,
    announcements) and its claims log (claims, releases); None while it does not exist."""

    topic: str
    control_records: int | None
    claims_records: int | None


@dataclass
class GroupStatus:
    group: str
    transactional_id_prefix: str
    state: str
    generation: int | None
    members: list[MemberStatus]
    partitions: list[PartitionStatus]
    transactions: list[TransactionStatus]
    notes: list[str] = field(default_factory=list)  # what could not be read, and why
    # The group's position as Spark's startingOffsets JSON, for going back to Spark's Kafka source
    starting_offsets: dict[str, dict[str, int]] | None = None
    claims: ClaimsStatus | None = None

    def to_json(self) -> str:
        return json.dumps(asdict(self), indent=2)


@dataclass(frozen=True)
class ClusterAccess:
    """How to reach the cluster: librdkafka settings, security included, as the connector's kafka.* options."""

    bootstrap_servers: str
    config: dict[str, str] = field(default_factory=dict)
    connect_timeout_s: float = CONNECT_TIMEOUT_S

    def client_config(self) -> dict[str, str]:
        return {**self.config, "bootstrap.servers": self.bootstrap_servers}

    def admin(self) -> AdminClient:
        """An AdminClient whose first request has shown that a broker answers."""
        return reachable_admin(self.config, self.bootstrap_servers, self.connect_timeout_s,
                               bound_by="--connect-timeout")


def gather(access: ClusterAccess, group: str, transactional_id_prefix: str = "eos-kafka",
           topics: tuple[str, ...] = (), claims_topic: str = DEFAULT_CLAIMS_TOPIC) -> GroupStatus:
    admin = access.admin()
    description = describe_group(admin, group, access)
    members = [_member(member) for member in description.members]
    notes: list[str] = []
    generation = _generation(access, group, notes)
    wanted = set(topics) | {name.rsplit("-", 1)[0] for member in members for name in member.assignment}
    try:
        partitions = _partitions(admin, group, wanted, notes)
    except KafkaException as error:
        raise KafkaClientError(f"reading the offsets of group {group!r} failed: {error.args[0]}; the principal "
                               "needs DESCRIBE on the group and the input topics") from error
    transactions = _transactions(access, f"{transactional_id_prefix}.{group}.", notes)
    return GroupStatus(group, transactional_id_prefix, description.state.name, generation, members, partitions,
                       transactions, notes, starting_offsets(partitions), _claims(admin, claims_topic, group, notes))


def _claims(admin: AdminClient, claims_topic: str, group: str, notes: list[str]) -> ClaimsStatus:
    topic = pipeline_topic(claims_topic, group)
    if len(_topic_partitions(admin, topic)) != PIPELINE_PARTITIONS:  # not there yet (or not eos-kafka's)
        return ClaimsStatus(topic, None, None)
    keys = [(topic, CONTROL_PARTITION), (topic, CLAIMS_PARTITION)]
    try:
        start, end = listed_offsets(admin, keys, OffsetSpec.earliest()), listed_offsets(admin, keys)
    except KafkaException as error:
        notes.append(f"the claims topic {topic} could not be read ({error.args[0]}): DESCRIBE on it is needed")
        return ClaimsStatus(topic, None, None)
    control, claims = (end[key] - start[key] for key in keys)
    return ClaimsStatus(topic, control, claims)


def starting_offsets(partitions: list[PartitionStatus]) -> dict[str, dict[str, int]] | None:
    """The group's position as Spark's ``startingOffsets`` JSON, for going back to Spark's Kafka
    connector (or to an eos-kafka query without the group): each partition's committed offset, -2
    (earliest) where the group has none, since Spark wants every partition named. None while an
    open transaction holds some of them: their offsets are about to change."""
    if not partitions or any(p.pending for p in partitions):
        return None
    offsets: dict[str, dict[str, int]] = {}
    for p in partitions:
        offsets.setdefault(p.topic, {})[str(p.partition)] = p.committed if p.committed is not None else EARLIEST
    return offsets


def describe_group(admin: AdminClient, group: str, access: ClusterAccess):
    try:
        # Retried: a group's coordinator answers NOT_COORDINATOR while it loads (a new group, a broker
        # that just started or took the coordinator over).
        return with_retries(lambda: describe_group_once(admin, group, REQUEST_TIMEOUT_S),
                            f"describing consumer group {group!r}", timeout_s=REQUEST_TIMEOUT_S)
    except KafkaException as error:
        raise KafkaClientError(
            f"describing consumer group {group!r} at {access.bootstrap_servers} failed: {error.args[0]}; check "
            "the address, the listener and the security settings (--config), and that the principal may "
            "DESCRIBE the group"
        ) from error


def _member(member) -> MemberStatus:
    assignment = member.assignment.topic_partitions if member.assignment else []
    return MemberStatus(member.member_id, member.group_instance_id, member.client_id, member.host,
                        tuple(sorted(f"{tp.topic}-{tp.partition}" for tp in assignment)))


def _partitions(admin: AdminClient, group: str, topics: set[str], notes: list[str]) -> list[PartitionStatus]:
    committed = _committed(admin, group)
    topics = topics | {topic for topic, _ in committed}
    keys = sorted(set(committed) | {key for topic in topics for key in _topic_partitions(admin, topic)})
    if not keys:
        return []
    stable = fetch_committed_once(admin, group, keys, REQUEST_TIMEOUT_S)
    if stable.retriable is not None:
        notes.append(f"whether open transactions hold offsets is unknown: {stable.reason()}")
    last_stable = listed_offsets(admin, keys)
    unreadable: dict[tuple[str, int], FormatVersionError] = {}
    statuses = [_partition_status(key, committed.get(key), key in stable.unstable, last_stable.get(key), unreadable)
                for key in keys]
    if unreadable:
        error = next(iter(unreadable.values()))
        notes.append(f"shown without batch, query and generation for {', '.join(f'{t}-{p}' for t, p in unreadable)}: "
                     f"{error}")
    return statuses


def _committed(admin: AdminClient, group: str) -> dict[tuple[str, int], tuple[int, str]]:
    """Every partition the group has committed, without waiting for open transactions."""
    request = [ConsumerGroupTopicPartitions(group)]
    result = admin.list_consumer_group_offsets(request, request_timeout=REQUEST_TIMEOUT_S)[group].result()
    return {(tp.topic, tp.partition): (tp.offset, tp.metadata or "") for tp in result.topic_partitions
            if tp.error is None and tp.offset >= 0}


def _topic_partitions(admin: AdminClient, topic: str) -> list[tuple[str, int]]:
    metadata = admin.list_topics(topic, timeout=REQUEST_TIMEOUT_S).topics.get(topic)
    if metadata is None or metadata.error is not None:
        return []
    return [(topic, partition) for partition in metadata.partitions]


def listed_offsets(admin: AdminClient, keys: list[tuple[str, int]], spec: OffsetSpec | None = None
                   ) -> dict[tuple[str, int], int]:
    """Each partition's offset by ``spec``; by default the last stable offset (read_committed latest)."""
    request = {TopicPartition(topic, partition): spec or OffsetSpec.latest() for topic, partition in keys}
    futures = admin.list_offsets(request, isolation_level=IsolationLevel.READ_COMMITTED,
                                 request_timeout=REQUEST_TIMEOUT_S)
    return {(tp.topic, tp.partition): future.result().offset for tp, future in futures.items()}


def _partition_status(key, committed: tuple[int, str] | None, pending: bool, last_stable: int | None,
                      unreadable: dict) -> PartitionStatus:
    """``unreadable`` collects the partitions whose metadata a newer (or much older) eos-kafka
    wrote: status still shows their offsets, which any version reads."""
    offset, metadata = committed or (None, "")
    try:
        stamp = stored_metadata(metadata)
    except FormatVersionError as error:
        unreadable[key] = error
        stamp = {}
    lag = last_stable - (offset or 0) if last_stable is not None else None
    return PartitionStatus(key[0], key[1], offset, pending, last_stable, lag,
                           stamp.get("batch"), stamp.get("query"), stamp.get("generation"))


def _generation(access: ClusterAccess, group: str, notes: list[str]) -> int | None:
    latest = _read_compacted(access, GROUP_LOG, lambda count: [records.coordinator_partition(group, count)], notes,
                             lambda key: key == (records.GROUP_METADATA_KEY, group))
    value = latest.get(group)
    return records.group_metadata(value).generation if value else None


def _transactions(access: ClusterAccess, id_prefix: str, notes: list[str]) -> list[TransactionStatus]:
    latest = _read_compacted(access, TRANSACTION_LOG, lambda count: list(range(count)), notes,
                             lambda key: key[0] == records.TRANSACTION_LOG_KEY and key[1].startswith(id_prefix))
    now_ms = time.time() * 1000
    statuses = []
    for transactional_id, value in sorted(latest.items()):
        if value is None:
            continue  # expired: the coordinator wrote a tombstone
        state = records.transaction_state(transactional_id, value)
        open_for = (now_ms - state.start_ms) / 1000 if state.state == "Ongoing" and state.start_ms > 0 else None
        statuses.append(TransactionStatus(transactional_id, state.state, state.producer_id, state.producer_epoch,
                                          state.timeout_ms, state.partitions, open_for,
                                          (now_ms - state.last_update_ms) / 1000))
    return statuses


def _read_compacted(access: ClusterAccess, topic: str, choose_partitions, notes: list[str], wanted,
                    timeout_s: float = 60.0) -> dict[str, bytes | None]:
    """The latest value per key (filtered by ``wanted``) of an internal topic's chosen partitions."""
    # read_uncommitted: __consumer_offsets holds the sinks' transactional offset commits, and an
    # open transaction would stop a read_committed consumer short of the newest group metadata.
    consumer = Consumer({**access.client_config(), "group.id": f"eos-kafka-status-{uuid.uuid4().hex}",
                         "enable.auto.commit": False, "enable.partition.eof": True,
                         "isolation.level": "read_uncommitted"})
    try:
        metadata = consumer.list_topics(topic, timeout=REQUEST_TIMEOUT_S).topics.get(topic)
        if metadata is None or metadata.error is not None or not metadata.partitions:
            notes.append(f"{topic} could not be read ({metadata.error if metadata else 'missing'}): the principal "
                         "needs DESCRIBE and READ on it for this part of the status")
            return {}
        chosen = choose_partitions(len(metadata.partitions))
        return _consume_to_end(consumer, topic, chosen, wanted, timeout_s, notes)
    finally:
        consumer.close()


def _consume_to_end(consumer: Consumer, topic: str, partitions: list[int], wanted, timeout_s: float,
                    notes: list[str]) -> dict[str, bytes | None]:
    remaining = {p for p in partitions if _has_records(consumer, topic, p)}
    consumer.assign([TopicPartition(topic, p, -2) for p in remaining])  # -2: from the beginning
    latest: dict[str, bytes | None] = {}
    deadline = time.monotonic() + timeout_s
    while remaining and time.monotonic() < deadline:
        message = consumer.poll(1.0)
        if message is None:
            continue
        if message.error() is not None:
            if message.error().code() == KafkaError._PARTITION_EOF:
                remaining.discard(message.partition())
                continue
            notes.append(f"reading {topic} failed: {message.error()}; the principal needs READ on it")
            return latest
        key = records.record_key(message.key()) if message.key() else None
        if key is not None and wanted(key):
            latest[key[1]] = message.value()
    if remaining:
        notes.append(f"reading {topic} did not reach its end within {timeout_s:.0f} s: this part may be stale")
    return latest


def _has_records(consumer: Consumer, topic: str, partition: int) -> bool:
    low, high = consumer.get_watermark_offsets(TopicPartition(topic, partition), timeout=REQUEST_TIMEOUT_S)
    return high > low


def render(status: GroupStatus) -> str:
    lines = [f"group {status.group}: {status.state}, generation "
             f"{status.generation if status.generation is not None else 'unknown'}, {len(status.members)} member(s)"]
    for member in status.members:
        kind = f"static {member.instance_id}" if member.instance_id else "dynamic"
        lines.append(f"  member {member.member_id} ({kind}) client {member.client_id} host {member.host}: "
                     f"{', '.join(member.assignment) or 'no partitions'}")
    lines.append("input partitions:")
    lines.append(text_table(["partition", "committed", "state", "last-stable", "lag", "batch", "query", "generation"],
                            [_partition_row(p) for p in status.partitions]))
    lines.append(f"transactional ids {status.transactional_id_prefix}.{status.group}.*:")
    lines.append(text_table(["transactional-id", "state", "producer", "epoch", "open-for", "updated", "partitions"],
                            [_transaction_row(t) for t in status.transactions]))
    lines.append(_claims_line(status.claims))
    lines.extend(f"note: {note}" for note in status.notes)
    return "\n".join(lines)


def _claims_line(claims: ClaimsStatus | None) -> str:
    if claims is None:
        return "claims topic: not read"
    if claims.control_records is None:
        return f"claims topic {claims.topic}: not there (the pipeline's first plan creates it)"
    return (f"claims topic {claims.topic}: control log {claims.control_records} record(s) kept (plans, generations, "
            f"announcements), claims log {claims.claims_records} record(s) kept (claims, releases)")


def _partition_row(p: PartitionStatus) -> list[str]:
    state = "pending (open transaction)" if p.pending else "stable" if p.committed is not None else "none"
    return [f"{p.topic}-{p.partition}", cell(p.committed), state, cell(p.last_stable), cell(p.lag),
            cell(p.batch), cell(p.query), cell(p.generation)]


def _transaction_row(t: TransactionStatus) -> list[str]:
    open_for = f"{t.open_for_s:.1f}s" if t.open_for_s is not None else "-"
    return [t.transactional_id, t.state, str(t.producer_id), str(t.producer_epoch), open_for,
            f"{t.updated_s_ago:.0f}s ago", ", ".join(t.partitions) or "-"]


def cell(value) -> str:
    return "-" if value is None else str(value)


def text_table(header: list[str], rows: list[list[str]]) -> str:
    if not rows:
        return "  (none)"
    widths = [max(len(row[i]) for row in [header, *rows]) for i in range(len(header))]
    return "\n".join("  " + "  ".join(cell.ljust(width) for cell, width in zip(row, widths)).rstrip()
                     for row in [header, *rows])
