"""Fencing layer 2 against zombie attempts of a write task (G1, G3).

An executor stops answering the driver (its JVM stopped, as under a long GC pause or a network
partition) while one of its write tasks is at a given point; its Python worker ignores the
executor's shutdown, as on a partitioned host, and still reaches Kafka. The driver declares the
executor lost and retries the task on the other executor; the query runs to its end. Then the
stalled attempt resumes and goes on: it must not make anything visible twice, nor move the
group's offsets back.
"""
from __future__ import annotations

from pathlib import Path

import pytest

from pyspark_eos.testing import fault_injection as faults
from pyspark_eos.testing.local_spark import LOCAL_CLUSTER, executor_local_dirs, wait_for_executors

from .kafka_tools import kafka_tool, unique_name, wait_until
from .spark_tools import Pipeline

# The driver declares a silent executor lost after 8 s (Spark's default is 120 s).
FAST_EXECUTOR_LOSS = {
    "spark.executor.heartbeatInterval": "1s",
    "spark.storage.blockManagerHeartbeatTimeoutMs": "8000",
    "spark.network.timeoutInterval": "1s",
}
# Long enough that the broker does not abort a stalled attempt's transaction before it resumes
# (the fencing must do it), except where a test is about that timeout.
TRANSACTION_TIMEOUT_MS = 120000
SHORT_TRANSACTION_TIMEOUT_MS = 10000


@pytest.fixture
def spark_fast_loss(spark_sessions):
    session = spark_sessions.get(LOCAL_CLUSTER, FAST_EXECUTOR_LOSS)
    wait_for_executors(session, 2)
    return session


class Zombie:
    """A write-task attempt armed to stall at ``point`` on one executor, and to resume on demand."""

    def __init__(self, spark, point: str, tmp_path: Path):
        self.local_dirs = sorted(executor_local_dirs(spark))
        assert len(self.local_dirs) == 2, self.local_dirs
        self.resume_file = tmp_path / "resume"
        # Reports outside the executor's local directory, which its worker deletes once it is lost.
        self.reports = tmp_path
        self.marker = faults.arm(point, self.local_dirs[0], stop_executor=True, resume_file=str(self.resume_file),
                                 report_dir=str(self.reports))
        self.switches: list[Path] = []

    def switch_fencing_off(self) -> None:
        self.switches = [faults.arm(faults.ATTEMPT_FENCING_OFF, d) for d in self.local_dirs]

    def stalled(self) -> dict:
        report = faults.stall_report(self.marker, "stalled", self.reports)
        assert report is not None, "the armed stall did not happen"
        return report

    def resume_and_wait_until_gone(self) -> None:
        pid = self.stalled()["pid"]
        self.resume_file.touch()
        wait_until(lambda: faults.stall_report(self.marker, "resumed", self.reports), 60,
                   "the stalled attempt to resume")
        wait_until(lambda: not _alive(pid), 120, f"the resumed attempt (pid {pid}) to finish")

    def clean_up(self) -> None:
        self.resume_file.touch()  # never leave a stalled worker behind
        for path in [self.marker, *self.switches]:
            path.unlink(missing_ok=True)


def _alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except FileNotFoundError:
        return False
    return state != "Z"


def _run_with_zombie(spark, kafka, tmp_path, point: str, fencing: bool = True, before_resume=None,
                     transaction_timeout_ms: int = TRANSACTION_TIMEOUT_MS) -> Pipeline:
    pipeline = Pipeline(kafka, tmp_path, rounds=4)  # two batches: the zombie's and the next one
    zombie = Zombie(spark, point, tmp_path)
    prefix = unique_name("zombie")
    try:
        if not fencing:
            zombie.switch_fencing_off()
        pipeline.run(spark, sink_options={"transactionalIdPrefix": prefix,
                                          "kafka.transaction.timeout.ms": transaction_timeout_ms},
                     stableOffsetsTimeoutMs=60000)
        stalled = zombie.stalled()
        if before_resume is not None:
            before_resume(pipeline, f"{prefix}.{pipeline.group}.{stalled['executor']}.")
        zombie.resume_and_wait_until_gone()
    finally:
        zombie.clean_up()
    return pipeline


def _transaction_states(bootstrap: str, id_prefix: str) -> dict[str, str]:
    """State per transactional id starting with ``id_prefix``, per Kafka's TransactionsCommand."""
    listing = kafka_tool("org.apache.kafka.tools.TransactionsCommand", "--bootstrap-server", bootstrap, "list")
    rows = [line.split() for line in listing.splitlines()[1:]]
    return {row[0]: row[-1] for row in rows if row and row[0].startswith(id_prefix)}


def _was_fenced_while_stalled(pipeline: Pipeline, id_prefix: str) -> None:
    # The zombie claimed its input before it stalled: the retry fenced its transactional id, so its
    # transaction is over although its timeout (two minutes) has not passed.
    states = _transaction_states(pipeline.bootstrap, id_prefix)
    assert states and "Ongoing" not in states.values(), states


@pytest.mark.spark_local_cluster
@pytest.mark.parametrize("point", faults.STALL_POINTS)
def test_a_stalled_attempt_that_resumes_after_its_retry_committed_makes_nothing_visible(
        spark_fast_loss, kafka, tmp_path, point):
    claimed = point in (faults.STALL_AFTER_STABLE_READ, faults.STALL_BEFORE_COMMIT)
    pipeline = _run_with_zombie(spark_fast_loss, kafka, tmp_path, point,
                                before_resume=_was_fenced_while_stalled if claimed else None)
    # The zombie resumed after its batch and the next one had committed: the output holds each
    # input record once and the group's offsets did not move back.
    pipeline.assert_exactly_once()


@pytest.mark.spark_local_cluster
def test_without_attempt_fencing_the_stalled_attempt_commits_its_batch_a_second_time(spark_fast_loss, kafka,
                                                                                      tmp_path):
    pipeline = _run_with_zombie(spark_fast_loss, kafka, tmp_path, faults.STALL_AFTER_STABLE_READ, fencing=False)
    values = pipeline.output_values()
    assert len(values) > len(set(values)), "the zombie's records should appear twice without attempt fencing"


def _wait_for_broker_timeout(pipeline: Pipeline, id_prefix: str) -> None:
    """Until the broker has aborted the stalled attempt's transaction (transaction.timeout.ms)."""
    def timed_out():
        states = _transaction_states(pipeline.bootstrap, id_prefix)
        return states and "Ongoing" not in states.values()

    wait_until(timed_out, 120, f"the broker to time out the transactions of {id_prefix}*", interval=1.0)


@pytest.mark.spark_local_cluster
def test_a_stalled_attempt_whose_transaction_the_broker_timed_out_makes_nothing_visible(spark_fast_loss, kafka,
                                                                                         tmp_path):
    # Stalled before it claimed its input, the retry could not fence it: the broker's timeout did.
    pipeline = _run_with_zombie(spark_fast_loss, kafka, tmp_path, faults.STALL_MID_PRODUCE,
                                before_resume=_wait_for_broker_timeout,
                                transaction_timeout_ms=SHORT_TRANSACTION_TIMEOUT_MS)
    pipeline.assert_exactly_once()
