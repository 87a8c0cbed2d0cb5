"""The protocol's decisions without a broker, one test per action of the model (docs/model/README.md,
"Model actions and the code"): step 4, the fence decision on the claims an attempt read
(sink/fence_decision); step 4a, whether a first attempt in layout 2 reads the claims log; step 6, the commit decision on the group's committed offsets
(sink/commit_decision), for input offsets and for progress records. Broker tests of the same
cases: test_attempt_fencing, test_sink_transactions, test_any_source."""
from __future__ import annotations

import dataclasses

import pytest

from pyspark_eos.errors import (ConfigurationError, FencedError, NonDeterministicReplayError, OffsetMismatchError,
                                StaleAttemptError, UnassignedPartitionError)
from pyspark_eos.kafka.group_offsets import Committed, FetchAttempt
from pyspark_eos.protocol.claims_log import PlanRecord
from pyspark_eos.protocol.claims_layout import CLAIMS_PARTITION
from pyspark_eos.protocol.claims_records import ANNOUNCE, CLAIM, RELEASE, AttemptOrder, Claim
from pyspark_eos.protocol.commit_metadata import stored_metadata
from pyspark_eos.protocol.commit_metadata import partition_metadata
from pyspark_eos.protocol.group_stamp import GroupStamp
from pyspark_eos.protocol.offset_range import OffsetRange
from pyspark_eos.sink.commit_decision import (NEVER, CommitDecision, CommitPlan, decide_input_commit,
                                              decide_progress_commit)
from pyspark_eos.sink.attempt_fencing import first_attempt_of_plan
from pyspark_eos.sink.fence_decision import (FenceOutcome, decide_fence, early_read_usable, holder_fenced,
                                             initialized_since, needs_claims_read, taken_over_since)
from pyspark_eos.sink.idempotent_writes import (ProgressTarget, batch_write_target, refuse_group_in_foreach_batch,
                                               stream_target)
from pyspark_eos.sink.options import SinkOptions
from pyspark_eos.sink.progress_claims import (EarlierLog, LastCommit, ProgressReading, earlier_log_on_layout1,
                                              progress_reading)
from pyspark_eos.sink.task_progress import ProgressKey, committed_plan, progress_metadata
from pyspark_eos.sink.transactional_id_factory import SlotHolder

from .test_sink_units import _columns, _digest

SINK = {"kafka.bootstrap.servers": "127.0.0.1:9", "topic": "out"}

INPUT = frozenset({("orders", 0)})


def claim(plan: int, attempt: int, transactional_id: str, offset: int, kind: str = CLAIM,
          partitions=INPUT, run_tokens=frozenset({"run-1"})) -> Claim:
    return Claim(kind, "g", partitions, AttemptOrder(plan, attempt), transactional_id, f"task 0 (attempt {attempt})",
                 offset, frozenset(run_tokens))


OWN = claim(10, 7, "t-own", 20)


# ------------------------------------------------------------------ CLAIM_FIRST: steps 3-4b before step 2

def test_claim_first_a_transaction_opened_soon_after_the_claim_goes_on_and_a_late_one_does_not():
    from pyspark_eos.sink.attempt_fencing import OPEN_AFTER_CLAIM_S, Instant, opened_in_time
    from pyspark_eos.sink.attempt_fencing import LOOKBACK_MARGIN_MS

    claimed = Instant(wall=5000.0, monotonic=100.0)
    assert opened_in_time(claimed, Instant(5000.2, 100.2))
    assert opened_in_time(claimed, Instant(5000.0 + OPEN_AFTER_CLAIM_S, 100.0 + OPEN_AFTER_CLAIM_S))
    # Late by either clock: a later run's look-back may miss its claim.
    assert not opened_in_time(claimed, Instant(5000.1 + OPEN_AFTER_CLAIM_S, 100.2))  # the host was suspended
    assert not opened_in_time(claimed, Instant(4000.0, 100.1 + OPEN_AFTER_CLAIM_S))  # the wall clock stepped back
    # The look-back's margin holds that bound, the broker's sweep (10 s) and 20 s of the clocks' skew.
    assert LOOKBACK_MARGIN_MS >= (OPEN_AFTER_CLAIM_S + 10 + 20) * 1000


