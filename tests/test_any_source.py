"""Exactly-once into Kafka from sources that are not eos-kafka (sink/task_progress): JSON files and
the rate source, without kafka.group.id. Each write task commits its own progress (the batch id)
with its records; a killed worker's retry writes its task once, and a stalled attempt of an older
batch never commits after its retry did. The driver killed between the Kafka commits and Spark's
commit log, and a replay whose records differ, are in test_driver_kills.py."""
from __future__ import annotations

import json
from pathlib import Path

import pytest
from confluent_kafka import ConsumerGroupTopicPartitions, TopicPartition
from confluent_kafka.admin import AdminClient

from pyspark_eos.kafka.options import DEFAULT_CLAIMS_TOPIC
from pyspark_eos.protocol.claims_layout import PIPELINE_PARTITIONS, pipeline_topic
from pyspark_eos.sink.task_progress import group_prefix
from pyspark_eos.testing import fault_injection as faults
from pyspark_eos.testing.local_spark import executor_local_dirs

from .driver_kill_job import RATE_ROWS_PER_BATCH, eos_writer, input_frame, split_frame
from .kafka_tools import committed_offsets, create_topic, read_committed, unique_name, write_transactions
from .spark_tools import logged_batches
from .test_zombie_attempts import TRANSACTION_TIMEOUT_MS, Zombie, spark_fast_loss  # noqa: F401 - a fixture

PER_FILE = 30
SPLIT_RECORDS = 90  # two batches of a split stream (driver_kill_job.split_frame)


class FileCopy:
    """JSON files ({"id": n}, ids 0..n-1) copied into a topic by eos-kafka without a group."""

    def __init__(self, kafka, tmp_path: Path, files: int):
        self.bootstrap = kafka.bootstrap_servers
        self.input = tmp_path / "input"
        self.input.mkdir(parents=True)
        self.expected: list[int] = []
        self.add_files(files)
        self.output = create_topic(self.bootstrap, unique_name("any-out"), partitions=2)
        self.checkpoint = str(tmp_path / "checkpoint")
        self.prefix = unique_name("any")

    def writer(self, spark, files_per_batch: int, source: str = "files", **sink_options):
        if source == "split":
            frame = split_frame(spark, self.bootstrap, self.split_input)
        else:
            frame = input_frame(spark, "rate" if source == "rate" else str(self.input), files_per_batch)
        return eos_writer(frame, self.bootstrap, self.output, self.prefix, self.checkpoint, **sink_options)

    def spec(self, source: str) -> dict:
        return {"source": source, "topic": self.output, "checkpoint": self.checkpoint, "prefix": self.prefix}

    def output_ids(self) -> list[int]:
        return [int(record.value) for record in read_committed(self.bootstrap, self.output, partitions=2)]

    def progress(self) -> dict[str, int]:
        """The committed progress (batch id + 1) of each of the query's progress groups."""
        return {g: committed_offsets(self.bootstrap, g, DEFAULT_CLAIMS_TOPIC, 1)[0] for g in self._groups()}

    def progress_records(self, claims_topic: str) -> list[dict]:
        """What each of the query's progress groups stored with its committed progress."""
        admin = AdminClient({"bootstrap.servers": self.bootstrap})
        request = [ConsumerGroupTopicPartitions(g, [TopicPartition(claims_topic, 0)]) for g in self._groups()]
        return [json.loads(admin.list_consumer_group_offsets([one], require_stable=True)[one.group_id].result(30)
                           .topic_partitions[0].metadata) for one in request]

    def _groups(self) -> list[str]:
        query_id = json.loads((Path(self.checkpoint) / "metadata").read_text())["id"]
        prefix = group_prefix(self.prefix, query_id)
        admin = AdminClient({"bootstrap.servers": self.bootstrap})  # alive until its answer is in
        listing = admin.list_consumer_groups().result(30)
        assert not listing.errors, listing.errors
        return [g.group_id for g in listing.valid if g.group_id.startswith(prefix)]

    def add_split_input(self, records: int) -> str:
        """A topic of two partitions holding the ids 0..records-1 as values, in place of files; the
        spec's source for it."""
        self.split_input = create_topic(self.bootstrap, unique_name("split-in"), partitions=2)
        write_transactions(self.bootstrap, self.split_input, [(True, [(n % 2, b"%d" % n) for n in range(records)])])
        self.expected = list(range(records))
        return f"split:{self.split_input}"

    def add_files(self, files: int) -> None:
        first = len(self.expected) // PER_FILE
        for number in range(first, first + files):
            ids = range(number * PER_FILE, (number + 1) * PER_FILE)
            (self.input / f"part-{number:03d}.json").write_text("".join(json.dumps({"id": i}) + "\n" for i in ids))
        self.expected = list(range((first + files) * PER_FILE))

    def batches(self, log: str) -> set[str]:
        return logged_batches(self.checkpoint, log)


def assert_each_once(ids: list[int], expected: list[int]) -> None:
    assert len(ids) == len(set(ids)), f"{len(ids) - len(set(ids))} duplicate(s)"
    assert sorted(ids) == expected


