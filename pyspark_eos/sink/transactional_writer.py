"""Executor side of the sink: one Kafka transaction per Spark task.

begin -> produce the task's records -> (exactly-once) collect the task's input ranges, claim them
for this attempt (refusing if a newer attempt has, fencing older ones: attempt_fencing), read
what the group has committed, check ownership, decide commit or replay -> send the ranges' end
offsets with the plan's group metadata -> commit -> release the claim. Without input offsets (any
other replayable source) the task claims and commits its own progress instead (task_progress).
Any failure aborts the transaction, so none of the task's records become visible, and the error names the batch, task,
partitions and transactional id, and what Kafka refused: a record too large (and which limit), a
topic that does not exist.
"""
from __future__ import annotations

import itertools
import logging
from dataclasses import dataclass
from typing import Callable, Iterable, Iterator

from confluent_kafka import KafkaError, KafkaException, TopicPartition
from pyspark.sql.datasource import WriterCommitMessage

from ..kafka import fault_hooks as faults
from .attempt_fencing import AttemptClaim, claim_attempt, claims_clients_for
from .commit_decision import (NEVER, CommitDecision, CommitPlan, TaskOutcome, commit_plan, decide_input_commit,
                              decide_progress_commit)
from ..errors import ConfigurationError, KafkaClientError
from ..kafka.deadline import DeadlineExceeded, call_with_deadline
from ..kafka.group_offsets import Committed, fetch_committed_once, fetch_stable_commits
from ..kafka.worker_gc import freeze_long_lived_objects
from .options import SinkOptions
from .producer_pool import WorkerProducer, admin_for, cached_slot, delivery_failures, discard, producer_for
from ..protocol.claims_log import PlanRecord
from ..protocol.commit_metadata import partition_metadata
from ..protocol.group_stamp import GroupStamp
from ..protocol.offset_range import TopicPartitionKey
from ..protocol.handover import collect, release
from .rebalance import raise_if_rebalanced, under_current_generation
from .records import RecordColumns, record_size
from .task_failures import DeliveryErrors, TopicCheck, explain, explain_local_refusal
from .idempotent_writes import (ProgressTarget, batch_write_target, refuse_group_in_foreach_batch,
                                stream_target)
from .task_progress import ProgressKey, RecordDigest, committed_plan, group_metadata, progress_metadata
from .transactional_id_factory import lease_slot
from . import worker_resources

log = logging.getLogger(__name__)

COMMIT_TIMEOUT_S = 120.0


@dataclass(frozen=True)
class TaskInfo:
    task_attempt_id: int
    partition_id: int
    batch_id: str | None
    query_id: str | None

    @classmethod
    def current(cls) -> "TaskInfo":
        from pyspark import TaskContext

        context = TaskContext.get()
        if context is None:
            return cls(-1, -1, None, None)
        return cls(context.taskAttemptId(), context.partitionId(),
                   context.getLocalProperty("streaming.sql.batchId"),
                   context.getLocalProperty("sql.streaming.queryId"))

    def describe(self) -> str:
        batch = f"batch {self.batch_id}, " if self.batch_id is not None else ""
        return f"{batch}task {self.partition_id} (attempt {self.task_attempt_id})"


@dataclass
class EosKafkaCommitMessage(WriterCommitMessage):
    """What one task did, for the driver's log."""

    task: str
    transactional_id: str
    records: int
    outcome: TaskOutcome
    input_ranges: str


def write_task(records: Iterable[RecordColumns], options: SinkOptions, progress_plan: PlanRecord | None = None,
               batch_write: bool = False) -> EosKafkaCommitMessage:
    """``progress_plan``: the write's plan record when the task may commit its own progress
    (task_progress); ``batch_write``: a ``df.write``, whose key is found by idempotent_writes."""
    freeze_long_lived_objects()
    task = TaskInfo.current()
    if batch_write:
        refuse_group_in_foreach_batch(options, task.batch_id)
    worker_resources.use(options)
    with lease_slot(options.transactional_id_prefix, _id_scope(options, task), cached_slot(options)) as lease:
        target = _progress_target(options, task, batch_write) if progress_plan is not None else None
        return _write_in_slot(records, options, producer_for(options, lease), task,
                              (progress_plan, target) if target is not None else None)


def _id_scope(options: SinkOptions, task: TaskInfo) -> str | None:
    """What a transactional id names besides its prefix: the group, or else the write's app id or
    streaming query, so that two pipelines without a group (executor ids repeat between
    applications) never share ids and fence each other."""
    if options.group_id:
        return options.group_id
    if options.txn_app_id:
        return f"app-{options.txn_app_id}"
    return f"query-{task.query_id}" if task.query_id else None