def test_claim_first_progress_commits_claim_before_their_first_record_input_offsets_after_their_records():
    from pyspark_eos.sink.commit_targets import InputOffsets, RecordsOnly, TaskProgress

    assert TaskProgress.claims_first
    assert not InputOffsets.claims_first and not RecordsOnly.claims_first


# ------------------------------------------------------------------ model step 4: scan the claims

def test_step4_alone_the_attempt_proceeds():
    assert decide_fence(OWN, [OWN]).outcome is FenceOutcome.PROCEED


def test_step4_a_newer_claim_on_its_input_makes_the_attempt_stale():
    newer = claim(10, 8, "t-newer", 15)  # appended before this one, by a later attempt of the same plan
    verdict = decide_fence(OWN, [newer, OWN])
    assert verdict.outcome is FenceOutcome.REFUSE and verdict.newer == newer
    later_plan = claim(11, 2, "t-replay", 16)  # a later plan's attempt: newer whatever its attempt id
    assert decide_fence(OWN, [later_plan, OWN]).outcome is FenceOutcome.REFUSE


def test_step4_an_older_unreleased_claim_under_another_id_goes_into_fence_once_per_id():
    older = claim(10, 5, "t-older", 12)
    copy = dataclasses.replace(older, offset=13)  # the same claim appended twice (a retried append)
    verdict = decide_fence(OWN, [older, copy, OWN])
    assert verdict.outcome is FenceOutcome.FENCE and verdict.to_fence == (copy,)  # an id's newest claim


def test_step4_a_released_claim_its_own_id_or_its_own_earlier_copy_is_not_fenced():
    older = claim(10, 5, "t-older", 12)
    released = claim(10, 5, "t-older", 14, kind=RELEASE)
    same_id = claim(10, 3, "t-own", 11)  # an earlier attempt in the same slot: this attempt's own init fenced it
    own_copy = dataclasses.replace(OWN, offset=19)  # this attempt's claim, written twice
    assert decide_fence(OWN, [older, same_id, released, own_copy, OWN]).outcome is FenceOutcome.PROCEED


def test_step4_a_claim_whose_id_another_attempt_claimed_under_since_is_not_fenced():
    # A dead worker's slot, taken over by the next task of the executor: the new holder's
    # init_transactions aborted the dead attempt's transaction, and a fence would abort the new one's.
    dead = dataclasses.replace(claim(10, 5, "t-slot-1", 12), slots="executor-1-of-app-1")
    new_holder = dataclasses.replace(claim(10, 6, "t-slot-1", 14, partitions=frozenset({("orders", 3)})),
                                     slots="executor-1-of-app-1")
    assert decide_fence(OWN, [dead, new_holder, OWN]).outcome is FenceOutcome.PROCEED
    copy = dataclasses.replace(dead, offset=14)  # the dead attempt's own claim appended twice is no new holder
    assert decide_fence(OWN, [dead, copy, OWN]).to_fence == (copy,)
    before = dataclasses.replace(new_holder, offset=11)  # an earlier holder: no proof
    assert decide_fence(OWN, [before, dead, OWN]).to_fence == (dead,)
    # The same id in another application (executor ids repeat) is held under other slots: no proof.
    elsewhere = dataclasses.replace(new_holder, slots="executor-1-of-app-2")
    assert decide_fence(OWN, [dead, elsewhere, OWN]).to_fence == (dead,)
    old_dead, old_holder = (dataclasses.replace(c, slots="") for c in (dead, new_holder))  # before claims named slots
    assert decide_fence(OWN, [old_dead, old_holder, OWN]).to_fence == (old_dead,)


def test_step4_a_claim_whose_slot_another_process_holds_now_is_not_fenced():
    # The same take-over, seen in the executor's slot files before the new holder's claim is in the
    # log: its lock file names another process than the one that claimed.
    own = dataclasses.replace(OWN, slots="executor-1-of-app-1", holder="worker-b")
    dead = dataclasses.replace(claim(10, 5, "t-slot-1", 12), slots="executor-1-of-app-1", holder="worker-a")
    assert taken_over_since(dead, own, "worker-c")
    assert not taken_over_since(dead, own, "worker-a")  # its own process still holds it: a zombie, fenced
    assert not taken_over_since(dead, own, "")  # being taken right now: no proof
    assert not taken_over_since(dead, own, None)  # not a slot this process knows
    assert not taken_over_since(dataclasses.replace(dead, slots="executor-1-of-app-2"), own, "worker-c")
    assert not taken_over_since(dataclasses.replace(dead, holder=""), own, "worker-c")  # claimed before claims named it