def assert_whole_rate_batches(ids: list[int]) -> None:
    """The rate source's values count from 0, RATE_ROWS_PER_BATCH a batch: whole batches, each once."""
    assert_each_once(ids, list(range(len(ids))))
    assert len(ids) >= RATE_ROWS_PER_BATCH and len(ids) % RATE_ROWS_PER_BATCH == 0, len(ids)


@pytest.mark.spark_local_cluster
@pytest.mark.parametrize("source", ["files", "rate", "split"])
def test_a_worker_killed_before_its_commit_loses_and_duplicates_nothing(spark_cluster, kafka, tmp_path, source):
    copy = FileCopy(kafka, tmp_path, files=0 if source == "split" else 6)
    if source == "split":
        copy.add_split_input(SPLIT_RECORDS)
    marker = faults.arm(faults.WORKER_BEFORE_COMMIT, sorted(executor_local_dirs(spark_cluster))[0])
    query = copy.writer(spark_cluster, files_per_batch=2, source=source,
                        **{"kafka.transaction.timeout.ms": 10000}).start()
    assert query.awaitTermination(300), "the query did not finish"
    assert not marker.exists(), "the armed crash did not happen"
    if source == "rate":
        assert_whole_rate_batches(copy.output_ids())
    else:
        assert_each_once(copy.output_ids(), copy.expected)
    last_batch = max(int(b) for b in copy.batches("commits"))
    if source == "split":
        # Each piece of a partition's range is a task of its own, which commits its own progress:
        # batch 0 in 6 tasks (30 offsets of each partition in pieces of 10), the last one (the
        # remaining 15 records and the transaction's marker) in 4.
        assert last_batch == 1 and sorted(copy.progress().values()) == [1, 1, 2, 2, 2, 2], copy.progress()
        return
    # Two write tasks a batch: one progress group per task, at the last batch. The progress records
    # grow with the number of tasks, never with the number of batches.
    assert sorted(copy.progress().values()) == [last_batch + 1] * 2
    if source == "files":
        assert last_batch == 2


def test_a_stream_named_by_its_checkpoint_claims_in_a_topic_of_its_own_and_its_progress_names_its_run(
        spark, kafka, tmp_path):
    copy = FileCopy(kafka, tmp_path, files=4)
    shared = unique_name("claims")  # the shared topic, this test's own: no other pipeline's records in it
    own = pipeline_topic(shared, f"checkpoint {copy.checkpoint}")
    runs, shared_records = [], []
    for _ in range(2):  # a restart: the second run's tasks find the first run's commits
        query = copy.writer(spark, files_per_batch=2, claimsTopic=shared).start()
        assert query.awaitTermination(300), "the query did not finish"
        runs.append(str(query.runId))
        shared_records.append([json.loads(r.value) for r in read_committed(copy.bootstrap, shared)])
        copy.add_files(2)
    copy.expected = copy.expected[:-2 * PER_FILE]  # the files added after the last run
    assert_each_once(copy.output_ids(), copy.expected)
    kinds = {json.loads(r.value)["kind"] for r in read_committed(copy.bootstrap, own, partitions=PIPELINE_PARTITIONS)}
    assert {"plan", "claim", "release"} <= kinds
    # Only each task's first batch claimed in the shared topic as well (nothing committed before it);
    # the restarted run's tasks found their last commit on the pipeline's own log.
    assert shared_records[0] and {r["kind"] for r in shared_records[0]} == {"claim", "release"}
    assert all(r["task"].startswith("batch 0,") for r in shared_records[0])
    assert shared_records[1] == shared_records[0]
    assert [(r["topic"], r["run"], r["batch"]) for r in copy.progress_records(shared)] == [(own, runs[1], 2)] * 2


def _run_with_zombie(spark, kafka, tmp_path, fencing: bool) -> FileCopy:
    # Two files a batch: two tasks, one on each executor, so the armed executor runs one of them.
    copy = FileCopy(kafka, tmp_path, files=4)
    zombie = Zombie(spark, faults.STALL_AFTER_STABLE_READ, tmp_path)
    try:
        if not fencing:
            zombie.switch_fencing_off()
        query = copy.writer(spark, files_per_batch=2, **{"kafka.transaction.timeout.ms": TRANSACTION_TIMEOUT_MS,
                                                         "stableOffsetsTimeoutMs": 60000}).start()
        assert query.awaitTermination(300), "the query did not finish"
        zombie.stalled()
        zombie.resume_and_wait_until_gone()
    finally:
        zombie.clean_up()
    return copy


@pytest.mark.spark_local_cluster
def test_a_stalled_attempt_that_resumes_after_its_retry_and_the_next_batch_committed_makes_nothing_visible(
        spark_fast_loss, kafka, tmp_path):
    copy = _run_with_zombie(spark_fast_loss, kafka, tmp_path, fencing=True)
    assert_each_once(copy.output_ids(), copy.expected)
    assert sorted(copy.progress().values()) == [2, 2]  # the zombie's batch 1 did not move a task's progress back


@pytest.mark.spark_local_cluster
def test_without_attempt_fencing_the_stalled_attempt_writes_its_batch_a_second_time(spark_fast_loss, kafka,
                                                                                     tmp_path):
    copy = _run_with_zombie(spark_fast_loss, kafka, tmp_path, fencing=False)
    ids = copy.output_ids()
    assert len(ids) > len(set(ids)), "the zombie's records should appear twice without attempt fencing"