def _progress_target(options: SinkOptions, task: TaskInfo, batch_write: bool) -> ProgressTarget | None:
    if batch_write:
        return batch_write_target(options, task.query_id, task.batch_id)
    return stream_target(task.query_id, task.batch_id, task.describe())


def _write_in_slot(records: Iterable[RecordColumns], options: SinkOptions, worker: WorkerProducer, task: TaskInfo,
                   progress: tuple[PlanRecord, ProgressTarget] | None) -> EosKafkaCommitMessage:
    delivery = delivery_failures.current = DeliveryErrors()
    files: list = []
    commitment = _Commitment()
    try:
        worker.producer.begin_transaction()
        faults.stall_point(faults.STALL_BEFORE_PRODUCE)
        digest = RecordDigest() if progress is not None else None
        count = _produce(worker, records, delivery, options, digest)
        # Only now, with the input exhausted, has every read() of this task recorded its ranges.
        provenance, files = collect(task.task_attempt_id)
        if progress is not None:
            if not progress[1].versioned:
                _check_ungrouped_input(provenance)
            outcome = _commit_progress(worker, options, task, progress, digest, commitment)
        else:
            outcome = _commit_input(worker, options, task, provenance, count, commitment)
    except Exception as raised:
        error = _unmasked(raised)
        if _abort(worker, options, error) and commitment.claim is not None:
            commitment.claim.release()
        worker.producer.poll(0)  # serve the reports of refused and purged records: they explain the failure
        raise explain(error, _where(task, worker, commitment.plan), task.batch_id is not None, delivery,
                      options) from error
    finally:
        release(files)  # a retried task is a new attempt: it hands its own ranges over
    if commitment.claim is not None:
        commitment.claim.release()
    plan = commitment.plan
    message = EosKafkaCommitMessage(task.describe(), worker.transactional_id, count, outcome,
                                    plan.describe() if plan else "")
    log.info("%s: %s %d record(s) with %s%s", message.task, outcome.value, count, worker.transactional_id,
             f", input {message.input_ranges}" if plan else "")
    return message


@dataclass
class _Commitment:
    """What the task's transaction commits besides its records, and its attempt's claim, set as
    the task goes: a failure releases the claim (once the transaction surely ended) and names the plan."""

    plan: CommitPlan | ProgressKey | None = None
    claim: AttemptClaim | None = None


def _commit_input(worker: WorkerProducer, options: SinkOptions, task: TaskInfo, provenance: list, count: int,
                  commitment: _Commitment) -> TaskOutcome:
    plan = commitment.plan = _input_plan(provenance, options, count)
    if plan is None:
        return _commit_records_only(worker.producer, count)
    commitment.claim = _claim(options, plan, task, worker)
    _enforce(commitment.claim)
    if commitment.claim is not None:
        plan = commitment.plan = under_current_generation(plan, commitment.claim, task.describe())
    sends = [_OffsetsToSend([TopicPartition(r.topic, r.partition, r.end,
                                            metadata=partition_metadata(stamp.generation, task.batch_id, task.query_id))
                             for r in ranges], stamp.metadata, stamp)
             for stamp, ranges in plan.by_member]
    return _commit_decided(worker, options, task, _Commit(
        options.group_id, plan.partitions, lambda committed: decide_input_commit(plan, committed, task.query_id),
        lambda: sends), commitment.claim)


def _enforce(claim: AttemptClaim | None) -> None:
    """Act on the attempt's fence decision (model step 4). The claim is the task's before this:
    a refused attempt releases it too."""
    if claim is not None:
        claim.enforce()


def _produce(worker: WorkerProducer, batches: Iterable[RecordColumns], delivery: DeliveryErrors,
             options: SinkOptions, digest: RecordDigest | None = None) -> int:
    producer = worker.producer
    topics = TopicCheck(options, producer)
    count = 0
    for columns in batches:
        topics.require(columns.topic_names())
        if digest is not None:
            digest.add(columns)
        rows = columns.rows()
        try:
            if count == 0 and columns.values:  # the fault hook's "mid-produce" is after the first record
                _produce_rows(producer, itertools.islice(rows, 1), columns.headers is not None)
                faults.stall_point(faults.STALL_MID_PRODUCE)
            _produce_rows(producer, rows, columns.headers is not None)
        except KafkaException as error:
            delivery.unsent = columns
            topic, value, key, partition, headers = error.row
            explain_local_refusal(error, options, topic, record_size(value, key, headers), partition)
            raise
        count += len(columns.values)
        producer.poll(0)  # serve delivery reports (failures only) once per batch
    return count


