"""Fencing layer 2: of all the attempts Spark runs of one write task, one commits.

Layer 1 (source/group_membership) fences *instances* of a pipeline. It cannot fence two attempts of one
task in the same run: a retry after the driver declared an executor lost (while the executor
only stalled, as in a long GC pause or a network partition) or a speculative copy. Both carry
the same plan, and with one producer per write slot they use different transactional ids, so the
broker accepts both commits; the replay check (read the group's offsets, then commit) is
check-then-act and cannot close that window by itself.

The claims protocol closes it with Kafka's own fencing primitive, ``init_transactions`` on a
transactional id (it aborts that id's open transaction and bumps its epoch; the holder's next
send_offsets or commit fails with PRODUCER_FENCED):

1. Planning appends a *plan* record to the claims topic (one partition, protocol/claims_log) and stamps every input
   partition with its offset. Plans are made one after another, so a later plan has a larger
   offset: a new run's plan of a batch is newer than the dead run's plan of it. (The group
   generation cannot order runs: a static member that rejoins keeps it.)
2. An attempt's order is (plan offset, Spark's taskAttemptId). Before its stable read of the
   group's offsets, the attempt appends a *claim* (group, input partitions, order, its
   transactional id) with acks=all and reads the claims from its plan's record up to its own.
   Its stable read goes out beside that read, and is sent again if the attempt is to fence any
   id: the fenced attempt may have committed between that answer and the fence.
3. A claim on any of its partitions with a newer order: this attempt is stale; it aborts and
   fails with StaleAttemptError. A claim with an older order under another transactional id and
   no release: that attempt may still commit, so this one fences its id first (the
   decision: fence_decision).
4. An attempt that ended (committed, or aborted for certain) appends a *release*, so that a later
   attempt does not fence an id a healthy worker has moved on with.

Of any two attempts, the one whose claim lands later reads the other's: if it is the newer one it
fences the older before reading the group's offsets; if it is the older one it refuses. In layout 2
(protocol/claims_layout: a pipeline with a group) the first attempt of a task under its plan reads
its pipeline's control log instead of the claims, and the claims only when another attempt of its
task announced itself there; every other attempt announces itself before it claims. Of a first
attempt and a later one, each appends to one log before it reads the other, so one of them sees
the other: the later one's read of the claims finds the first's claim, or the first finds the
announcement and reads the claims (docs/model, SPLIT_LOG). A zombie
therefore either refuses, or finds its producer fenced, or finds the batch already committed (the
replay check). docs/model/ holds a model of this protocol checked with spin.

Claims order the attempts of one *instance* only (one driver's group membership; a claim names
its plans' run tokens). An attempt neither refuses because of another instance's claim
nor fences it: another instance's plan can come later without being newer (an old instance not
yet told that a second one replaced it plans the batch after the new one did), and ordering by
plan offset would then fail the new instance's attempts while the old one's commits are refused.
Between instances layer 1 decides: any claim this attempt can read came after its own plan record,
so after both instances joined the group; whichever instance the group no longer knows gets
its offsets refused (FENCED_INSTANCE_ID, ILLEGAL_GENERATION), and offsets it sent before that
are waited for by the stable read.

Progress records (task_progress) have no layer 1: their groups have no members, so an attempt of
an earlier run of the query (a stalled executor's, or one whose driver died and took it along) is
not refused by any generation. Their plans are read from ``since`` instead, before the plan's own
record: back to the claims appended one transaction timeout (and a margin) before the plan, and
no further back than the plan under which the task last committed (an attempt of an earlier batch
was fenced by the attempt that committed it). Claims read from there are all older than the
plan's: they can only be fenced. A progress attempt claims *before* its first record opens its
transaction, so every transaction of an earlier run that may still be open has a claim a later
run's attempt of the task finds and fences: a driver killed while its tasks wrote leaves nothing
open for the broker's timeout to end (read_committed readers of the output would wait for it).
It then delivers that first record at once and refuses if that took longer than
``OPEN_AFTER_CLAIM_S`` after its claim was appended (by the wall clock, which a suspended host's
runs on, and by the monotonic one, which a clock step does not move; a claim whose fences took long
is appended again first): its transaction is then aborted by the broker no later than one
transaction timeout, that bound and the broker's sweep after the claim, which the look-back's
margin covers with the clocks' skew (docs/model, CLAIM_FIRST). This holds while a restart's
transaction timeout is not shorter than the dead run's: the look-back is the new run's. A named
pipeline's progress attempts take layout 2, and read the look-back only when their task's last
commit was not their own run's (sink/progress_claims decides, from the progress record).
"""
from __future__ import annotations

