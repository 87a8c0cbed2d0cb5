"""The claims protocol against the broker: a newer attempt of a task fences an older one's
transactional id, an older attempt that claims after a newer one refuses (attempt_fencing), in both
layouts of the claims (claims_layout): layout 1's one partition, and layout 2's control and claims
logs of a pipeline, where the first attempt of a plan reads the control log only."""
from __future__ import annotations

import json
import subprocess
import sys
import textwrap
import threading

import pytest
from confluent_kafka import KafkaException, TopicPartition
from confluent_kafka.admin import AdminClient

from pyspark_eos.kafka import fault_hooks
from pyspark_eos.kafka.group_offsets import fetch_committed_once, fetch_stable_commits
from pyspark_eos.protocol.executor_identity import SLOTS_DIRECTORY_ENV
from pyspark_eos.protocol.claims_layout import CLAIMS_PARTITION, CONTROL_PARTITION
from pyspark_eos.protocol.claims_log import ClaimsClients, ClaimsLog, append
from pyspark_eos.protocol.claims_records import CLAIM, AttemptOrder, Claim
from pyspark_eos.sink import attempt_fencing
from pyspark_eos.sink.attempt_fencing import claim_attempt
from pyspark_eos.sink.transactional_id_factory import lease_slot
from pyspark_eos.testing.output_check import held_partitions
from pyspark_eos.errors import StaleAttemptError

from .kafka_tools import create_topic, read_committed, transactional_producer, unique_name, wait_until

INPUT = [("orders", 0)]


class Ground:
    """A pipeline's claims, in layout 1 (one partition of ``claims_topic``) or 2 (a topic of the
    pipeline's own, named after ``claims_topic`` and its group)."""

    def __init__(self, bootstrap: str, layout: int = 1, claims_topic: str | None = None):
        self.bootstrap = bootstrap
        self.layout = layout
        self.group = unique_name("fencing")
        self.claims = ClaimsLog(bootstrap, {}, claims_topic or unique_name("claims"),
                                self.group if layout == 2 else None)
        self.clients = ClaimsClients(bootstrap, {}, self.group, 60000)
        self.output = create_topic(bootstrap, unique_name("out"))

    def plan(self):
        return self.claims.open_plan(self.group)

    def claim(self, plan, attempt: int, transactional_id: str, partitions=INPUT, run_tokens=(), not_before=None,
              first: bool = False):
        """An attempt's claim, enforced: a retry's (not the first attempt of its plan) unless ``first``."""
        claim = claim_attempt(self.clients, [plan], self.group, partitions, attempt, f"task 0 (attempt {attempt})",
                              transactional_id, run_tokens, not_before, first_of_plan=first)
        claim.enforce()
        return claim

    def open_transaction(self, transactional_id: str):
        """An attempt's producer, mid-transaction with one record produced."""
        producer = transactional_producer(self.bootstrap, transactional_id)
        producer.begin_transaction()
        producer.produce(self.output, value=transactional_id.encode())
        producer.flush(30)
        return producer


@pytest.fixture(params=[1, 2], ids=["layout-1", "layout-2"])
def ground(kafka, request) -> Ground:
    return Ground(kafka.bootstrap_servers, request.param)


@pytest.fixture
def progress_ground(kafka) -> Ground:
    """Progress plans (a sink without kafka.group.id) keep layout 1, where their look-back reads."""
    return Ground(kafka.bootstrap_servers, 1)


def _fatal(error: KafkaException) -> bool:
    return error.args[0].fatal()


# The driver appends plan records without idempotence (claims_producer): a retry whose first copy
# was written but not acknowledged leaves that copy before the acknowledged one, whose offset is
# the plan's offset. The first copy is no task's plan.
@pytest.mark.parametrize("copies_before", [0, 1], ids=["plan", "plan-written-twice"])
def test_a_newer_attempt_fences_the_older_attempts_open_transaction(ground, copies_before):
    for _ in range(copies_before):
        ground.plan()
    plan = ground.plan()
    older_id, newer_id = unique_name("older"), unique_name("newer")
    older = ground.open_transaction(older_id)
    ground.claim(plan, 5, older_id)
    ground.claim(plan, 6, newer_id)  # reads the older claim: init_transactions on older_id
    with pytest.raises(KafkaException) as fenced:
        older.send_offsets_to_transaction([TopicPartition("orders", 0, 10)],
                                          _group_metadata(ground), 30)
        older.commit_transaction(30)
    assert _fatal(fenced.value), fenced.value
    assert read_committed(ground.bootstrap, ground.output) == []


