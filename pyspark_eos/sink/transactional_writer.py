"""Executor side of the sink: one Kafka transaction per Spark task, as one sequence (the model's
steps, docs/model/): begin (1) -> produce the task's records (2) -> collect the task's input from
the hand-over -> claim it for this attempt, fencing older attempts or refusing as a stale one (3,
4) -> read what the group has committed, stably (5: sent beside the claims read, and again after
any fence) -> decide commit or replay (6) -> send the offsets into the transaction (7) -> commit
(8) -> release the claim. A task that commits its own progress claims (3, 4) before its first
record instead, and delivers that record at once (the model's CLAIM_FIRST): its transaction never
opens without a claim a later run can find.

What the task commits besides its records is one of three strategies (commit_targets): the input
offsets it read (with a consumer group), its own progress (any other replayable source), or
nothing. Any failure aborts the transaction, so none of the task's records become visible, and the
error names the batch, task, partitions and transactional id, and what Kafka refused
(task_failures). ``write_task`` is the only function here that reads the sink's options: it builds
what the task holds for its life once, and the steps take that.
"""
from __future__ import annotations

import logging
import time
from dataclasses import dataclass, field
from functools import partial
from typing import Iterable

from confluent_kafka import KafkaError, KafkaException

from ..errors import EosKafkaError, TransactionFailedError
from ..kafka import fault_hooks as faults
from ..kafka.deadline import DeadlineExceeded, call_with_deadline
from ..kafka.group_offsets import (STABLE_READ_REQUEST_TIMEOUT_S, FetchAttempt, fetch_committed_once,
                                   fetch_stable_commits)
from ..kafka.held_clients import Held
from ..kafka.options import ClientSettings
from ..kafka.worker_gc import freeze_long_lived_objects
from ..protocol.claims_log import PlanRecord
from ..protocol.handover import collect, release
from . import worker_resources
from .attempt_fencing import (OPEN_AFTER_CLAIM_S, AttemptClaim, ClaimInTwoLogs, Instant,
                              first_attempt_of_plan, lookback_ms, opened_in_time)
from .commit_decision import CommitDecision, TaskOutcome
from .commit_targets import InputOffsets, OffsetsToSend, RecordsOnly, TaskProgress, deliver
from .idempotent_writes import batch_write_target, refuse_group_in_foreach_batch, stream_target
from .options import SinkOptions
from .produce_records import produce_records
from .producer_pool import (WorkerProducer, admin_for, cached_slot, delivery_failures, discard, producer_for,
                            why_offsets_wait)
from .rebalance import raise_if_rebalanced
from .records import RecordColumns
from .task_failures import DeliveryErrors, FailureContext, TopicCheck, explain
from .task_info import EosKafkaCommitMessage, TaskInfo
from .task_progress import ProgressKey, RecordDigest
from .transactional_id_factory import id_scope, lease_slot

log = logging.getLogger(__name__)

COMMIT_TIMEOUT_S = 120.0


def write_task(records: Iterable[RecordColumns], options: SinkOptions, progress_plan: PlanRecord | None = None,
               batch_write: bool = False) -> EosKafkaCommitMessage:
    """``progress_plan``: the write's plan record when the task may commit its own progress
    (task_progress); ``batch_write``: a ``df.write``, whose key is found by idempotent_writes."""
    steps = StepTimes()
    freeze_long_lived_objects()
    task = TaskInfo.current()
    if batch_write:
        refuse_group_in_foreach_batch(options.group_id, task.batch_id)
    settings = ClientSettings.of(options.bootstrap_servers, options.kafka, options.transaction_timeout_ms)
    held = worker_resources.use(settings, (options.transactional_id_prefix, options.group_id))
    target = _commit_target(options, task, progress_plan, batch_write)  # a write without its key fails here
    context = FailureContext(held, task.batch_id is not None, options.commits_input_offsets, options.records_progress)
    scope = id_scope(options.group_id, options.txn_app_id, task.query_id or None)
    plan = progress_plan.appended_before_its_tasks if progress_plan is not None else None
    with lease_slot(options.transactional_id_prefix, scope, cached_slot(held)) as lease:
        worker = producer_for(held, lease, options.group_id, plan)
        steps.ended("producer")
        return _WriteTask(task, held, worker, target, context, options.stable_offsets_timeout_ms, steps).run(records)


def _commit_target(options: SinkOptions, task: TaskInfo, progress_plan: PlanRecord | None, batch_write: bool):
    if options.commits_input_offsets:
        return InputOffsets(options.group_id, task, first_of_plan=first_attempt_of_plan(task.attempt_number, batch_write))
    if progress_plan is None:
        return RecordsOnly()
    target = (batch_write_target(options.txn_app_id, options.txn_version, options.topic, task.query_id, task.batch_id)
              if batch_write else stream_target(task.query_id, task.batch_id, task.describe()))
    if target is None:
        return RecordsOnly()  # a batch write without a key
    key = ProgressKey(options.transactional_id_prefix, target.scope, task.partition_id, options.claims_topic)
    return TaskProgress(key, target, progress_plan, task, RecordDigest(),
                        lookback_ms=lookback_ms(options.transaction_timeout_ms))