import logging
import time
from dataclasses import dataclass, field, replace
from typing import Callable, Iterable

from confluent_kafka import KafkaException

from ..errors import ConfigurationError, StaleAttemptError
from ..kafka.at_once import all_at_once
from ..kafka.clients import init_transactional_producer
from ..kafka.fault_hooks import ANNOUNCEMENTS_OFF, ATTEMPT_FENCING_OFF, RELEASES_OFF, switched_off
from ..kafka.group_offsets import FetchAttempt
from ..kafka.held_clients import Held
from ..protocol.claims_layout import CLAIMS_PARTITION, CONTROL_PARTITION, claims_partition
from ..protocol.claims_log import (ClaimsClients, PlanRecord, append, await_record, log_end, lookback_start,
                                   read_claims, read_to_end)
from ..protocol.claims_records import ANNOUNCE, CLAIM, RELEASE, AttemptOrder, Claim
from ..protocol.group_stamp import GroupStamp
from ..protocol.offset_range import TopicPartitionKey
from .fence_decision import (FenceOutcome, FenceVerdict, decide_fence, early_read_usable, holder_fenced,
                             needs_claims_read)
from .progress_claims import EarlierLog
from .transactional_id_factory import current_holder, process_token, slots_name

log = logging.getLogger(__name__)

# How long a progress attempt may take from its claim to its transaction opened at the broker (its
# first record delivered): part of the look-back's margin (LOOKBACK_MARGIN_MS). A claim older
# than half of it once the attempt has enforced it (its fences took long) is appended again.
OPEN_AFTER_CLAIM_S = 10.0
RENEW_CLAIM_AFTER_S = OPEN_AFTER_CLAIM_S / 2
# Beyond the transaction timeout, how far back a progress attempt reads claims: the time an attempt
# may take from its claim to its transaction opened, the broker's sweep for timed-out transactions
# (every 10 s by default, transaction.abort.timed.out.transaction.cleanup.interval.ms) and clock skew
# between the hosts whose clocks stamp the claims and the one that looks them up by time.
LOOKBACK_MARGIN_MS = int(OPEN_AFTER_CLAIM_S * 1000) + 30_000


def lookback_ms(transaction_timeout_ms: int) -> int:
    """How far back a progress attempt reads claims that nothing else fences."""
    return transaction_timeout_ms + LOOKBACK_MARGIN_MS


@dataclass(frozen=True)
class Instant:
    """A moment on both of this host's clocks: the wall clock (what stamps a claim, and runs on
    while the host is suspended) and the monotonic one (which a clock step does not move)."""

    wall: float
    monotonic: float

    @staticmethod
    def now() -> "Instant":
        return Instant(time.time(), time.monotonic())

    def seconds_until(self, later: "Instant") -> float:
        return max(later.wall - self.wall, later.monotonic - self.monotonic)


def opened_in_time(claimed: Instant, opened: Instant) -> bool:
    """Whether a progress attempt's transaction opened soon enough after its claim was appended for
    a later run's look-back to find the claim."""
    return claimed.seconds_until(opened) <= OPEN_AFTER_CLAIM_S


class _Enforced:
    """An attempt's claim as the write task uses it (transactional_writer): enforce, release."""

    def enforce(self) -> FenceVerdict:
        raise NotImplementedError

    def enforce_reading_beside(self, read: Callable[[], FetchAttempt | None]) -> FetchAttempt | None:
        """``enforce``, with ``read`` (one stable read of the group's offsets) sent at once beside it,
        as soon as the claim is acknowledged (the model's EARLY_STABLE_READ): the attempt's time loses
        the read's round trips. Its answer when ``early_read_usable`` allows deciding on it; None when
        the attempt must read again, after the fences."""
        early, verdict = all_at_once([read, self.enforce])
        return early if early_read_usable(verdict, early) else None