# A write task's worker: leases a slot of the executor, opens its transaction under the slot's id,
# claims its input, and dies (no release, the transaction left open).
DYING_WORKER = textwrap.dedent(
    """
    import json, os, sys
    from confluent_kafka import Producer
    from pyspark_eos.protocol.claims_log import ClaimsClients, PlanRecord
    from pyspark_eos.sink.attempt_fencing import claim_attempt
    from pyspark_eos.sink.transactional_id_factory import lease_slot
    spec = json.loads(sys.argv[1])
    with lease_slot(spec["prefix"], spec["group"]) as lease:
        producer = Producer({"bootstrap.servers": spec["bootstrap"], "transactional.id": lease.transactional_id})
        producer.init_transactions(30)
        producer.begin_transaction()
        producer.produce(spec["output"], value=b"dead")
        producer.flush(30)
        clients = ClaimsClients(spec["bootstrap"], {}, spec["group"], 60000)
        claim_attempt(clients, [PlanRecord(*spec["plan"])], spec["group"], [tuple(p) for p in spec["input"]],
                      5, "task 3 (attempt 5)", lease.transactional_id).enforce()
        print(lease.transactional_id, flush=True)
        os._exit(0)
    """)


@pytest.mark.parametrize("reread", [True, False], ids=["read-again-after-the-fence", "early-read-kept"])
def test_a_stable_read_sent_beside_the_claims_read_is_sent_again_after_a_fence(ground, monkeypatch, reread):
    # The older attempt claimed and found nothing (it runs on), then stalled before sending its
    # offsets. The newer one claims, and its stable read, sent at once beside its claims read, is
    # answered before the older one sends its offsets and commits; its fence comes after that commit.
    # Decided on that early answer, the newer attempt would commit the batch a second time.
    if not reread:
        monkeypatch.setattr(attempt_fencing, "early_read_usable", lambda verdict, early: early.settled)
    source = create_topic(ground.bootstrap, unique_name("in"))
    task_input = [(source, 0)]
    plan = ground.plan()
    older_id = unique_name("older")
    older = ground.open_transaction(older_id)
    ground.claim(plan, 5, older_id, partitions=task_input)
    newer = claim_attempt(ground.clients, [plan], ground.group, task_input, 6, "task 0 (attempt 6)",
                          unique_name("newer"))
    admin = AdminClient({"bootstrap.servers": ground.bootstrap})
    older_committed = threading.Event()

    def read_then_let_the_older_attempt_commit():
        early = fetch_committed_once(admin, ground.group, task_input)
        older.send_offsets_to_transaction([TopicPartition(source, 0, 10)], _group_metadata(ground), 30)
        older.commit_transaction(30)
        older_committed.set()
        return early

    fence = attempt_fencing.fence
    monkeypatch.setattr(attempt_fencing, "fence", lambda *args: (older_committed.wait(60), fence(*args)))
    early = newer.enforce_reading_beside(read_then_let_the_older_attempt_commit)
    committed = early.commits if early is not None else fetch_stable_commits(admin, ground.group, task_input, 30_000)
    # 10: the batch is committed, the newer attempt skips it; no offset: it would write it again.
    assert (committed[(source, 0)].offset == 10) == reread


