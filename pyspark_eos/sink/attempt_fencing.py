"""Fencing layer 2: of all the attempts Spark runs of one write task, one commits.

Layer 1 (group_membership) fences *instances* of a pipeline. It cannot fence two attempts of one
task in the same run: a retry after the driver declared an executor lost (while the executor
only stalled, as in a long GC pause or a network partition) or a speculative copy. Both carry
the same plan, and with one producer per write slot they use different transactional ids, so the
broker accepts both commits; the replay check (read the group's offsets, then commit) is
check-then-act and cannot close that window by itself.

The claims protocol closes it with Kafka's own fencing primitive, ``init_transactions`` on a
transactional id (it aborts that id's open transaction and bumps its epoch; the holder's next
send_offsets or commit fails with PRODUCER_FENCED):

1. Planning appends a *plan* record to the claims topic (one partition) and stamps every input
   partition with its offset. Plans are made one after another, so a later plan has a larger
   offset: a new run's plan of a batch is newer than the dead run's plan of it. (The group
   generation cannot order runs: a static member that rejoins keeps it.)
2. An attempt's epoch is (plan offset, Spark's taskAttemptId). Before its stable read of the
   group's offsets, the attempt appends a *claim* (group, input partitions, epoch, its
   transactional id) with acks=all and reads the claims from its plan's record up to its own.
3. A claim on any of its partitions with a higher epoch: this attempt is stale; it aborts and
   fails with StaleAttemptError. A claim with a lower epoch under another transactional id and
   no release: that attempt may still commit, so this one fences its id first.
4. An attempt that ended (committed, or aborted for certain) appends a *release*, so that a later
   attempt does not fence an id a healthy worker has moved on with.

Of any two attempts, the one whose claim lands later reads the other's: if it is the newer one it
fences the older before reading the group's offsets; if it is the older one it refuses. A zombie
therefore either refuses, or finds its producer fenced, or finds the batch already committed (the
replay check). docs/model/ holds a model of this protocol checked with spin.

Claims order the attempts of one *instance* only (one driver's group membership; a claim names
its plans' membership tokens). An attempt neither refuses because of another instance's claim
nor fences it: another instance's plan can come later without being newer (an old instance not
yet told that a second one replaced it plans the batch after the new one did), and ordering by
plan offset would then fail the new instance's attempts while the old one's commits are refused.
Between instances layer 1 decides: any claim this attempt can read came after its own plan record,
so after both instances joined the group; whichever instance the group no longer knows gets
its offsets refused (FENCED_INSTANCE_ID, ILLEGAL_GENERATION), and offsets it sent before that
are waited for by the stable read.

Progress records (task_progress) have no layer 1: their groups have no members, so an attempt of
an earlier run of the query (a stalled executor's, when the query was restarted in the same
application) is not refused by any generation. Their plans are read from ``since`` instead, before
the plan's own record: back to the claims appended one transaction timeout (and a margin) before
the plan, where any older attempt's transaction has been aborted by the broker (such an attempt
delivers its records, which opens its transaction, before it claims), and no further back than the
plan under which the task last committed (an attempt of an earlier batch was fenced by the attempt
that committed it). Claims read from there are all older than the plan's: they can only be fenced.
"""
from __future__ import annotations

import json
import logging
import os
import threading
import time
from dataclasses import dataclass, replace
from typing import Iterable

from confluent_kafka import Consumer, KafkaError, KafkaException, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from ..errors import ConfigurationError, KafkaClientError, StaleAttemptError
from ..kafka.cluster import connected
from ..source.group_membership import GroupStamp
from ..kafka.fault_hooks import ATTEMPT_FENCING_OFF, switched_off
from .options import SinkOptions
from .producer_pool import close_client, init_transactional_producer, worker_client

log = logging.getLogger(__name__)

PLAN, CLAIM, RELEASE = "plan", "claim", "release"
REQUEST_TIMEOUT_S = 30.0
# Claims must outlive any attempt that could still act on them; a week is far beyond Spark's
# task and transaction timeouts. An attempt whose plan's claims are gone refuses (see _read).
CLAIMS_RETENTION_MS = 7 * 24 * 3600 * 1000

TopicPartitionKey = tuple[str, int]
# librdkafka wants a group.id even for a consumer that only assign()s; nothing is ever committed.
CLAIMS_READER_GROUP = "eos-kafka-claims-reader"