def test_step4_an_id_whose_holder_was_initialized_after_the_claim_is_not_fenced_again():
    # A query without a group restarted in a new application: the dead run's claim (offset 12) lost
    # its release, and the same id (executor ids and slots repeat) is held again here, by a producer
    # made under the new run's plan record (offset 20): its init_transactions fenced the claim.
    dead = dataclasses.replace(claim(10, 5, "t-slot-0", 12), slots="executor-of-app-1", holder="worker-a")
    assert initialized_since(dead, "claims", ("claims", 20))
    assert not initialized_since(dead, "claims", ("claims", 11))  # made before the claim: the zombie may be newer
    assert not initialized_since(dead, "claims", ("claims", 12))
    assert not initialized_since(dead, "claims", None)  # not recorded (a pipeline with a group, an older writer)
    assert not initialized_since(dead, "claims", ("other-claims", 20))  # offsets of another topic order nothing
    # A later claim under the same id, from a third application, after the holder's plan (offset
    # 14): that attempt's init may have come after the holder's, so the holder's record proves
    # nothing about it. The decision names an id's newest claim, and the fence is not skipped.
    third = dataclasses.replace(claim(10, 6, "t-slot-0", 16), slots="executor-of-app-3", holder="worker-c")
    assert initialized_since(dead, "claims", ("claims", 14))
    assert decide_fence(OWN, [dead, third, OWN]).to_fence == (third,)
    assert not initialized_since(third, "claims", ("claims", 14))


def test_step4_on_layout_2_a_holders_record_is_a_claims_log_offset_not_its_plans_control_log_offset():
    # A named progress pipeline's plan record is at control offset 40, its claims start at 300: a
    # claim at 250 of the claims log was appended before the holder's producer, one at 320 may not be.
    plan = PlanRecord("claims.checkpoint_ck-0123", 40, claims_from=300)
    assert plan.appended_before_its_tasks == ("claims.checkpoint_ck-0123", 299)
    assert initialized_since(claim(10, 5, "t", 250), plan.topic, plan.appended_before_its_tasks)
    assert not initialized_since(claim(10, 5, "t", 320), plan.topic, plan.appended_before_its_tasks)
    assert PlanRecord("claims", 20, since=5).appended_before_its_tasks == ("claims", 20)


def test_a_slots_lock_file_names_its_holder_and_what_its_producer_was_initialized_after():
    assert SlotHolder.parse("") == SlotHolder("")
    # A lease whose producer failed, or one of a version that recorded nothing more: not made.
    assert SlotHolder.parse("123-45-ab") == SlotHolder("123-45-ab")
    assert SlotHolder.parse("123-45-ab ?", busy=True) == SlotHolder("123-45-ab", busy=True, pending=True)
    assert SlotHolder.parse("123-45-ab .") == SlotHolder("123-45-ab", made=True)
    assert SlotHolder.parse("123-45-ab 20 claims") == SlotHolder("123-45-ab", ("claims", 20), made=True)


# ------------------------------------------------------------------ progress_records.pml, step by step

def test_progress_reading_start_reads_from_the_lookback_but_not_before_the_tasks_last_committed_plan():
    assert PlanRecord("claims", 50).reading_start(30) == 50  # a plan of input offsets: its own record
    lookback = PlanRecord("claims", 50, since=20)
    assert lookback.reading_start() == 20
    assert lookback.reading_start(30) == 30  # the task committed under plan 30: older claims were fenced
    assert lookback.reading_start(10) == 20  # claims before the lookback belong to aborted transactions
    assert lookback.reading_start(60) == 50  # never after the plan's own record
    digest = _digest([_columns([b"a"])])
    assert committed_plan(Committed(8, progress_metadata(7, "q-1", digest, PlanRecord("claims", 30)))) == 30