def test_a_dead_attempts_id_another_task_took_over_is_not_fenced_by_the_retry(ground, tmp_path, monkeypatch):
    # Task 3's worker dies in its transaction; task 0 takes its slot (the lowest a dead worker left),
    # whose init_transactions aborts the dead attempt's transaction, and produces; then task 3's retry
    # claims. The dead attempt's claim is unreleased and older, but its id is task 0's now, whose
    # claim the retry cannot read yet (a task claims after it produced): fencing the id would abort
    # task 0's transaction. Run with taken_over_since always False, task 0's commit fails fenced.
    monkeypatch.setenv(SLOTS_DIRECTORY_ENV, str(tmp_path))  # one host: the test and its workers
    plan, prefix = ground.plan(), unique_name("slots")
    spec = {"bootstrap": ground.bootstrap, "group": ground.group, "output": ground.output, "prefix": prefix,
            "plan": [plan.topic, plan.offset, plan.since, plan.claims_from], "input": INPUT}
    dead = subprocess.run([sys.executable, "-c", DYING_WORKER, json.dumps(spec)], capture_output=True, text=True,
                          timeout=120)
    assert dead.returncode == 0, dead.stderr
    dead_id = dead.stdout.strip()
    with lease_slot(prefix, ground.group) as lease:
        assert lease.transactional_id == dead_id  # the dead worker's slot, taken over
        task0 = ground.open_transaction(lease.transactional_id)  # its init_transactions aborted the dead one's
        lease.record_producer(None)  # as producer_pool records a producer it made
        retry = ground.claim(plan, 6, unique_name("retry"))  # task 3's retry, in another slot
        ground.claim(plan, 7, lease.transactional_id, partitions=[("orders", 1)])  # task 0's own claim
        task0.commit_transaction(30)  # fails fenced (PRODUCER_FENCED) had the retry fenced its id
    retry.release()
    # task 0's record committed; the dead attempt's was aborted
    assert [r.value for r in read_committed(ground.bootstrap, ground.output)] == [lease.transactional_id.encode()]


# A task that leases a slot (the lowest one a dead worker left) and dies before its producer is made.
DYING_HOLDER = textwrap.dedent(
    """
    import json, os, sys
    from pyspark_eos.sink.transactional_id_factory import lease_slot
    spec = json.loads(sys.argv[1])
    with lease_slot(spec["prefix"], spec["group"]) as lease:
        print(lease.transactional_id, flush=True)
        os._exit(0)
    """)


def test_a_dead_attempts_id_whose_next_holder_died_before_making_its_producer_is_fenced(ground, tmp_path,
                                                                                         monkeypatch):
    # Task 3's worker dies in its transaction; the next task to lease its slot dies too, before its
    # init_transactions (its lock file still says its producer is being made). Task 3's retry reads
    # the unreleased claim and that lock file: the new holder ended nothing, so the retry fences the
    # id, and read_committed readers of the output are not held back until the transaction timeout
    # (docs/model/progress_records.pml, MUTANT_TAKEN_OVER_UNMADE). Run with any other holder named
    # in the lock file taken as proof, the retry skips the fence and the read times out.
    monkeypatch.setenv(SLOTS_DIRECTORY_ENV, str(tmp_path))  # one host: the test and its workers
    plan, prefix = ground.plan(), unique_name("slots")
    with lease_slot(prefix, ground.group):
        pass  # this process knows the slots (current_holder), and keeps slot 0 for itself
    spec = {"bootstrap": ground.bootstrap, "group": ground.group, "output": ground.output, "prefix": prefix,
            "plan": [plan.topic, plan.offset, plan.since, plan.claims_from], "input": INPUT}
    dead = subprocess.run([sys.executable, "-c", DYING_WORKER, json.dumps(spec)], capture_output=True, text=True,
                          timeout=120)
    assert dead.returncode == 0, dead.stderr
    holder = subprocess.run([sys.executable, "-c", DYING_HOLDER, json.dumps(spec)], capture_output=True, text=True,
                            timeout=120)
    assert holder.returncode == 0, holder.stderr
    assert holder.stdout.strip() == dead.stdout.strip()  # the dead worker's slot, taken and left again
    assert held_partitions(ground.bootstrap, ground.output, 1)  # the dead attempt's transaction holds readers
    ground.claim(plan, 6, unique_name("retry")).release()  # task 3's retry
    # The dead attempt's transaction is aborted: read_committed readers of the output are let
    # through (its markers follow within moments, long before the transaction's timeout of 60 s).
    wait_until(lambda: not held_partitions(ground.bootstrap, ground.output, 1), 10,
               "the dead attempt's transaction to end")
    assert read_committed(ground.bootstrap, ground.output) == []