@dataclass(frozen=True)
class FencingPlan:
    """Stamped on every input partition of one plan: where that plan's claims start."""

    topic: str
    epoch: int  # the offset of the plan's record in the claims topic (its acknowledged copy's)
    # Where its attempts start reading claims, when that is before its own record: claims of an
    # earlier run that may still commit (progress plans, see the module's docstring).
    since: int | None = None

    def reading_start(self, not_before: int | None = None) -> int:
        """Where an attempt of this plan starts reading claims (never after the plan's record)."""
        if self.since is None:
            return self.epoch
        start = self.since if not_before is None else max(self.since, not_before)
        return min(self.epoch, start)


@dataclass(frozen=True, order=True)
class AttemptEpoch:
    plan: int
    attempt: int  # TaskContext.taskAttemptId(): grows within one run (one SparkContext)

    def __str__(self) -> str:
        return f"plan {self.plan} attempt {self.attempt}"


@dataclass(frozen=True)
class Claim:
    kind: str
    group: str
    partitions: frozenset[TopicPartitionKey]
    epoch: AttemptEpoch
    transactional_id: str
    task: str
    offset: int = -1
    # The GroupStamp.membership tokens of the attempt's plans: which instance of the pipeline it
    # belongs to. Empty in a claim written without them: it counts as one of this instance's.
    memberships: frozenset[str] = frozenset()

    def to_json(self) -> bytes:
        return json.dumps({"kind": self.kind, "group": self.group, "partitions": sorted(self.partitions),
                           "plan": self.epoch.plan, "attempt": self.epoch.attempt,
                           "transactional_id": self.transactional_id, "task": self.task,
                           "memberships": sorted(self.memberships)}).encode()

    def same_instance(self, other: "Claim") -> bool:
        return not self.memberships or not other.memberships or bool(self.memberships & other.memberships)

    @classmethod
    def from_message(cls, message) -> "Claim | None":
        try:
            data = json.loads(message.value())
            if data.get("kind") not in (CLAIM, RELEASE):
                return None
            return cls(data["kind"], data["group"], frozenset((t, p) for t, p in data["partitions"]),
                       AttemptEpoch(data["plan"], data["attempt"]), data["transactional_id"], data.get("task", "?"),
                       message.offset(), frozenset(data.get("memberships", ())))
        except (ValueError, KeyError, TypeError):
            return None  # a plan record, or something that is not ours


# ------------------------------------------------------------------------------ driver side