def test_progress_decide_fence_fences_an_ids_newest_unreleased_claim():
    # The model's MUTANT_OLDEST_CLAIM (the decision before 1e6a788) took an id's oldest claim:
    # with ids shared between applications a holder initialized between the two claims made the
    # attempt skip the fence, and the newer claim's attempt committed too.
    older = dataclasses.replace(claim(10, 5, "t0", 12), slots="app-1", holder="worker-a")
    newer = dataclasses.replace(claim(10, 6, "t0", 15), slots="app-2", holder="worker-b")
    assert decide_fence(OWN, [older, newer, OWN]).to_fence == (newer,)


def test_progress_holder_fenced_a_holder_whose_producer_is_not_made_has_fenced_nothing():
    # The model's MUTANT_TAKEN_OVER_UNMADE: a holder named in the lock file whose producer is being
    # made (or never was: it died first) has not aborted what the dead attempt left open.
    own = dataclasses.replace(OWN, slots="host-a", holder="worker-b")
    dead = dataclasses.replace(claim(10, 5, "t-slot-1", 12), slots="host-a", holder="worker-a")
    taken = SlotHolder("worker-c", made=True)
    assert holder_fenced(dead, own, "claims", taken)  # its init_transactions ended the dead attempt's transaction
    assert not holder_fenced(dead, own, "claims", SlotHolder("worker-c", busy=True, pending=True))
    assert not holder_fenced(dead, own, "claims", SlotHolder("worker-c"))  # its producer failed, or it died first
    assert not holder_fenced(dead, own, "claims", SlotHolder("worker-a", made=True))  # the zombie's own process
    assert not holder_fenced(dead, own, "claims", None)  # an id of slots this process never leased under
    assert holder_fenced(dead, own, "claims", SlotHolder("worker-a", ("claims", 20), made=True))  # initialized after
    assert not holder_fenced(dead, own, "claims", SlotHolder("worker-a", ("claims", 11), made=True))


def test_step4_claims_of_another_instance_other_inputs_or_groups_are_neither_fenced_nor_a_reason_to_refuse():
    other_instance = claim(12, 9, "t-other", 15, run_tokens={"run-2"})
    other_input = claim(12, 9, "t-x", 16, partitions=frozenset({("orders", 1)}))
    other_group = dataclasses.replace(claim(12, 9, "t-y", 17), group="h")
    verdict = decide_fence(OWN, [other_instance, other_input, other_group, OWN])
    assert verdict.outcome is FenceOutcome.PROCEED and verdict.other_instances == (other_instance,)
    # a claim without run tokens (written without them) counts as this instance's
    tokenless = claim(12, 9, "t-old-writer", 18, run_tokens=())
    assert decide_fence(OWN, [tokenless, OWN]).outcome is FenceOutcome.REFUSE


def test_step4a_a_first_attempt_with_no_announcement_in_the_control_log_reads_no_claims():
    own = claim(10, 5, "t1", 3)
    stamp = GroupStamp(b"", "g", 4, "m", "i", frozenset(INPUT), "run-1")
    assert not needs_claims_read(own, True, [stamp])
    assert not needs_claims_read(own, True, [])


def test_step4a_an_announcement_of_another_attempt_of_its_task_sends_a_first_attempt_to_the_claims_log():
    own = claim(10, 5, "t1", 3)
    assert needs_claims_read(own, True, [claim(10, 6, "t2", 1, kind=ANNOUNCE)])  # a retry
    assert needs_claims_read(own, True, [claim(8, 2, "t2", 1, kind=ANNOUNCE)])  # an earlier plan's retry


# --------------------------------------- attempt_fencing.pml, SPLIT_LOG with PROGRESS: LAST_COMMIT

PIPELINE_PLAN = PlanRecord("claims.checkpoint_ck-0123", 40, claims_from=300)
EARLIER_PLAN = PlanRecord("claims.checkpoint_ck-0123", 31, claims_from=250)