def test_an_earlier_applications_unreleased_claim_does_not_fence_the_id_a_task_of_this_one_holds(
        progress_ground, tmp_path, monkeypatch):
    # A query without a group, restarted in a new application after its driver died: the dead run's
    # attempt claimed, and its release never left the worker (a release is sent without waiting).
    # A host's slots serve every application, so its transactional id is held again, by task 0 of
    # the new run, mid-transaction, while task 1 of the new run (another slot) reads the unreleased
    # claim. Task 0's producer was made under the new run's plan record, after that claim: its
    # init_transactions fenced the dead attempt already (and it took the slot over from a dead
    # holder). Run with initialized_since and taken_over_since always False, task 1 fences the id
    # again and task 0's commit fails fenced.
    ground = progress_ground
    prefix, earlier = unique_name("slots"), ground.plan()
    spec = {"bootstrap": ground.bootstrap, "group": ground.group, "output": ground.output, "prefix": prefix,
            "plan": [earlier.topic, earlier.offset, earlier.since, earlier.claims_from], "input": INPUT}
    monkeypatch.setenv(SLOTS_DIRECTORY_ENV, str(tmp_path))
    monkeypatch.setenv("SPARK_LOCAL_DIRS", str(tmp_path / "earlier-application"))
    dead = subprocess.run([sys.executable, "-c", DYING_WORKER, json.dumps(spec)], capture_output=True, text=True,
                          timeout=120)
    assert dead.returncode == 0, dead.stderr
    monkeypatch.setenv("SPARK_LOCAL_DIRS", str(tmp_path / "this-application"))
    later = ground.claims.open_plan(ground.group, lookback_ms=60000)
    assert later.since <= earlier.offset
    with lease_slot(prefix, ground.group) as task0_slot:
        assert task0_slot.transactional_id == dead.stdout.strip()  # the same id, in another application
        task0 = ground.open_transaction(task0_slot.transactional_id)  # aborts the dead attempt's transaction
        task0_slot.record_producer((later.topic, later.offset))
        with lease_slot(prefix, ground.group) as task1_slot:
            ground.claim(later, 1, task1_slot.transactional_id)  # the dead claim is older and unreleased
        task0.commit_transaction(30)  # fails fenced (PRODUCER_FENCED) had task 1 fenced its id
    assert [r.value for r in read_committed(ground.bootstrap, ground.output)] == [task0_slot.transactional_id.encode()]


def test_a_claim_written_twice_by_a_retry_is_one_attempts_claim(ground):
    # The claims producer is not idempotent (claims_producer): a retry whose first copy was written
    # but not acknowledged leaves that copy before the acknowledged one. The attempt neither takes
    # it for a newer attempt (refusing) nor for an older one (fencing its own id).
    plan = ground.plan()
    transactional_id = unique_name("attempt")
    producer = ground.open_transaction(transactional_id)
    first_copy = Claim(CLAIM, ground.group, frozenset(INPUT), AttemptOrder(plan.offset, 5), transactional_id,
                       "task 0 (attempt 5)")
    append(ground.clients.producer(), plan.topic, ground.group, first_copy.to_json(), plan.claims_partition)
    ground.claim(plan, 5, transactional_id)
    producer.commit_transaction(30)
    assert [r.value for r in read_committed(ground.bootstrap, ground.output)] == [transactional_id.encode()]


@pytest.mark.parametrize("run_tokens", [(), ("query-run-1",)], ids=["no-run-token", "one-run-token"])
def test_an_older_attempt_that_claims_after_a_newer_one_refuses(ground, run_tokens):
    plan = ground.plan()
    ground.claim(plan, 6, unique_name("newer"), run_tokens=run_tokens)
    with pytest.raises(StaleAttemptError, match=r"a newer attempt of this task \(task 0 \(attempt 6\), plan"):
        ground.claim(plan, 5, unique_name("older"), run_tokens=run_tokens)


def test_another_instances_later_plan_neither_fences_this_instances_attempt_nor_makes_it_stale(ground, caplog):
    # An old instance that has not yet learnt that a second one replaced it in the group plans the
    # batch after the new instance did: its plan record, and so its claims, order after the new
    # instance's. The broker refuses the old instance's offsets (layer 1); its claims must not fail
    # the new instance's attempts.
    new_plan, old_plan = ground.plan(), ground.plan()
    current_id = unique_name("current")
    current = ground.open_transaction(current_id)
    current_claim = ground.claim(new_plan, 1, current_id, run_tokens=["new-instance"])
    ground.claim(old_plan, 9, unique_name("old-instance"), run_tokens=["old-instance"])
    current.commit_transaction(30)  # not fenced by the old instance's claim
    current_claim.release()
    ground.claim(new_plan, 2, unique_name("current-retry"), run_tokens=["new-instance"])  # not stale
    assert "of another instance of this pipeline" in caplog.text
    assert wait_until(lambda: read_committed(ground.bootstrap, ground.output) or None, 30,
                      "the new instance's commit")[0].value == current_id.encode()