@dataclass
class AttemptClaim(_Enforced):
    """This attempt's claim, appended: ``enforce`` it, and ``release`` it once the attempt's
    transaction has ended either way (also when ``enforce`` refused)."""

    claim: Claim
    topic: str
    start: int  # the earliest plan record of the task's input: where its claims begin
    clients: ClaimsClients
    # The group generations recorded since the task's plans (a rebalance during the batch).
    stamps: tuple[GroupStamp, ...] = ()
    appended: Instant = field(default_factory=Instant.now)  # just before its latest copy was appended
    # Layout 2 (claims_layout): where the task's plan records start in the pipeline's control log
    # (None in layout 1), and whether this is the first attempt of the task under its plan.
    control_from: int | None = None
    first_of_plan: bool = False
    partition: int | None = None  # where the claim is, when not where its layout puts it (an earlier log)

    @property
    def claims_partition(self) -> int:
        return claims_partition(self.control_from is not None) if self.partition is None else self.partition

    def renew_if_old(self) -> None:
        """Append a copy of this claim when the first is older than RENEW_CLAIM_AFTER_S (its fences
        took long), so that the attempt's transaction opens soon after a claim of it. A copy names
        the same attempt: whoever read the first copy decided on it, and a reader of the copy
        decides the same."""
        now = Instant.now()
        if self.appended.seconds_until(now) > RENEW_CLAIM_AFTER_S:
            append(self.clients.producer(), self.topic, self.claim.group, self.claim.to_json(), self.claims_partition)
            self.appended = now

    def enforce(self) -> FenceVerdict:
        """Read the claims up to this one and act on the fence decision (fence_decision)."""
        own = self.claim
        verdict = decide_fence(own, self._records())
        self.stamps = verdict.stamps
        _log_other_instances(verdict.other_instances, own)
        if verdict.outcome is FenceOutcome.REFUSE:
            newer = verdict.newer
            raise StaleAttemptError(
                f"a newer attempt of this task ({newer.task}, {newer.order}, transactional id "
                f"{newer.transactional_id!r}) has claimed its input: this attempt ({own.order}) is stale (its "
                "executor stalled and was declared lost, or it is a speculative copy that lost the race) and refuses "
                "to commit. Nothing to do: Spark keeps the newer attempt's output"
            )
        for zombie in verdict.to_fence:
            with current_holder(zombie.transactional_id) as holder:
                if holder_fenced(zombie, own, self.topic, holder):
                    log.info("%s (%s): not fencing %s (%s): its transactional id %r is held by a process of this "
                             "host whose init_transactions came after that claim and ended its transaction",
                             own.task, own.order, zombie.task, zombie.order, zombie.transactional_id)
                    continue
                fence(self.clients, zombie, own)
        return verdict

    def _records(self) -> list["Claim | GroupStamp"]:
        """What the fence decision is taken on: the claims from the plans' start to this claim, and
        the stamps recorded since the plans; in layout 2 the claims only when step 4a asks for them."""
        own, consumer, counter = self.claim, self.clients.consumer(), self.clients.read
        if self.control_from is None:
            return read_claims(consumer, self.topic, self.start, own.offset, own.group, self.claims_partition, counter)
        control = read_to_end(consumer, self.topic, CONTROL_PARTITION, self.control_from, own.group, counter)
        stamps: list = [r for r in control if isinstance(r, GroupStamp)]
        if not needs_claims_read(own, self.first_of_plan, control):
            return stamps
        return stamps + read_claims(consumer, self.topic, self.start, own.offset, own.group, CLAIMS_PARTITION, counter)

    def newer_generation(self, stamp: GroupStamp, timeout_s: float) -> GroupStamp | None:
        """The first generation of ``stamp``'s run newer than it recorded after this claim, waiting
        up to ``timeout_s`` for it (the driver records it once its rebalance completes)."""
        def newer(record) -> bool:
            return (isinstance(record, GroupStamp) and record.run_token == stamp.run_token
                    and record.generation > stamp.generation)
        if not stamp.run_token:  # no token: no run whose generations could be followed
            return None
        # Layout 1: recorded after this claim, in the one partition; layout 2: in the control log,
        # from the plans' records on (the generation's number tells which are newer).
        start = self.claim.offset + 1 if self.control_from is None else self.control_from
        return await_record(self.clients.consumer(), self.topic, start, stamp.group_id, newer, timeout_s,
                            CONTROL_PARTITION)

    def release(self) -> None:
        # Fire and forget: a lost release costs a later attempt one needless fence, nothing more
        # (never a fence of an id a live task holds since: enforce).
        if switched_off(RELEASES_OFF):
            return
        released = replace(self.claim, kind=RELEASE, offset=-1)
        try:
            producer = self.clients.producer()
            producer.produce(self.topic, key=released.group.encode(), value=released.to_json(),
                             partition=self.claims_partition)
            producer.poll(0)
        except (KafkaException, BufferError) as error:
            log.warning("releasing the claim of %s failed (%s); a retry may fence %s needlessly",
                        self.claim.task, error, self.claim.transactional_id)