def test_a_pipeline_without_a_group_is_named_by_its_checkpoint_option_or_its_txn_app_id_and_topic():
    base = {"kafka.bootstrap.servers": "b:9092", "topic": "out"}
    assert SinkOptions.parse({**base, "checkpointLocation": "/ck/q1"}).pipeline == "checkpoint /ck/q1"
    assert SinkOptions.parse({**base, "txnAppId": "app", "txnVersion": "3"}).pipeline == "txnAppId app out"
    assert SinkOptions.parse({**base, "kafka.group.id": "g", "checkpointLocation": "/ck"}).pipeline == "g"
    assert SinkOptions.parse(base).pipeline is None  # no name: the shared topic (layout 1)
    at_least_once = {**base, "checkpointLocation": "/ck/q1", "deliveryGuarantee": "at-least-once"}
    assert SinkOptions.parse(at_least_once).pipeline is None  # no claims at all


def _committed(plan: PlanRecord, run: str | None) -> Committed:
    return Committed(8, progress_metadata(7, "q-1", _digest([_columns([b"a"])]), plan, run))


def test_last_commit_same_run_on_the_pipelines_log_reads_from_the_plans_claims_not_the_lookback():
    reading = progress_reading(_committed(EARLIER_PLAN, "run-2"), "run-2", PIPELINE_PLAN, "claims")
    assert reading == ProgressReading(LastCommit.SAME, claims_not_before=250) and reading.from_plan


def test_last_commit_another_run_reads_the_claims_log_from_the_lookback_but_not_before_that_commit():
    reading = progress_reading(_committed(EARLIER_PLAN, "run-1"), "run-2", PIPELINE_PLAN, "claims")
    assert reading == ProgressReading(LastCommit.OTHER, claims_not_before=250) and not reading.from_plan
    # A batch write has no run: never SAME, even against its own job group's commit.
    assert progress_reading(_committed(EARLIER_PLAN, None), None, PIPELINE_PLAN, "claims").last is LastCommit.OTHER


def test_last_commit_unknown_claims_in_the_shared_topic_too():
    never = progress_reading(NEVER, "run-2", PIPELINE_PLAN, "claims")
    held = progress_reading(None, "run-2", PIPELINE_PLAN, "claims")  # an open transaction held the offset
    assert never == held == ProgressReading(LastCommit.UNKNOWN, earlier=EarlierLog("claims", 0))
    # Committed on layout 1 (an earlier version, or this pipeline before it had a name): from that plan on.
    layout1 = progress_reading(_committed(PlanRecord("claims", 90, since=70), None), "run-2", PIPELINE_PLAN, "claims")
    assert layout1 == ProgressReading(LastCommit.UNKNOWN, earlier=EarlierLog("claims", 0, not_before=90))
    # Committed on another pipeline's log (its checkpoint moved): that log's claims, from that commit's.
    moved = PlanRecord("claims.checkpoint_old-4567", 12, claims_from=80)
    assert progress_reading(_committed(moved, "run-1"), "run-2", PIPELINE_PLAN, "claims") == ProgressReading(
        LastCommit.UNKNOWN, earlier=EarlierLog("claims.checkpoint_old-4567", CLAIMS_PARTITION, not_before=80))


def test_a_pipeline_that_lost_its_name_claims_in_its_own_topic_too_while_its_last_commit_is_there():
    # Its checkpoint came from an option, now from spark.sql.streaming.checkpointLocation: the plan
    # is the shared topic's, and the run that committed last claimed in the pipeline's own topic.
    shared_plan = PlanRecord("claims", 90, since=70)
    assert earlier_log_on_layout1(_committed(EARLIER_PLAN, "run-1"), shared_plan) == EarlierLog(
        EARLIER_PLAN.topic, CLAIMS_PARTITION, not_before=250)
    assert earlier_log_on_layout1(_committed(PlanRecord("claims", 40, since=30), None), shared_plan) is None
    assert earlier_log_on_layout1(NEVER, shared_plan) is None and earlier_log_on_layout1(None, shared_plan) is None


def test_a_progress_record_on_layout_2_names_no_plan_an_earlier_version_could_take_for_the_shared_topics():
    # 0.1.0 reads "plan" as an offset of the shared topic to read claims from: a control log's
    # offset there could skip claims. Layout 2's record names its plan under other fields.
    stored = _committed(EARLIER_PLAN, "run-1")
    assert committed_plan(stored) is None and "plan" not in stored_metadata(stored.metadata)
    assert committed_plan(_committed(PlanRecord("claims", 90, since=70), None)) == 90