def _produce_rows(producer, rows: Iterator[tuple], with_headers: bool) -> None:
    """produce() each row: the loop is the sink's cost per record, so it holds nothing else.
    A full local queue (BufferError) is waited out for the row it refused; a KafkaException
    carries that row as ``row`` to explain it."""
    produce = producer.produce
    topic = value = key = partition = headers = None
    try:
        while True:
            try:
                if with_headers:
                    for topic, value, key, partition, headers in rows:
                        produce(topic, value, key, partition, headers=headers)
                else:
                    for topic, value, key, partition, headers in rows:
                        produce(topic, value, key, partition)
                return
            except BufferError:  # the local queue is full: let deliveries drain it, then go on
                _produce_when_queue_has_room(producer, topic, value, key, partition, headers)
    except KafkaException as error:
        error.row = (topic, value, key, partition, headers)
        raise


def _produce_when_queue_has_room(producer, topic, value, key, partition, headers) -> None:
    while True:
        producer.poll(0.1)
        try:
            producer.produce(topic, value, key, partition, headers=headers)
            return
        except BufferError:
            continue


def _input_plan(provenance: list, options: SinkOptions, count: int) -> CommitPlan | None:
    if not options.commits_input_offsets or (not provenance and count == 0):
        return None  # no input offsets to commit: a plain transactional sink, or an empty task
    return commit_plan(provenance, options.group_id)


def _claim(options: SinkOptions, plan: CommitPlan, task: TaskInfo, worker: WorkerProducer) -> AttemptClaim | None:
    if not plan.fencing:
        raise ConfigurationError(f"the input of {task.describe()} was planned without a claims position; "
                                 "the source and the sink must be the same eos-kafka version")
    return claim_attempt(claims_clients_for(options), plan.fencing, options.group_id, plan.partitions,
                         task.task_attempt_id, task.describe(), worker.transactional_id,
                         run_tokens=[stamp.run_token for stamp, _ in plan.by_member])


@dataclass(frozen=True)
class _OffsetsToSend:
    offsets: list[TopicPartition]
    group_metadata: bytes
    stamp: GroupStamp | None = None  # the membership they go under: a rebalance refusal names it


@dataclass(frozen=True)
class _Commit:
    """What a task commits with its records: offsets of ``group_id``, sent when ``decide`` says so."""

    group_id: str
    partitions: list[TopicPartitionKey]
    decide: Callable[[dict[TopicPartitionKey, Committed]], CommitDecision]
    sends: Callable[[], list[_OffsetsToSend]]


def _commit_decided(worker: WorkerProducer, options: SinkOptions, task: TaskInfo, commit: _Commit,
                    claim: AttemptClaim | None) -> TaskOutcome:
    """The one commit routine (model steps 5 to 8): read the group's offsets stably, decide, send
    the offsets into the transaction and commit it, or abort it when the batch is in Kafka already."""
    producer = worker.producer
    committed = fetch_stable_commits(admin_for(options), commit.group_id, commit.partitions,
                                     options.stable_offsets_timeout_ms, renew=lambda: admin_for(options, renew=True))
    faults.stall_point(faults.STALL_AFTER_STABLE_READ)
    if commit.decide(committed) is CommitDecision.SKIP:
        # Spark replays a batch whose Kafka commit happened before its own commit log entry.
        producer.abort_transaction(COMMIT_TIMEOUT_S)
        return TaskOutcome.SKIPPED
    for send in commit.sends():
        try:
            _send_offsets(producer, send.offsets, send.group_metadata, options)
        except KafkaException as error:
            if send.stamp is not None:
                raise_if_rebalanced(error, send.stamp, claim, task.describe())
            raise
    return _commit_transaction(producer)


def _commit_records_only(producer, count: int) -> TaskOutcome:
    """A task with no offsets to commit: a plain transactional write, or nothing at all."""
    if count == 0:
        producer.abort_transaction(COMMIT_TIMEOUT_S)
        return TaskOutcome.NOTHING_TO_WRITE
    return _commit_transaction(producer)


def _check_ungrouped_input(provenance: list) -> None:
    # Progress records would make this exactly-once too, but the group's offsets would follow only
    # once Spark completes each batch (source/group_commits): a restart from them with a new
    # checkpoint would write again a batch whose output committed just before a crash.
    groups = sorted({p.group.group_id for p in provenance if p.group is not None})
    if groups:
        raise ConfigurationError(
            f"this task read from an eos-kafka source with kafka.group.id={groups[0]!r}, but the sink has no "
            f"kafka.group.id: set the sink's kafka.group.id={groups[0]!r} too, so that each task commits the input "
            "offsets it read in that group with its records (without it the group's offsets lag a batch behind "
            "the output, and a restart from them with a new checkpoint could write a batch twice), or set "
            "deliveryGuarantee=at-least-once")