class ClaimsLog:
    """The driver's end of the claims topic: creates it once, appends a plan record per plan and a
    stamp record per generation of the group membership (sink/rebalance); a retry may write one
    twice (claims_producer)."""

    def __init__(self, bootstrap_servers: str, kafka_params: dict[str, str], topic: str):
        self.bootstrap_servers = bootstrap_servers
        self.kafka_params = kafka_params
        self.topic = topic
        self._producer: Producer | None = None
        self._consumer: Consumer | None = None
        self._lock = threading.Lock()  # planning and the group membership's thread both append
        self._prepare_error: Exception | None = None  # prepare()'s failure, for the first append to raise

    def open_plan(self, group_id: str, lookback_ms: int | None = None) -> FencingPlan:
        """Append a plan record; with ``lookback_ms`` its attempts also read the claims appended
        that long before it (an earlier run's, which no group generation fences)."""
        value = json.dumps({"kind": PLAN, "group": group_id, "pid": os.getpid()}).encode()
        appended_ms = int(time.time() * 1000)
        epoch = append(self._ready_producer(), self.topic, group_id, value)
        if lookback_ms is None:
            return FencingPlan(self.topic, epoch)
        return FencingPlan(self.topic, epoch, self._offset_at(appended_ms - lookback_ms, epoch))

    def _offset_at(self, timestamp_ms: int, epoch: int) -> int:
        """The first claims offset appended at or after ``timestamp_ms`` (at most ``epoch``)."""
        if self._consumer is None:
            self._consumer = Consumer({**self.kafka_params, "bootstrap.servers": self.bootstrap_servers,
                                       "group.id": CLAIMS_READER_GROUP, "enable.auto.commit": "false"})
        found = self._consumer.offsets_for_times([TopicPartition(self.topic, 0, max(timestamp_ms, 0))],
                                                 REQUEST_TIMEOUT_S)[0]
        if found.error is not None:
            raise KafkaClientError(f"looking up the claims topic {self.topic!r} by time failed: {found.error}; "
                                   "check that the principal may DESCRIBE and READ it")
        return epoch if found.offset < 0 else min(found.offset, epoch)

    def prepare(self) -> None:
        """Make the producer now, in the background: the membership's first stamp is appended once
        the group join ends, and a producer made then spent 60-150 ms on the claims topic and its
        metadata on that path. Made here, it does both while the group is joined
        (benchmarks/query_start.py)."""
        threading.Thread(target=self._prepare_quietly, name="eos-kafka-claims-producer", daemon=True).start()

    def _prepare_quietly(self) -> None:
        with self._lock:
            try:
                self._make_producer()
            except Exception as error:  # noqa: BLE001 - the first append raises it
                # Kept for the first append rather than tried again there: each try can take the
                # request timeout twice over, and the first append runs in the group's join, whose
                # timeout would then fail the query with a message about the group, not the cause.
                log.warning("making the claims producer for %s failed: %s", self.topic, error)
                self._prepare_error = error

    def record_stamp(self, stamp: GroupStamp) -> None:
        """Append a new generation's stamp: tasks of a plan stamped with an older generation of the
        same membership commit under it (a rebalance during their batch)."""
        offset = append(self._ready_producer(), self.topic, stamp.group_id, stamp.to_record())
        log.info("generation %d of consumer group %r recorded at %s@%d", stamp.generation, stamp.group_id,
                 self.topic, offset)

    def close(self) -> None:
        """Let go of the clients: a batch read's driver-side process outlives the read."""
        with self._lock:
            clients, self._producer, self._consumer = (self._producer, self._consumer), None, None
        for client in clients:
            if client is not None:
                close_client(client)

    def _ready_producer(self) -> Producer:
        with self._lock:
            failed, self._prepare_error = self._prepare_error, None
            if failed is not None and self._producer is None:
                raise failed  # once: a later append tries again
            return self._make_producer()

    def _make_producer(self) -> Producer:  # with self._lock held
        if self._producer is None:
            ensure_claims_topic(self.bootstrap_servers, self.kafka_params, self.topic)
            self._producer = connected(claims_producer(self.bootstrap_servers, self.kafka_params),
                                       self.bootstrap_servers, REQUEST_TIMEOUT_S, self.topic)
        return self._producer


def ensure_claims_topic(bootstrap_servers: str, kafka_params: dict[str, str], topic: str) -> None:
    # librdkafka's AdminClient is a producer, and a producer's metadata request asks the broker to
    # create a topic it does not have (allow.auto.create.topics): on a cluster that auto-creates,
    # the lookup would make the claims topic with the broker's defaults (replication 1, perhaps
    # several partitions) before create_topics below could make it as the protocol needs.
    admin = AdminClient({**kafka_params, "bootstrap.servers": bootstrap_servers, "allow.auto.create.topics": "false"})
    metadata = admin.list_topics(topic, timeout=REQUEST_TIMEOUT_S)
    if topic in metadata.topics and metadata.topics[topic].error is None:
        return
    brokers = len(metadata.brokers)
    # One partition: every claim of a plan is totally ordered against every other. An acknowledged
    # claim must survive its leader's loss (a newer attempt that misses it would not fence the
    # older one): acks=all with two in-sync replicas where the cluster has them.
    config = {"retention.ms": str(CLAIMS_RETENTION_MS), "cleanup.policy": "delete"}
    if brokers >= 3:
        config["min.insync.replicas"] = "2"
    new = NewTopic(topic, 1, min(3, brokers), config=config)
    try:
        admin.create_topics([new], operation_timeout=REQUEST_TIMEOUT_S)[topic].result(REQUEST_TIMEOUT_S)
        log.info("created the claims topic %s (1 partition, replication %d)", topic, min(3, brokers))
    except KafkaException as error:
        if error.args[0].code() == KafkaError.TOPIC_ALREADY_EXISTS:
            return
        raise KafkaClientError(
            f"creating the claims topic {topic!r} failed: {error.args[0]}; create it (1 partition) or let "
            "the pipeline's principal CREATE it, or name an existing one with the source option claimsTopic"
        ) from error