def test_a_later_plan_is_newer_whatever_the_task_attempt_ids(ground):
    # A restarted query re-plans the batch; Spark's task attempt ids start again from 0.
    old_run, new_run = ground.plan(), ground.plan()
    old_id = unique_name("old-run")
    old = ground.open_transaction(old_id)
    ground.claim(old_run, 500, old_id)
    ground.claim(new_run, 1, unique_name("new-run"))
    with pytest.raises(KafkaException) as fenced:
        old.commit_transaction(30)
    assert _fatal(fenced.value)
    with pytest.raises(StaleAttemptError):
        ground.claim(old_run, 501, unique_name("old-run"))


def test_a_progress_plan_fences_an_attempt_of_an_earlier_run_that_claimed_before_the_plan(progress_ground):
    ground = progress_ground
    # Progress records (a sink without kafka.group.id) have no group generation to fence an
    # earlier run of the query: an attempt that claimed, then stalled while the query was restarted
    # in the same application, is older than the new run's plan record. The new run's plan reads
    # the claims of one transaction timeout before it.
    earlier_run = ground.plan()
    zombie_id = unique_name("zombie")
    zombie = ground.open_transaction(zombie_id)
    ground.claim(earlier_run, 7, zombie_id)
    later_run = ground.claims.open_plan(ground.group, lookback_ms=60000)
    assert later_run.since is not None and later_run.since <= earlier_run.offset < later_run.offset
    ground.claim(later_run, 1, unique_name("replay"))
    with pytest.raises(KafkaException) as fenced:  # unfenced, it would commit its record
        zombie.send_offsets_to_transaction([TopicPartition(ground.output, 0, 1)], _group_metadata(ground), 30)
        zombie.commit_transaction(30)
    assert _fatal(fenced.value), fenced.value
    assert read_committed(ground.bootstrap, ground.output) == []


def test_a_progress_plan_reads_no_claim_before_the_plan_its_task_last_committed_under(progress_ground):
    ground = progress_ground
    # An attempt of an earlier batch was fenced by the attempt that committed that batch: claims
    # before that plan are not read again, and a live transaction of the same id is left alone.
    earlier_batch = ground.plan()
    worker_id = unique_name("worker")
    ground.claim(earlier_batch, 3, worker_id)  # never released: its worker was killed, say
    committed_under = ground.plan()
    moved_on = ground.open_transaction(worker_id)  # the id's next holder, mid-transaction
    later_run = ground.claims.open_plan(ground.group, lookback_ms=60000)
    assert later_run.since <= earlier_batch.offset
    ground.claim(later_run, 1, unique_name("replay"), not_before=committed_under.offset)
    moved_on.commit_transaction(30)
    committed = wait_until(lambda: _at_least(1, read_committed(ground.bootstrap, ground.output)), 30,
                           "the transaction's markers")
    assert [r.value for r in committed] == [worker_id.encode()]


def test_a_released_claim_is_not_fenced_and_other_partitions_are_not_touched(ground):
    plan = ground.plan()
    released_id, other_partition_id = unique_name("released"), unique_name("other")
    ground.claim(plan, 5, released_id).release()
    reused = ground.open_transaction(released_id)  # the worker moved on with its producer
    other = ground.open_transaction(other_partition_id)
    ground.claim(plan, 7, other_partition_id, partitions=[("orders", 1)])
    ground.claim(plan, 6, unique_name("newer"))
    ground.clients.producer().flush(30)
    reused.commit_transaction(30)
    other.commit_transaction(30)
    # commit_transaction returns once the coordinator has logged the commit; its markers reach the
    # partition a moment later, and until then the last stable offset stops before the record.
    committed = wait_until(lambda: _at_least(2, read_committed(ground.bootstrap, ground.output)), 30,
                           "both transactions' markers")
    assert sorted(r.value for r in committed) == sorted([released_id.encode(), other_partition_id.encode()])