@dataclass
class StepTimes:
    """How long a task's steps took, for its log line: where the time of a slow batch went (a new
    producer, the records, which include reading the input upstream, the group's offsets, the
    commit)."""

    started: float = field(default_factory=time.monotonic)
    ends: list[tuple[str, float]] = field(default_factory=list)

    def ended(self, step: str) -> None:
        self.ends.append((step, time.monotonic()))

    def __str__(self) -> str:
        starts = [self.started] + [at for _, at in self.ends]
        steps = ", ".join(f"{step} {at - start:.2f}" for (step, at), start in zip(self.ends, starts))
        return f"in {starts[-1] - self.started:.2f} s ({steps})"


@dataclass
class _WriteTask:
    """What a write task holds for its life: built once at its start, taken by every step."""

    task: TaskInfo
    held: Held  # the worker's clients and facts of this sink configuration
    worker: WorkerProducer  # the producer of the slot the task leased
    target: InputOffsets | TaskProgress | RecordsOnly  # what it commits besides its records
    context: FailureContext
    stable_offsets_timeout_ms: int
    steps: StepTimes = field(default_factory=StepTimes)
    claim: AttemptClaim | ClaimInTwoLogs | None = None  # set once claimed: released when the transaction surely ended
    claimed: bool = False  # claimed already (with fencing switched off, claim stays None)
    committing: InputOffsets | TaskProgress | None = None  # set once prepared: a failure names it

    def run(self, records: Iterable[RecordColumns]) -> EosKafkaCommitMessage:
        producer = self.worker.producer
        delivery = delivery_failures.current = DeliveryErrors()
        files: list = []
        try:
            producer.begin_transaction()
            faults.stall_point(faults.STALL_BEFORE_PRODUCE)
            count = produce_records(producer, records, TopicCheck(self.held, producer), delivery, self.context,
                                    self.target.digest, self)
            if count and self.target.claims_first:
                if not self._claims_first():  # the order before claims came first: deliver, then claim
                    deliver(producer, self.held.settings.transaction_timeout_ms / 1000)
                faults.stall_point(faults.STALL_RECORDS_PRODUCED)
            self.steps.ended("records")
            # Only now, with the input exhausted, has every read() of this task recorded its ranges.
            provenance, files = collect(self.task.task_attempt_id)
            outcome = self._commit(provenance, count)
        except Exception as raised:
            error = _unmasked(raised)
            raise self._failed(error, delivery) from error
        finally:
            release(files)  # a retried task is a new attempt: it hands its own ranges over
        if self.claim is not None:
            self.claim.release()
        self.steps.ended("commit")
        return self._reported(count, outcome)

    def _claims_first(self) -> bool:
        return self.target.claims_first and not faults.switched_off(faults.CLAIM_FIRST_OFF)

    def before_first_record(self) -> None:
        if self._claims_first():
            self._claim(self.target)
            if self.claim is not None:
                self.claim.renew_if_old()

    def after_first_record(self) -> None:
        """A claim-first attempt's transaction opens with its first record: at once, and soon after
        the claim, or a later run's look-back could miss the claim of a transaction still open."""
        if not (self._claims_first() and self.claim is not None):
            return
        deliver(self.worker.producer, OPEN_AFTER_CLAIM_S, "first record of this task")
        if not opened_in_time(self.claim.appended, Instant.now()):
            raise TransactionFailedError(
                f"the first record took over {OPEN_AFTER_CLAIM_S:.0f} s from this attempt's claim to its delivery "
                "(a stalled worker or a slow broker): a later run of the query could miss the claim, so this attempt "
                "aborts its transaction; Spark retries the task where it gives tasks retries")

    def _claim(self, committing: InputOffsets | TaskProgress, read_beside: bool = False) -> FetchAttempt | None:
        """Claim and enforce (a refused attempt releases its claim too: it is the task's before this).
        ``read_beside``: send the stable read at once beside the claims read, and return its answer
        where the fence decision lets the commit be decided on it."""
        self.claimed = True
        self.claim = committing.claim(self.held, self.worker)
        if self.claim is None:
            return None
        if read_beside:
            return self.claim.enforce_reading_beside(partial(_read_once, self.held, committing))
        self.claim.enforce()
        return None

    def _commit(self, provenance: list, count: int) -> TaskOutcome:
        committing = self.committing = self.target.prepared(provenance, count)
        if committing is None:
            return self._commit_records_only(count)
        early = self._claim(committing, read_beside=True) if not self.claimed else None
        committing = self.committing = committing.under(self.claim)
        committed = early.commits if early is not None else fetch_stable_commits(
            admin_for(self.held), committing.group_id, committing.partitions, self.stable_offsets_timeout_ms,
            renew=partial(admin_for, self.held, renew=True))
        faults.stall_point(faults.STALL_AFTER_STABLE_READ)
        self.steps.ended("offsets")
        if committing.decide(committed) is CommitDecision.SKIP:
            # Spark replays a batch whose Kafka commit happened before its own commit log entry.
            self.worker.producer.abort_transaction(COMMIT_TIMEOUT_S)
            return TaskOutcome.SKIPPED
        for send in committing.sends(self.held):
            self._send(send)
        return self._commit_transaction()

    def _commit_records_only(self, count: int) -> TaskOutcome:
        """A task with no offsets to commit: a plain transactional write, or nothing at all."""
        if count == 0:
            self.worker.producer.abort_transaction(COMMIT_TIMEOUT_S)
            return TaskOutcome.NOTHING_TO_WRITE
        return self._commit_transaction()

    def _send(self, send: OffsetsToSend) -> None:
        producer = self.worker.producer
        group_id = self.committing.group_id if isinstance(self.committing, InputOffsets) else None
        try:
            call_with_deadline(
                lambda: producer.send_offsets_to_transaction(send.offsets, send.group_metadata, COMMIT_TIMEOUT_S),
                self.held.settings.transaction_timeout_ms / 1000, "send_offsets_to_transaction",
                give_up=partial(why_offsets_wait, self.held, self.worker, group_id) if group_id else None)
        except KafkaException as error:
            if send.stamp is not None:
                raise_if_rebalanced(error, send.stamp, self.claim, self.task.describe())
            raise

    def _commit_transaction(self) -> TaskOutcome:
        faults.crash_point(faults.WORKER_BEFORE_COMMIT)
        faults.crash_point(faults.EXECUTOR_BEFORE_COMMIT)
        faults.stall_point(faults.STALL_BEFORE_COMMIT)
        self.worker.producer.commit_transaction(COMMIT_TIMEOUT_S)
        faults.stall_point(faults.STALL_AFTER_COMMIT)
        return TaskOutcome.COMMITTED

    def _failed(self, error: Exception, delivery: DeliveryErrors) -> Exception:
        """Abort the transaction, release the claim once the transaction surely ended, and explain."""
        if self._abort(error) and self.claim is not None:
            self.claim.release()
        try:
            self.worker.producer.poll(0)  # serve the reports of refused and purged records: they explain the failure
        except KafkaException as fatal:  # a fenced producer raises its fatal error again: the one explained is error
            log.debug("serving the producer's reports after %s: %s", error, fatal)
        return explain(error, self._where(), delivery, self.context)

    def _abort(self, error: Exception) -> bool:
        """Abort the task's transaction; True when it has certainly ended without committing."""
        if isinstance(error, DeadlineExceeded):
            # The producer is still inside the call: drop it; the task's retry fences its id (the claim
            # is kept), which aborts its transaction. Past the deadline the broker has aborted it anyway.
            discard(self.held)
            return False
        if _is_fatal(error):
            discard(self.held)  # fenced or timed out by the broker: it can do nothing more
            return True
        try:
            self.worker.producer.abort_transaction(COMMIT_TIMEOUT_S)
            return True
        except KafkaException as abort_error:
            log.warning("aborting the transaction of %s failed (%s); rebuilding the producer",
                        self.worker.transactional_id, abort_error)
            discard(self.held)
            # A fatal abort error means the broker fenced or timed the transaction out: it is over.
            # Otherwise it may still be open: keep the claim, so that a retry fences this id.
            return _is_fatal(abort_error)

    def _where(self) -> str:
        where = f"{self.task.describe()}, transactional id {self.worker.transactional_id!r}"
        return where + (f", {self.committing.describe()}" if self.committing is not None else "")

    def _reported(self, count: int, outcome: TaskOutcome) -> EosKafkaCommitMessage:
        committed = self.committing.describe() if self.committing is not None else ""
        message = EosKafkaCommitMessage(self.task.describe(), self.worker.transactional_id, count, outcome, committed)
        log.info("%s: %s %d record(s) with %s%s %s", message.task, outcome.value, count, self.worker.transactional_id,
                 f", {committed}" if committed else "", self.steps)
        return message


def _read_once(held: Held, committing: InputOffsets | TaskProgress) -> FetchAttempt | None:
    """One stable read of what the group committed for the task's input, sent beside its claims
    read; None when it failed (the read after the fences backs off and says what failed)."""
    try:
        return fetch_committed_once(admin_for(held), committing.group_id, committing.partitions,
                                    STABLE_READ_REQUEST_TIMEOUT_S)
    except (EosKafkaError, KafkaException) as error:
        log.debug("the stable read beside the claims read failed (%s); reading again after them", error)
        return None


def _unmasked(error: Exception) -> Exception:
    """confluent-kafka runs the delivery callbacks of a flush() that met a fatal error (the producer
    fenced) with that error already raised: the callback's first call into the client fails with a
    SystemError caused by it. The fatal error is the one to act on and to report."""
    if isinstance(error, SystemError) and isinstance(error.__cause__, KafkaException):
        return error.__cause__
    return error


def _is_fatal(error: Exception) -> bool:
    kafka_error = error.args[0] if isinstance(error, KafkaException) and error.args else None
    return isinstance(kafka_error, KafkaError) and kafka_error.fatal()