def _commit_progress(worker: WorkerProducer, options: SinkOptions, task: TaskInfo,
                     progress: tuple[PlanRecord, ProgressTarget], digest: RecordDigest,
                     commitment: _Commitment) -> TaskOutcome:
    progress_plan, target = progress
    key = commitment.plan = ProgressKey(options.transactional_id_prefix, target.scope, task.partition_id,
                                        options.claims_topic)
    if digest.records == 0:
        # Nothing to make visible and nothing to record: an empty attempt that claimed would open
        # its transaction only when sending its offsets, after its claim (see _deliver).
        return _commit_records_only(worker.producer, 0)
    _deliver(worker.producer, options)
    commitment.claim = claim_attempt(
        claims_clients_for(options), [progress_plan], key.claim_group, key.claim_partitions, task.task_attempt_id,
        task.describe(), worker.transactional_id, not_before=_last_committed_plan(options, key))
    _enforce(commitment.claim)
    metadata = progress_metadata(target.version, target.scope, digest, progress_plan)
    return _commit_decided(worker, options, task, _Commit(
        key.group_id, [key.partition],
        lambda committed: decide_progress_commit(target, committed.get(key.partition, NEVER), digest.as_json(),
                                                 task.describe()),
        lambda: [_OffsetsToSend([TopicPartition(key.topic, 0, target.version + 1, metadata=metadata)],
                                group_metadata(key.group_id, options))]),
        commitment.claim)


def _deliver(producer, options: SinkOptions) -> None:
    """Deliver the task's records before it claims: their partitions join its transaction on the
    broker, whose timeout then runs from before the claim. A later run's attempt reads the claims
    of one transaction timeout back (attempt_fencing), so an older claim belongs to a transaction
    the broker has aborted."""
    left = producer.flush(options.transaction_timeout_ms / 1000)
    if left:
        raise KafkaClientError(f"{left} record(s) of this task were not delivered within the transaction timeout "
                               f"({options.transaction_timeout_ms} ms): check that the brokers are reachable")


def _last_committed_plan(options: SinkOptions, key: ProgressKey) -> int | None:
    """The plan under which the task last committed, read without waiting for an open transaction
    (None then: the attempt reads its plan's whole lookback of claims)."""
    attempt = fetch_committed_once(admin_for(options), key.group_id, [key.partition])
    return committed_plan(attempt.commits.get(key.partition, NEVER)) if attempt.settled else None


def _send_offsets(producer, offsets: list[TopicPartition], group_metadata: bytes, options: SinkOptions) -> None:
    call_with_deadline(lambda: producer.send_offsets_to_transaction(offsets, group_metadata, COMMIT_TIMEOUT_S),
                       options.transaction_timeout_ms / 1000, "send_offsets_to_transaction")


def _commit_transaction(producer) -> TaskOutcome:
    faults.crash_point(faults.WORKER_BEFORE_COMMIT)
    faults.crash_point(faults.EXECUTOR_BEFORE_COMMIT)
    faults.stall_point(faults.STALL_BEFORE_COMMIT)
    producer.commit_transaction(COMMIT_TIMEOUT_S)
    faults.stall_point(faults.STALL_AFTER_COMMIT)
    return TaskOutcome.COMMITTED


def _unmasked(error: Exception) -> Exception:
    """confluent-kafka runs the delivery callbacks of a flush() that met a fatal error (the producer
    fenced) with that error already raised: the callback's first call into the client fails with a
    SystemError caused by it. The fatal error is the one to act on and to report."""
    if isinstance(error, SystemError) and isinstance(error.__cause__, KafkaException):
        return error.__cause__
    return error


def _abort(worker: WorkerProducer, options: SinkOptions, error: Exception) -> bool:
    """Abort the task's transaction; True when it has certainly ended without committing."""
    if isinstance(error, DeadlineExceeded):
        # The producer is still inside the call: drop it; the task's retry fences its id (the claim
        # is kept), which aborts its transaction. Past the deadline the broker has aborted it anyway.
        discard(options)
        return False
    if _is_fatal(error):
        discard(options)  # fenced or timed out by the broker: it can do nothing more
        return True
    try:
        worker.producer.abort_transaction(COMMIT_TIMEOUT_S)
        return True
    except KafkaException as abort_error:
        log.warning("aborting the transaction of %s failed (%s); rebuilding the producer",
                    worker.transactional_id, abort_error)
        discard(options)
        # A fatal abort error means the broker fenced or timed the transaction out: it is over.
        # Otherwise it may still be open: keep the claim, so that a retry fences this id.
        return _is_fatal(abort_error)


def _is_fatal(error: Exception) -> bool:
    kafka_error = error.args[0] if isinstance(error, KafkaException) and error.args else None
    return isinstance(kafka_error, KafkaError) and kafka_error.fatal()


def _where(task: TaskInfo, worker: WorkerProducer, plan: CommitPlan | ProgressKey | None) -> str:
    where = f"{task.describe()}, transactional id {worker.transactional_id!r}"
    if isinstance(plan, ProgressKey):
        return f"{where}, {plan.describe()}"
    return where + (f", input {plan.describe()}" if plan is not None else "")