def claims_producer(bootstrap_servers: str, kafka_params: dict[str, str]) -> Producer:
    """The producer of the claims topic, on the driver (plan records, generation stamps) and on the
    executors (claims, releases). Not transactional: a claim must be visible to every other
    attempt the moment it is acknowledged.

    Not idempotent either: an idempotent producer's first record waits for a producer id, and
    librdkafka, when it asked while no broker connection was up (its bootstrap connection just
    dropped for the broker's own), asks again only on a 500 ms timer. A query's first batch waited
    that long in about half of the runs on the driver, and a worker's first claim made right after
    its producer always did (benchmarks/client_start.py). Without idempotence a retry may write a
    record twice, which no reader minds: a plan's epoch is the offset its append reports; a second
    stamp names the same generation; a second copy of a claim or release names the same attempt
    (epoch and transactional id), and claims are taken by attempt, releases as a set. One request
    in flight keeps each producer's appends in the order they were made (a release after its claim).
    """
    return Producer({**kafka_params, "bootstrap.servers": bootstrap_servers, "acks": "all",
                     "enable.idempotence": False, "max.in.flight.requests.per.connection": 1, "linger.ms": 0})


def append(producer: Producer, topic: str, key: str, value: bytes, timeout_s: float = REQUEST_TIMEOUT_S) -> int:
    """Produce one record to partition 0 and wait for its offset (acks=all)."""
    result: list = []
    producer.produce(topic, key=key.encode(), value=value, partition=0,
                     on_delivery=lambda error, message: result.append((error, message)))
    deadline = time.monotonic() + timeout_s
    while not result and time.monotonic() < deadline:
        producer.poll(0.05)
    if not result:
        raise KafkaClientError(f"appending to the claims topic {topic!r} timed out after {timeout_s:.0f} s; "
                               "check that the brokers are reachable and the principal may WRITE it")
    error, message = result[0]
    if error is not None:
        raise KafkaClientError(f"appending to the claims topic {topic!r} failed: {error.str()}; "
                               "check that the principal may WRITE it")
    return message.offset()


# ---------------------------------------------------------------------------- executor side

@dataclass
class AttemptClaim:
    """This attempt's claim, appended: ``enforce`` it, and ``release`` it once the attempt's
    transaction has ended either way (also when ``enforce`` refused)."""

    claim: Claim
    topic: str
    start: int  # the earliest plan record of the task's input: where its claims begin
    offset: int
    clients: "FencingClients"
    # The group generations recorded since the task's plans (a rebalance during the batch).
    stamps: tuple[GroupStamp, ...] = ()

    def enforce(self) -> None:
        """Refuse if a newer attempt has claimed this input; fence every older one that may commit."""
        own = self.claim
        records = _read(self.clients.consumer(), self.topic, self.start, self.offset)
        self.stamps = tuple(r for r in records if isinstance(r, GroupStamp) and r.group_id == own.group)
        overlapping = [c for c in records if isinstance(c, Claim)
                       and c.group == own.group and c.partitions & own.partitions and c.offset != self.offset]
        rivals, others = [], []
        for c in overlapping:
            (rivals if own.same_instance(c) else others).append(c)
        _log_other_instances(_unreleased(others), own)
        newer = [c for c in rivals if c.kind == CLAIM and c.epoch > own.epoch]
        if newer:
            raise StaleAttemptError(
                f"a newer attempt of this task ({newer[0].task}, {newer[0].epoch}, transactional id "
                f"{newer[0].transactional_id!r}) has claimed its input: this attempt ({own.epoch}) is stale (its "
                "executor stalled and was declared lost, or it is a speculative copy that lost the race) and refuses "
                "to commit. Nothing to do: Spark keeps the newer attempt's output"
            )
        for zombie in _unreleased_older(rivals, own):
            fence(self.clients, zombie, own)

    def newer_generation(self, stamp: GroupStamp, timeout_s: float) -> GroupStamp | None:
        """The first generation of ``stamp``'s membership newer than it recorded after this claim,
        waiting up to ``timeout_s`` for it (the driver records it once its rebalance completes)."""
        def newer(record) -> bool:
            return (isinstance(record, GroupStamp) and record.membership == stamp.membership
                    and record.generation > stamp.generation)
        if not stamp.membership:  # no token: no membership whose generations could be followed
            return None
        return _await(self.clients.consumer(), self.topic, self.offset + 1, newer, timeout_s)

    def release(self) -> None:
        # Fire and forget: a lost release costs a later attempt one needless fence, nothing more.
        released = replace(self.claim, kind=RELEASE, offset=-1)
        try:
            producer = self.clients.producer()
            producer.produce(self.topic, key=released.group.encode(), value=released.to_json(), partition=0)
            producer.poll(0)
        except (KafkaException, BufferError) as error:
            log.warning("releasing the claim of %s failed (%s); a retry may fence %s needlessly",
                        self.claim.task, error, self.claim.transactional_id)


