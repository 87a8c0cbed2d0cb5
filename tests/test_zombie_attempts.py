"""Fencing layer 2 against zombie attempts of a write task (G1, G3).

An executor stops answering the driver (its JVM stopped, as under a long GC pause or a network
partition) while one of its write tasks is at a given point; its Python worker ignores the
executor's shutdown, as on a partitioned host, and still reaches Kafka. The driver declares the
executor lost and retries the task on the other executor; the query runs to its end. Then the
stalled attempt resumes and goes on: it must not make anything visible twice, nor move the
group's offsets back.
"""
from __future__ import annotations

import time
from pathlib import Path

import pytest

from pyspark_eos.protocol.process_stat import running
from pyspark_eos.testing import fault_injection as faults
from pyspark_eos.testing.local_spark import FAST_EXECUTOR_LOSS, LOCAL_CLUSTER, executor_local_dirs, wait_for_executors

from .kafka_tools import kafka_tool, unique_name, wait_until
from .spark_tools import Pipeline

# Long enough that the broker does not abort a stalled attempt's transaction before it resumes
# (the fencing must do it, and a query that ends sooner shows it did), except where a test is
# about that timeout.
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
        wait_until(lambda: not running(pid), 120, f"the resumed attempt (pid {pid}) to finish")

    def clean_up(self) -> None:
        self.resume_file.touch()  # never leave a stalled worker behind
        for path in [self.marker, *self.switches]:
            path.unlink(missing_ok=True)


def _run_with_zombie(spark, kafka, tmp_path, point: str, fencing: bool = True, before_resume=None,
                     transaction_timeout_ms: int = TRANSACTION_TIMEOUT_MS) -> Pipeline:
    """The pipeline's query, run to its end while an attempt of its first batch stalls at ``point``;
    then ``before_resume(pipeline, id_prefix, began)`` (the prefix of the pipeline's transactional ids,
    the zombie's among them, and time.monotonic() before the query started), and the zombie resumes
    and finishes."""
    pipeline = Pipeline(kafka, tmp_path, rounds=4)  # four batches: the zombie's and three after it
    zombie = Zombie(spark, point, tmp_path)
    prefix = unique_name("zombie")
    try:
        if not fencing:
            zombie.switch_fencing_off()
        began = time.monotonic()
        pipeline.run(spark, sink_options={"transactionalIdPrefix": prefix,
                                          "kafka.transaction.timeout.ms": transaction_timeout_ms},
                     stableOffsetsTimeoutMs=60000)
        zombie.stalled()
        if before_resume is not None:
            before_resume(pipeline, f"{prefix}.{pipeline.group}.", began)
        zombie.resume_and_wait_until_gone()
    finally:
        zombie.clean_up()
    return pipeline


def _transaction_states(bootstrap: str, id_prefix: str) -> dict[str, str]:
    """State per transactional id starting with ``id_prefix``, per Kafka's TransactionsCommand."""
    listing = kafka_tool("org.apache.kafka.tools.TransactionsCommand", "--bootstrap-server", bootstrap, "list")
    rows = [line.split() for line in listing.splitlines()[1:]]
    return {row[0]: row[-1] for row in rows if row and row[0].startswith(id_prefix)}


def _was_fenced_while_stalled(pipeline: Pipeline, id_prefix: str, began: float) -> None:
    states = _transaction_states(pipeline.bootstrap, id_prefix)
    assert states and "Ongoing" not in states.values(), states
    # The zombie's transaction began after the query started, so the broker's timeout cannot have
    # ended it yet: the retry's fencing did. Without fencing, a zombie with offsets pending
    # (before-commit) holds the retry's stable read, and so the query, until that timeout.
    elapsed = time.monotonic() - began
    assert elapsed < TRANSACTION_TIMEOUT_MS / 1000, (
        f"the query ran {elapsed:.0f} s: the broker's transaction timeout, not fencing, may have ended the "
        "zombie's transaction")


# The zombie claimed its input before it stalled: the retry's claim finds that claim unreleased and
# fences the zombie's transactional id (init_transactions), aborting its transaction while it stalls.
FENCED_WHILE_STALLED = (faults.STALL_AFTER_STABLE_READ, faults.STALL_BEFORE_COMMIT)
# The zombie holds no claim while it stalls (mid-produce) or has already committed (after-commit):
# nothing to fence, and the replay check decides. Before-produce is mid-produce without the
# zombie's transaction open at the broker, kept by the same two checks: not run.
LEFT_TO_THE_REPLAY_CHECK = (faults.STALL_MID_PRODUCE, faults.STALL_AFTER_COMMIT)


@pytest.mark.spark_local_cluster
@pytest.mark.parametrize("point", FENCED_WHILE_STALLED)
def test_attempt_fencing_ends_a_zombies_transaction_while_it_stalls_and_it_makes_nothing_visible(
        spark_fast_loss, kafka, tmp_path, point):
    """Attempt fencing makes this pass. The replay check cannot: the zombie has passed it
    (after-stable-read), or has sent its offsets, which the retry's stable read then waits for
    (before-commit). Without fencing the check made before the zombie resumes fails: at
    after-stable-read its transaction is still open (the control below shows the duplicates that
    follow); at before-commit the broker's timeout ends it, and the query waits that long."""
    pipeline = _run_with_zombie(spark_fast_loss, kafka, tmp_path, point, before_resume=_was_fenced_while_stalled)
    pipeline.assert_exactly_once()


@pytest.mark.spark_local_cluster
def test_without_attempt_fencing_the_stalled_attempt_commits_its_batch_a_second_time(spark_fast_loss, kafka,
                                                                                      tmp_path):
    pipeline = _run_with_zombie(spark_fast_loss, kafka, tmp_path, faults.STALL_AFTER_STABLE_READ, fencing=False)
    values = pipeline.output_values()
    assert len(values) > len(set(values)), "the zombie's records should appear twice without attempt fencing"


@pytest.mark.spark_local_cluster
@pytest.mark.parametrize("point", LEFT_TO_THE_REPLAY_CHECK)
def test_the_replay_check_keeps_a_zombie_that_stalled_unclaimed_or_committed_from_writing_twice(
        spark_fast_loss, kafka, tmp_path, point):
    """The replay check (a write task's stable read of the group's offsets: a range already
    committed is skipped, one that does not start there refused) makes this pass, with attempt
    fencing switched off too. The retry of an after-commit zombie finds the batch committed and
    writes nothing: nothing else stops it. A mid-produce zombie, resumed, would find the group's
    offsets past its range's start and refuse; with fencing on it refuses earlier, as stale (it
    claims after the retry did), so either check alone keeps that case. A regression of the replay
    check fails after-commit here and the replayed-batch tests (test_sink_end_to_end,
    test_sink_faults); a regression of the stale refusal fails test_attempt_fencing's older attempt
    that claims after a newer one."""
    pipeline = _run_with_zombie(spark_fast_loss, kafka, tmp_path, point)
    pipeline.assert_exactly_once()


def _wait_for_broker_timeout(pipeline: Pipeline, id_prefix: str, _began: float) -> None:
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