def test_step4a_announcements_of_other_inputs_groups_instances_or_its_own_copy_do_not():
    own = claim(10, 5, "t1", 3)
    others = [claim(10, 6, "t2", 1, kind=ANNOUNCE, partitions=frozenset({("orders", 1)})),
              dataclasses.replace(claim(10, 6, "t2", 1, kind=ANNOUNCE), group="other"),
              claim(10, 6, "t2", 1, kind=ANNOUNCE, run_tokens={"run-2"}),
              claim(10, 5, "t1", 1, kind=ANNOUNCE),
              claim(10, 6, "t2", 1)]  # a claim is no announcement (none is in the control log)
    assert not needs_claims_read(own, True, others)


def test_step4a_an_attempt_that_is_not_the_first_of_its_plan_always_reads_the_claims_log():
    assert needs_claims_read(claim(10, 6, "t2", 3), False, [])


SETTLED = FetchAttempt({("orders", 0): Committed(40, "")}, [])


def test_early_stable_read_a_settled_answer_read_beside_the_claims_decides_when_nothing_is_to_be_fenced():
    assert early_read_usable(decide_fence(OWN, [OWN]), SETTLED)
    released = [claim(10, 5, "t-older", 12), claim(10, 5, "t-older", 14, kind=RELEASE), OWN]
    assert early_read_usable(decide_fence(OWN, released), SETTLED)


def test_early_stable_read_is_read_again_once_an_older_attempt_is_to_be_fenced():
    # The older attempt may send its offsets and commit after the early answer and before the
    # fence: deciding on that answer would commit the batch a second time.
    verdict = decide_fence(OWN, [claim(10, 5, "t-older", 12), OWN])
    assert verdict.outcome is FenceOutcome.FENCE
    assert not early_read_usable(verdict, SETTLED)


def test_early_stable_read_an_unsettled_or_failed_answer_is_read_again():
    proceed = decide_fence(OWN, [OWN])
    assert not early_read_usable(proceed, FetchAttempt({}, [("orders", 0)]))  # an open transaction holds it
    assert not early_read_usable(proceed, FetchAttempt({}, [], "COORDINATOR_LOAD_IN_PROGRESS"))
    assert not early_read_usable(proceed, None)


def test_step4a_only_a_streaming_writes_attempt_number_0_is_the_first_of_its_plan():
    assert first_attempt_of_plan(0, batch_write=False)
    assert not first_attempt_of_plan(1, batch_write=False)  # a retry or a speculative copy
    assert not first_attempt_of_plan(0, batch_write=True)  # a plan of a df.write may run in several jobs
    assert not first_attempt_of_plan(-1, batch_write=False)  # no TaskContext
    # A progress write may read shuffle output, whose stage Spark attempts again after a fetch
    # failure with its tasks numbered from 0 again: two "first" attempts would miss each other.
    assert not first_attempt_of_plan(0, batch_write=False, progress=True)


def test_step4_the_groups_stamps_read_on_the_way_are_kept_for_a_rebalance():
    stamp = GroupStamp(b"m", "g", 4, "member", "i", INPUT, "run-1")
    other_group = dataclasses.replace(stamp, group_id="h")
    assert decide_fence(OWN, [stamp, other_group, OWN]).stamps == (stamp,)


# ------------------------------------------------------------------ model step 6: decide on what is committed

STAMP = GroupStamp(b"CGMDv2:", "g", 3, "m", "i", frozenset({("t", 0), ("t", 1)}))
PLAN = CommitPlan(((STAMP, (OffsetRange("t", 0, 10, 20), OffsetRange("t", 1, 5, 6))),))


def at(o0, o1, metadata=""):
    return {("t", 0): Committed(o0, metadata), ("t", 1): Committed(o1, metadata)}


def test_step6_seen_at_the_start_goes_on_to_commit():
    assert decide_input_commit(PLAN, at(10, 5)) is CommitDecision.COMMIT
    assert decide_input_commit(PLAN, at(None, None)) is CommitDecision.COMMIT  # never committed: a first plan


def test_step6_seen_at_the_end_aborts_and_succeeds():
    assert decide_input_commit(PLAN, at(20, 6)) is CommitDecision.SKIP