def claim_attempt(clients: "FencingClients", plans: Iterable[FencingPlan], group: str,
                  partitions: Iterable[TopicPartitionKey], task_attempt_id: int, task: str,
                  transactional_id: str, memberships: Iterable[str] = (),
                  not_before: int | None = None) -> AttemptClaim | None:
    """Append this attempt's claim on the task's input (None while fencing is switched off).
    ``memberships``: the membership tokens of the plans' group stamps (this instance);
    ``not_before``: the plan under which the task last committed, if known (progress plans)."""
    if switched_off(ATTEMPT_FENCING_OFF):
        log.warning("%s: attempt fencing is switched off (fault injection): zombie attempts are not fenced", task)
        return None
    plans = sorted(set(plans), key=lambda p: p.epoch)
    topics = {p.topic for p in plans}
    if len(topics) != 1:
        raise ConfigurationError(f"the sources of this task use different claims topics {sorted(topics)}; "
                                 "give every eos-kafka source of a pipeline the same claimsTopic")
    topic = topics.pop()
    own = Claim(CLAIM, group, frozenset(partitions), AttemptEpoch(plans[-1].epoch, task_attempt_id),
                transactional_id, task, memberships=frozenset(m for m in memberships if m))
    offset = append(clients.producer(), topic, group, own.to_json())
    return AttemptClaim(own, topic, plans[0].reading_start(not_before), offset, clients)


def _log_other_instances(claims: list[Claim], own: Claim) -> None:
    if claims:
        first = claims[0]
        log.warning("%s (%s): %d unreleased claim(s) of another instance of this pipeline on the same input (the "
                    "first: %s, %s, transactional id %r); not fenced and not a reason to refuse: the consumer group "
                    "decides which instance's offsets it takes (keep one instance running)", own.task, own.epoch,
                    len(claims), first.task, first.epoch, first.transactional_id)


def _unreleased(claims: list[Claim]) -> list[Claim]:
    released = {(c.epoch, c.transactional_id) for c in claims if c.kind == RELEASE}
    return [c for c in claims if c.kind == CLAIM and (c.epoch, c.transactional_id) not in released]


def _unreleased_older(rivals: list[Claim], own: Claim) -> list[Claim]:
    older = {}
    for c in _unreleased(rivals):
        if c.epoch < own.epoch and c.transactional_id != own.transactional_id:
            older.setdefault(c.transactional_id, c)
    return list(older.values())


def fence(clients: "FencingClients", zombie: Claim, own: Claim) -> None:
    """init_transactions on the older attempt's id: the broker aborts its open transaction and
    bumps the id's epoch, so that attempt can neither send offsets nor commit any more."""
    started = time.monotonic()
    log.warning("%s (%s): fencing an older attempt of this task, %s (%s), by initializing its transactional "
                "id %r", own.task, own.epoch, zombie.task, zombie.epoch, zombie.transactional_id)
    # A short-lived producer: it exists only to initialize the id, and holds no transaction.
    init_transactional_producer(clients.bootstrap_servers, clients.kafka_params, zombie.transactional_id,
                                clients.transaction_timeout_ms)
    log.warning("%s: fenced %r in %.2f s; its open transaction, if any, is aborted", own.task,
                zombie.transactional_id, time.monotonic() - started)