def test_an_attempt_whose_plans_claims_are_gone_refuses(ground):
    plan = ground.plan()
    ground.plan()
    ground.claim(plan, 4, unique_name("other-task"), partitions=[("orders", 9)])
    admin = AdminClient({"bootstrap.servers": ground.bootstrap})
    gone = TopicPartition(plan.topic, plan.claims_partition, plan.reading_start() + 1)
    (deleted,) = admin.delete_records([gone]).values()
    deleted.result(30)  # as retention would
    with pytest.raises(StaleAttemptError, match="the claims are gone"):
        ground.claim(plan, 5, unique_name("late"))


def _at_least(count: int, records: list) -> list | None:
    return records if len(records) >= count else None


def _group_metadata(ground):
    from confluent_kafka import Consumer

    return Consumer({"bootstrap.servers": ground.bootstrap, "group.id": ground.group}).consumer_group_metadata()


def test_a_cluster_that_auto_creates_topics_still_gets_the_claims_topic_the_protocol_needs(tmp_path):
    from confluent_kafka.admin import ConfigResource

    from pyspark_eos.protocol.claims_log import CLAIMS_RETENTION_MS, ensure_claims_topic
    from pyspark_eos.testing.embedded_kafka import EmbeddedKafkaCluster

    overrides = {"auto.create.topics.enable": "true", "num.partitions": "3"}
    with EmbeddedKafkaCluster(nodes=1, directory=tmp_path / "kafka", overrides=overrides) as cluster:
        topic = unique_name("claims")
        ensure_claims_topic(cluster.bootstrap_servers, {}, topic)
        admin = AdminClient({"bootstrap.servers": cluster.bootstrap_servers})
        assert len(admin.list_topics(topic, timeout=30).topics[topic].partitions) == 1
        (configs,) = admin.describe_configs([ConfigResource(ConfigResource.Type.TOPIC, topic)]).values()
        assert configs.result(30)["retention.ms"].value == str(CLAIMS_RETENTION_MS)


# ------------------------------------------------------------------ layout 2: the control log's fast path

@pytest.fixture
def pipeline(kafka) -> Ground:
    return Ground(kafka.bootstrap_servers, 2)


def test_a_pipelines_claims_go_to_a_topic_of_its_own_with_a_control_log_and_a_claims_log(kafka, pipeline):
    plan = pipeline.plan()
    other = Ground(kafka.bootstrap_servers, 2, claims_topic=pipeline.claims.topic.split(".")[0])
    assert plan.topic != other.plan().topic and plan.topic.startswith(f"{other.claims.topic.split('.')[0]}.")
    claim = pipeline.claim(plan, 5, unique_name("first"), first=True)
    assert claim.claim.offset == plan.claims_from  # the claims log's first record
    claim.release()
    pipeline.clients.producer().flush(30)
    control = read_all(pipeline, plan.topic, CONTROL_PARTITION)
    assert [json.loads(v)["kind"] for v in control] == ["plan"]
    assert [json.loads(v)["kind"] for v in read_all(pipeline, plan.topic, CLAIMS_PARTITION)] == ["claim", "release"]


def test_a_first_attempt_reads_the_control_log_only_whatever_the_other_tasks_and_pipelines_appended(kafka, pipeline):
    plan = pipeline.plan()
    neighbour = Ground(kafka.bootstrap_servers, 2, claims_topic=pipeline.claims.topic)
    neighbours_plan = neighbour.plan()
    for task in range(1, 41):  # forty other tasks of the batch, and as many of another pipeline
        pipeline.claim(plan, 100 + task, unique_name("task"), partitions=[("orders", task)], first=True).release()
        neighbour.claim(neighbours_plan, 100 + task, unique_name("other"), partitions=[("orders", task)]).release()
    before = pipeline.clients.read.records
    pipeline.claim(plan, 5, unique_name("first"), first=True)
    assert pipeline.clients.read.records - before == 1  # its plan record
    before = pipeline.clients.read.records
    pipeline.claim(plan, 6, unique_name("retry"))  # a retry reads the claims log (80 claims and releases)
    assert pipeline.clients.read.records - before >= 80