def claim_attempt(clients: ClaimsClients, plans: Iterable[PlanRecord], group: str,
                  partitions: Iterable[TopicPartitionKey], task_attempt_id: int, task: str,
                  transactional_id: str, run_tokens: Iterable[str] = (),
                  not_before: int | None = None, first_of_plan: bool = False,
                  progress: bool = False) -> AttemptClaim | None:
    """Append this attempt's claim on the task's input (None while fencing is switched off).
    ``run_tokens``: the run tokens of the plans' group stamps (this instance);
    ``not_before``: where the plan under which the task last committed starts its claims, if known
    (progress plans);
    ``first_of_plan``: the first attempt of the task under its plans (first_attempt_of_plan);
    ``progress``: a progress attempt: none is first (first_attempt_of_plan), so none announces
    itself, as no attempt of its pipeline reads announcements."""
    if switched_off(ATTEMPT_FENCING_OFF):
        log.warning("%s: attempt fencing is switched off (fault injection): zombie attempts are not fenced", task)
        return None
    plans = sorted(set(plans), key=lambda p: p.offset)
    topics = {p.topic for p in plans}
    if len(topics) != 1:
        raise ConfigurationError(f"the sources of this task use different claims topics {sorted(topics)}; "
                                 "give every eos-kafka source of a pipeline the same claimsTopic")
    topic = topics.pop()
    own = Claim(CLAIM, group, frozenset(partitions), AttemptOrder(plans[-1].offset, task_attempt_id),
                transactional_id, task, run_tokens=frozenset(t for t in run_tokens if t), slots=slots_name(),
                holder=process_token())
    split = plans[0].split
    if split and not first_of_plan and not progress and not switched_off(ANNOUNCEMENTS_OFF):
        # Step 3a: acknowledged before the claim, so a first attempt that claimed earlier finds it.
        append(clients.producer(), topic, group, replace(own, kind=ANNOUNCE).to_json(), CONTROL_PARTITION)
    appended = Instant.now()
    own = replace(own, offset=append(clients.producer(), topic, group, own.to_json(), plans[0].claims_partition))
    # A progress attempt reads no control log: no announcement is there for it, nor a stamp.
    return AttemptClaim(own, topic, plans[0].reading_start(not_before), clients, appended=appended,
                        control_from=plans[0].offset if split and not progress else None,
                        first_of_plan=split and first_of_plan, partition=plans[0].claims_partition)


@dataclass
class ClaimInTwoLogs(_Enforced):
    """A progress attempt's claims in its pipeline's claims log and in the log where an earlier
    layout's attempts of its task claim (progress_claims: UNKNOWN, the model's step 3d). Each is
    read up to itself; the attempt goes on only if neither read makes it stale, fencing what
    either names."""

    pipeline: AttemptClaim
    earlier: AttemptClaim

    @property
    def claim(self) -> Claim:
        return self.pipeline.claim

    @property
    def appended(self) -> Instant:
        # The first appended: the attempt's transaction must open soon after each of them.
        return self.pipeline.appended

    def renew_if_old(self) -> None:
        self.pipeline.renew_if_old()
        self.earlier.renew_if_old()

    def enforce(self) -> FenceVerdict:
        verdicts = [self.pipeline.enforce(), self.earlier.enforce()]  # one consumer: one read at a time
        fenced = tuple(claim for verdict in verdicts for claim in verdict.to_fence)
        return replace(verdicts[0], outcome=FenceOutcome.FENCE if fenced else verdicts[0].outcome, to_fence=fenced)

    def release(self) -> None:
        self.pipeline.release()
        self.earlier.release()


