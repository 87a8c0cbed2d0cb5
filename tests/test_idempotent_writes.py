"""Idempotent batch writes (sink/idempotent_writes): a ``df.write`` keyed by txnAppId and txnVersion
commits each task's progress with its records, so a rerun of a failed job (a scheduler's retry, a
backfill run twice) writes only what did not commit. Without a key a rerun writes everything again:
that is the control."""
from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor

import pytest

from pyspark_eos.testing import fault_injection as faults
from pyspark_eos.testing.local_spark import executor_local_dirs

from .kafka_tools import create_topic, read_committed, unique_name, wait_until

ROWS, TASKS = 400, 4


class Job:
    """A batch job writing ids 0..ROWS-1 in TASKS tasks, or failing: its last task waits until the
    others committed, then its worker is killed before its commit, which fails the job in local
    mode (no task retries there)."""

    def __init__(self, spark, kafka, **key):
        self.spark, self.bootstrap, self.key = spark, kafka.bootstrap_servers, key
        self.topic = create_topic(self.bootstrap, unique_name("idempotent-out"), partitions=2)
        self.prefix = unique_name("idempotent")

    def run(self, **key) -> None:
        writer = (self.spark.range(ROWS, numPartitions=TASKS).selectExpr("CAST(id AS STRING) AS value").write
                  .format("eos-kafka").mode("append").option("kafka.bootstrap.servers", self.bootstrap)
                  .option("topic", self.topic).option("transactionalIdPrefix", self.prefix))
        for name, value in {**self.key, **key}.items():
            writer = writer.option(name, str(value))
        writer.save()

    def run_failing(self, tmp_path) -> list[int]:
        resume = tmp_path / "resume"
        for directory in executor_local_dirs(self.spark):
            faults.arm(faults.STALL_BEFORE_PRODUCE, directory, partition=TASKS - 1, resume_file=str(resume))
            faults.arm(faults.WORKER_BEFORE_COMMIT, directory, partition=TASKS - 1)
        per_task = ROWS // TASKS

        def resume_once_the_others_committed():
            # Spark finds the format only from the thread that owns the session: the job runs here.
            wait_until(lambda: len(self.ids()) == (TASKS - 1) * per_task, 120, "the other tasks' commits")
            resume.touch()
        with ThreadPoolExecutor(1) as pool:
            waiting = pool.submit(resume_once_the_others_committed)
            with pytest.raises(Exception, match="Python worker exited unexpectedly|crashed"):
                self.run()
            waiting.result()
        ids = self.ids()
        assert sorted(ids) == list(range((TASKS - 1) * per_task)), "all tasks but the last should have committed"
        return ids

    def ids(self) -> list[int]:
        return [int(record.value) for record in read_committed(self.bootstrap, self.topic, partitions=2)]


def assert_each_once(ids: list[int]) -> None:
    assert len(ids) == len(set(ids)), f"{len(ids) - len(set(ids))} record(s) written twice"
    assert sorted(ids) == list(range(ROWS))


def test_a_failed_job_rerun_under_its_txn_version_writes_only_what_did_not_commit(spark, kafka, tmp_path):
    job = Job(spark, kafka, txnAppId="nightly", txnVersion=7)
    job.run_failing(tmp_path)
    job.run()
    assert_each_once(job.ids())
    job.run()  # the scheduler runs it once more: nothing new
    assert_each_once(job.ids())


def test_without_a_txn_version_a_rerun_of_the_failed_job_writes_its_committed_tasks_twice(spark, kafka, tmp_path):
    job = Job(spark, kafka)
    committed = job.run_failing(tmp_path)
    job.run()
    ids = job.ids()
    assert len(ids) == ROWS + len(committed) and set(ids) == set(range(ROWS))


def test_a_new_txn_version_writes_again_and_an_older_one_is_skipped(spark, kafka):
    job = Job(spark, kafka, txnAppId="backfill")
    job.run(txnVersion=1)
    job.run(txnVersion=2)
    job.run(txnVersion=1)
    ids = job.ids()
    assert len(ids) == 2 * ROWS and set(ids) == set(range(ROWS))


def test_a_streaming_write_refuses_a_txn_version(spark, kafka, tmp_path):
    from pyspark.errors import StreamingQueryException

    topic = create_topic(kafka.bootstrap_servers, unique_name("idempotent-stream"))
    query = (spark.readStream.format("rate-micro-batch").option("rowsPerBatch", 5).load()
             .selectExpr("CAST(value AS STRING) AS value").writeStream.format("eos-kafka")
             .option("kafka.bootstrap.servers", kafka.bootstrap_servers).option("topic", topic)
             .option("txnVersion", 3).option("checkpointLocation", str(tmp_path / "checkpoint"))
             .trigger(availableNow=True).start())
    with pytest.raises(StreamingQueryException, match="txnAppId and txnVersion are for batch writes"):
        query.awaitTermination(120)
    assert read_committed(kafka.bootstrap_servers, topic) == []