def test_step6_anything_else_fails_writing_nothing():
    for committed in (at(20, 5), at(12, 5), at(30, 6)):
        with pytest.raises(OffsetMismatchError, match=r"t-0@\d+, t-1@\d+ but this task read t-0\[10,20\)"):
            decide_input_commit(PLAN, committed)


def test_step6_offsets_another_query_committed_name_the_other_instance():
    theirs = partition_metadata(3, "7", "their-query")
    committed = {("t", 0): Committed(27, theirs), ("t", 1): Committed(5, theirs)}
    with pytest.raises(FencedError, match=r"another streaming query \(id their-query\), not by this one \(id our-query\)"):
        decide_input_commit(PLAN, committed, "our-query")
    with pytest.raises(OffsetMismatchError):  # this query's own offsets, or a batch write's: the checkpoint disagrees
        decide_input_commit(PLAN, {("t", 0): Committed(27, partition_metadata(3, "7", "our-query")),
                                   ("t", 1): Committed(5, "")}, "our-query")
    with pytest.raises(OffsetMismatchError):
        decide_input_commit(PLAN, committed, None)
    assert decide_input_commit(PLAN, at(10, 5, theirs), "our-query") is CommitDecision.COMMIT


def test_step6_a_partition_outside_the_stamp_or_committed_under_a_newer_generation_is_refused():
    unowned = CommitPlan(((STAMP, (OffsetRange("t", 2, 0, 5),)),))
    with pytest.raises(UnassignedPartitionError, match=r"t-2\[0,5\).*not assigned"):
        decide_input_commit(unowned, {})
    with pytest.raises(UnassignedPartitionError, match="newer generation"):
        decide_input_commit(PLAN, at(10, 5, partition_metadata(4, "7", "q")))


def test_step6_progress_commits_a_new_batch_skips_a_replay_and_refuses_an_older_or_different_one():
    key = ProgressKey("eos-kafka", "q-1", 3, "claims")
    assert key.group_id == "eos-kafka.progress.q-1.3" and key.partition == ("claims", 0)
    digest = _digest([_columns([b"a", b"b"])])
    replay = digest.as_json()
    stored = Committed(8, progress_metadata(7, "q-1", digest, PlanRecord("claims", 42)))
    assert committed_plan(stored) == 42 and committed_plan(NEVER) is None
    assert committed_plan(Committed(8, '{"batch":7}')) is None  # committed before progress named its plan

    def batch(number: int) -> ProgressTarget:
        return stream_target("q-1", str(number), "task 3")
    assert decide_progress_commit(batch(7), NEVER, replay, "task 3") is CommitDecision.COMMIT
    assert decide_progress_commit(batch(8), stored, replay, "task 3") is CommitDecision.COMMIT  # the next batch
    assert decide_progress_commit(batch(12), stored, replay, "task 3") is CommitDecision.COMMIT  # no task 3 in 8-11
    assert decide_progress_commit(batch(7), stored, replay, "task 3") is CommitDecision.SKIP  # a replay
    with pytest.raises(NonDeterministicReplayError, match=r"task 3: batch 7 was written before with 2 record\(s\) "
                       r"\(checksum [0-9a-f]{16}\), and its replay has 1 .*not deterministic"):
        decide_progress_commit(batch(7), stored, _digest([_columns([b"a"])]).as_json(), "task 3")
    with pytest.raises(StaleAttemptError, match="already written batch 7 of the query, after batch 6"):
        decide_progress_commit(batch(6), stored, replay, "task 3")


def test_step6_a_versioned_write_skips_its_own_version_and_older_ones_and_refuses_other_records():
    digest = _digest([_columns([b"a", b"b"])])
    stored = Committed(8, progress_metadata(7, "nightly/out", digest, PlanRecord("claims", 42)))

    def version(number: int) -> ProgressTarget:
        return _write_key(SinkOptions.parse({**SINK, "txnAppId": "nightly", "txnVersion": str(number)}), None, None)
    assert version(7).scope == "nightly/out" and version(7).describe() == "txnAppId 'nightly' version 7 into out"
    assert decide_progress_commit(version(8), stored, digest.as_json(), "task 3") is CommitDecision.COMMIT
    assert decide_progress_commit(version(7), stored, digest.as_json(), "task 3") is CommitDecision.SKIP
    # As Delta: a version below the app's last one is skipped, not refused.
    assert decide_progress_commit(version(6), stored, digest.as_json(), "task 3") is CommitDecision.SKIP
    with pytest.raises(NonDeterministicReplayError, match=r"txnAppId 'nightly' version 7 into out was written "
                       r"before with 2 record.*this write of it has 1 .*new txnVersion"):
        decide_progress_commit(version(7), stored, _digest([_columns([b"a"])]).as_json(), "task 3")