def claim_in_earlier_log(claim: AttemptClaim, earlier: EarlierLog, lookback_ms: int) -> AttemptClaim:
    """A copy of ``claim`` in ``earlier``, read from its look-back (not before its ``not_before``)
    up to the copy, as an attempt of the earlier layout reads it. Its order there is that log's end
    when it looked: newer than any plan made in it before this attempt ran."""
    clients, own = claim.clients, claim.claim
    consumer = clients.consumer()
    end = log_end(consumer, earlier.topic, earlier.partition)
    start = lookback_start(consumer, earlier.topic, earlier.partition, lookback_ms, end)
    if earlier.not_before is not None:
        start = min(max(start, earlier.not_before), end)
    copy = replace(own, order=AttemptOrder(end, own.order.attempt), offset=-1)
    appended = Instant.now()
    offset = append(clients.producer(), earlier.topic, copy.group, copy.to_json(), earlier.partition)
    copy = replace(copy, offset=offset)
    return AttemptClaim(copy, earlier.topic, start, clients, appended=appended, partition=earlier.partition)


def first_attempt_of_plan(attempt_number: int, batch_write: bool, progress: bool = False) -> bool:
    """Whether a write task's attempt is the first of its task under its plan (layout 2's step 4a).
    Spark numbers a task's attempts from 0 within a stage attempt: a retry or a speculative copy
    has a larger number. A streaming write that commits input offsets runs each plan in one stage
    attempt, as that stage reads no shuffle output whose loss would make Spark attempt it again, and
    a micro-batch runs its write once. A batch ``df.write`` may run its plan in several jobs at once
    (two actions on one DataFrame): none of its attempts counts as first. Nor does a progress
    write's (task_progress), which may read shuffle output: a stage Spark attempts again after a
    fetch failure numbers its tasks from 0 again, and PySpark tells a task nothing of its stage
    attempt."""
    return attempt_number == 0 and not batch_write and not progress


def _log_other_instances(claims: tuple[Claim, ...], own: Claim) -> None:
    if claims:
        first = claims[0]
        log.warning("%s (%s): %d unreleased claim(s) of another instance of this pipeline on the same input (the "
                    "first: %s, %s, transactional id %r); not fenced and not a reason to refuse: the consumer group "
                    "decides which instance's offsets it takes (keep one instance running)", own.task, own.order,
                    len(claims), first.task, first.order, first.transactional_id)


def fence(clients: ClaimsClients, zombie: Claim, own: Claim) -> None:
    """init_transactions on the older attempt's id: the broker aborts its open transaction and
    bumps the id's epoch, so that attempt can neither send offsets nor commit any more."""
    started = time.monotonic()
    log.warning("%s (%s): fencing an older attempt of this task, %s (%s), by initializing its transactional "
                "id %r", own.task, own.order, zombie.task, zombie.order, zombie.transactional_id)
    # A short-lived producer: it exists only to initialize the id, and holds no transaction.
    init_transactional_producer(clients.bootstrap_servers, clients.kafka_params, zombie.transactional_id,
                                clients.transaction_timeout_ms)
    log.warning("%s: fenced %r in %.2f s; its open transaction, if any, is aborted", own.task,
                zombie.transactional_id, time.monotonic() - started)


def claims_clients_for(held: Held, group_id: str | None) -> ClaimsClients:
    """This worker's clients of the claims topic, made once per process like its producer."""
    settings = held.settings
    return held.client("claims", lambda: ClaimsClients(
        settings.bootstrap_servers, settings.kafka_params, group_id, settings.transaction_timeout_ms))