def _read(consumer: Consumer, topic: str, start: int, last: int) -> list:
    """The claims and stamps in the claims topic from ``start`` to ``last`` inclusive."""
    if last < start:
        raise StaleAttemptError(
            f"the claims topic {topic!r} ends at {last}, before this plan's record at {start}: it was deleted "
            "and created again since the batch was planned; refusing to commit. Restart the query"
        )
    consumer.assign([TopicPartition(topic, 0, start)])
    try:
        return _read_assigned(consumer, topic, start, last)
    finally:
        # No background fetch at the partition's end while the worker does other work: the next
        # assign() would wait for it (up to fetch.wait.max.ms) before fetching from its own start.
        consumer.unassign()


def _await(consumer: Consumer, topic: str, start: int, wanted, timeout_s: float):
    """The first record from ``start`` on for which ``wanted`` is true, or None after ``timeout_s``."""
    consumer.assign([TopicPartition(topic, 0, start)])
    deadline = time.monotonic() + timeout_s
    try:
        while time.monotonic() < deadline:
            message = consumer.poll(0.2)
            if message is not None and not _skippable(message.error(), topic, start):
                record = _parse(message)
                if wanted(record):
                    return record
        return None
    finally:
        consumer.unassign()


def _parse(message) -> "Claim | GroupStamp | None":
    return Claim.from_message(message) or GroupStamp.from_record(message.value())


def _read_assigned(consumer: Consumer, topic: str, start: int, last: int) -> list:
    records: list = []
    position = start
    deadline = time.monotonic() + REQUEST_TIMEOUT_S
    while position <= last:
        if time.monotonic() > deadline:
            raise KafkaClientError(f"reading the claims topic {topic!r} from {start} to {last} timed out after "
                                   f"{REQUEST_TIMEOUT_S:.0f} s (at {position})")
        # poll, not consume(n, timeout): consume waits out its timeout unless n records arrive.
        message = consumer.poll(0.5)
        if message is None or _skippable(message.error(), topic, start):
            continue
        position = message.offset() + 1
        record = _parse(message) if message.offset() <= last else None
        if record is not None:
            records.append(record)
    return records


def _skippable(error: KafkaError | None, topic: str, start: int) -> bool:
    """True for an error to read past; raises for one that ends the read."""
    if error is None:
        return False
    if error.code() == KafkaError._AUTO_OFFSET_RESET:  # the plan's offset is below the log start
        raise StaleAttemptError(
            f"reading the claims topic {topic!r} from this plan's record at {start} failed ({error.str()}): the "
            "claims are gone (retention?), so this attempt cannot show that it is the newest; refusing to commit. "
            "Restart the query to re-plan the batch"
        )
    if error.code() == KafkaError._PARTITION_EOF or error.retriable():
        return True
    raise KafkaClientError(f"reading the claims topic {topic!r} failed: {error.str()}; check that the principal "
                           "may READ it")


class FencingClients:
    """A worker's claims producer and consumer (fencing_clients_for)."""

    def __init__(self, bootstrap_servers: str, kafka_params: dict[str, str], group: str,
                 transaction_timeout_ms: int):
        self.bootstrap_servers = bootstrap_servers
        self.kafka_params = kafka_params
        self.group = group
        self.transaction_timeout_ms = transaction_timeout_ms
        self._producer: Producer | None = None
        self._consumer: Consumer | None = None

    def producer(self) -> Producer:
        if self._producer is None:
            self._producer = claims_producer(self.bootstrap_servers, self.kafka_params)
        return self._producer

    def consumer(self) -> Consumer:
        if self._consumer is None:
            self._consumer = Consumer({
                **self.kafka_params,
                "bootstrap.servers": self.bootstrap_servers,
                # The pipeline's group, which its principal may already use; never joined: assign() only.
                # Without one (progress records) librdkafka still wants a name; nothing is committed.
                "group.id": self.group or CLAIMS_READER_GROUP,
                "enable.auto.commit": "false",
                "enable.partition.eof": "true",
                "auto.offset.reset": "error",
                "isolation.level": "read_uncommitted",
                "fetch.wait.max.ms": 10,
            })
        return self._consumer

    def close(self) -> None:
        for client in (self._producer, self._consumer):
            if client is not None:
                close_client(client)


def fencing_clients_for(options: SinkOptions) -> FencingClients:
    """This worker's clients of the claims topic, made once per process like its producer."""
    return worker_client(options, "fencing", lambda: FencingClients(
        options.bootstrap_servers, options.kafka, options.group_id, options.transaction_timeout_ms))