def _write_key(options: SinkOptions, query_id: str | None, batch_id: str | None) -> ProgressTarget | None:
    return batch_write_target(options.txn_app_id, options.txn_version, options.topic, query_id, batch_id)


def test_a_batch_writes_key_is_its_options_or_the_foreach_batch_it_runs_in():
    plain = SinkOptions.parse(SINK)
    assert _write_key(plain, None, None) is None  # no key: a plain transactional write
    in_batch = _write_key(plain, "q-1", "4")
    assert (in_batch.scope, in_batch.version, in_batch.versioned) == ("q-1//out", 4, True)
    named = _write_key(SinkOptions.parse({**SINK, "txnAppId": "orders"}), "q-1", "4")
    # Two writes of a batch into one topic; the query's id stays in the key: a new checkpoint's
    # batch ids start again at 0 and must not be skipped as older versions.
    assert (named.scope, named.version) == ("q-1/orders/out", 4)
    assert named.describe() == "foreachBatch of query q-1 txnAppId 'orders' version 4 into out"
    given = _write_key(SinkOptions.parse({**SINK, "txnAppId": "orders", "txnVersion": "9"}), "q-1", "4")
    assert (given.scope, given.version) == ("orders/out", 9)  # both given: Delta's key, across queries
    with pytest.raises(ConfigurationError, match="gives txnAppId without txnVersion.*give both"):
        _write_key(SinkOptions.parse({**SINK, "txnAppId": "orders"}), None, None)
    with pytest.raises(ConfigurationError, match="gives txnVersion without txnAppId"):
        _write_key(SinkOptions.parse({**SINK, "txnVersion": "3"}), None, None)
    with pytest.raises(ConfigurationError, match="inside foreachBatch .*drop kafka.group.id"):
        refuse_group_in_foreach_batch("g", "4")
    refuse_group_in_foreach_batch("g", None)
    for bad, match in (({"txnVersion": "-1"}, "txnVersion='-1' must be a whole number"),
                       ({"txnAppId": " "}, "txnAppId=' ' must be a non-empty printable ASCII"),
                       ({"txnAppId": "a", "kafka.group.id": "g"}, "drop kafka.group.id, or drop txnAppId"),
                       ({"txnAppId": "a", "deliveryGuarantee": "at-least-once"}, "drop deliveryGuarantee")):
        with pytest.raises(ConfigurationError, match=match):
            SinkOptions.parse({**SINK, **bad})

# ------------------------------------------------------------------ group_commit.pml, step by step

def test_group_commit_offsets_to_commit_commits_a_completed_end_of_an_owned_partition_that_the_group_is_behind():
    from pyspark_eos.source.group_commits import offsets_to_commit

    owned = frozenset({("in", 0), ("in", 1)})
    assert offsets_to_commit({("in", 0): 7, ("in", 1): 3}, {("in", 0): 5}, owned) == {("in", 0): 7, ("in", 1): 3}
    # Never backward (MUTANT_BACKWARD): an instance whose checkpoint is behind the group commits nothing.
    assert offsets_to_commit({("in", 0): 7}, {("in", 0): 9}, owned) == {}
    assert offsets_to_commit({("in", 0): 7}, {("in", 0): 7}, owned) == {}  # a narrow pipeline's task committed it
    assert offsets_to_commit({("in", 2): 7}, {}, owned) == {}  # another member's partition
    assert offsets_to_commit({("in", 0): 7}, None, owned) == {}  # the group's offsets not known now


def test_group_commit_its_metadata_names_the_generation_and_no_batch():
    import json

    from pyspark_eos.source.group_commits import commit_metadata

    stamp = GroupStamp(b"", "g", 4, "g-m-1", "g.inst", frozenset({("in", 0)}))
    stored = json.loads(commit_metadata(stamp))
    assert stored["generation"] == 4 and stored["batch"] is None