@pytest.mark.parametrize("announced", [True, False], ids=["retry-announced", "announcements-off"])
def test_a_first_attempt_that_claims_after_a_retry_refuses_because_the_retry_announced_itself(
        pipeline, monkeypatch, announced):
    # The retry of a task claims while its first attempt stalls before claiming (a GC pause past the
    # executor's heartbeat timeout). The first attempt then claims and reads only the control log:
    # the retry's ANNOUNCE there sends it to the claims log, where it finds the newer claim. Without
    # the announcement it misses it, and both attempts commit the batch.
    if not announced:
        monkeypatch.setattr(attempt_fencing, "switched_off", lambda s: s == fault_hooks.ANNOUNCEMENTS_OFF)
    plan = pipeline.plan()
    first_id, retry_id = unique_name("first"), unique_name("retry")
    first, retry = pipeline.open_transaction(first_id), pipeline.open_transaction(retry_id)
    pipeline.claim(plan, 6, retry_id)
    committed = [retry_id]
    if announced:
        with pytest.raises(StaleAttemptError, match=r"a newer attempt of this task \(task 0 \(attempt 6\)"):
            pipeline.claim(plan, 5, first_id, first=True)
        first.abort_transaction(30)
    else:
        pipeline.claim(plan, 5, first_id, first=True)
        first.commit_transaction(30)
        committed.append(first_id)
    retry.commit_transaction(30)
    output = wait_until(lambda: _at_least(len(committed), read_committed(pipeline.bootstrap, pipeline.output)), 30,
                        "the commits' markers")
    assert sorted(r.value for r in output) == sorted(c.encode() for c in committed)
    assert announced == (len(output) == 1)


def test_a_retry_fences_the_first_attempt_that_claimed_before_it(pipeline):
    plan = pipeline.plan()
    first_id = unique_name("first")
    first = pipeline.open_transaction(first_id)
    pipeline.claim(plan, 5, first_id, first=True)
    pipeline.claim(plan, 6, unique_name("retry"))  # announces, reads the claims log: fences first_id
    with pytest.raises(KafkaException) as fenced:
        first.send_offsets_to_transaction([TopicPartition("orders", 0, 10)], _group_metadata(pipeline), 30)
        first.commit_transaction(30)
    assert _fatal(fenced.value), fenced.value
    assert read_committed(pipeline.bootstrap, pipeline.output) == []


def test_a_first_attempt_takes_the_generations_recorded_after_its_plan_from_the_control_log(pipeline):
    from pyspark_eos.protocol.group_stamp import GroupStamp

    plan = pipeline.plan()
    stamp = GroupStamp(b"", pipeline.group, 4, "member-1", "instance", frozenset(INPUT), "run-1")
    pipeline.claims.record_stamp(stamp)
    claim = pipeline.claim(plan, 5, unique_name("first"), run_tokens=["run-1"], first=True)
    assert [s.generation for s in claim.stamps] == [4]
    later = GroupStamp(b"", pipeline.group, 5, "member-1", "instance", frozenset(INPUT), "run-1")
    pipeline.claims.record_stamp(later)
    assert claim.newer_generation(stamp, 30).generation == 5


def read_all(ground: Ground, topic: str, partition: int) -> list[bytes]:
    from confluent_kafka import Consumer

    consumer = Consumer({"bootstrap.servers": ground.bootstrap, "group.id": unique_name("reader"),
                         "enable.partition.eof": True})
    consumer.assign([TopicPartition(topic, partition, 0)])
    values = []
    try:
        while True:
            message = consumer.poll(10)
            assert message is not None, "no end of partition within 10 s"
            if message.error():
                return values
            values.append(message.value())
    finally:
        consumer.close()


def test_a_pipelines_claims_topic_without_its_two_partitions_is_refused_naming_the_fix(kafka):
    from pyspark_eos.errors import ConfigurationError
    from pyspark_eos.protocol.claims_layout import pipeline_topic

    claims, group = unique_name("claims"), unique_name("group")
    create_topic(kafka.bootstrap_servers, pipeline_topic(claims, group), partitions=1)  # made by hand, say
    with pytest.raises(ConfigurationError, match=r"has 1 partition\(s\), and eos-kafka needs 2; delete it"):
        ClaimsLog(kafka.bootstrap_servers, {}, claims, group).open_plan(group)
