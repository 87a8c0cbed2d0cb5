"""G3: a second instance of a running pipeline fences the first; the output stays exactly-once."""
from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
from pathlib import Path

from pyspark_eos.testing.embedded_kafka import start_dying_with_parent
from pyspark_eos.testing.local_spark import LOCAL

from .instance_job import FAILED, instance
from .kafka_tools import committed_offsets, last_stable_offsets, read_committed, wait_until
from .spark_tools import PARTITIONS, Pipeline

PROJECT_ROOT = Path(__file__).resolve().parents[1]
ROUNDS = 12
FENCING_MESSAGES = ("another instance of the same pipeline",)
# The first instance of the separate-application test reads one offset per partition a batch, so
# it is still working through its input when the second, which reads all there is, takes over.
FIRST_BATCH_OFFSETS = PARTITIONS


def names_the_fencing(error: str) -> bool:
    return any(message in error for message in FENCING_MESSAGES)


def prepare(pipeline: Pipeline, spark, checkpoint: str, **options):
    return instance(spark, pipeline.bootstrap, pipeline.input, pipeline.output, pipeline.group, checkpoint, **options)


def start(pipeline: Pipeline, spark, checkpoint: str, **options):
    return prepare(pipeline, spark, checkpoint, **options).start()


def wait_for_the_whole_input(pipeline: Pipeline, query) -> None:
    end = last_stable_offsets(pipeline.bootstrap, pipeline.input, PARTITIONS)
    # Each look is a new admin client: not more often than Spark's triggers, whose CPU it takes.
    wait_until(lambda: not query.isActive or
               committed_offsets(pipeline.bootstrap, pipeline.group, pipeline.input, PARTITIONS) == end,
               120, "the second instance to commit the whole input", interval=0.5)
    assert query.isActive and query.exception() is None


def test_the_first_instance_is_fenced_and_the_second_finishes_exactly_once(spark, kafka, tmp_path):
    pipeline = Pipeline(kafka, tmp_path, rounds=ROUNDS)
    first = start(pipeline, spark, str(tmp_path / "first"), startingOffsets="earliest")
    second = None
    try:
        wait_until(lambda: (first.lastProgress or {}).get("batchId", -1) >= 1, 120, "the first instance's 2nd batch")
        second = start(pipeline, spark, str(tmp_path / "second"), startingOffsets="group")
        wait_until(lambda: not first.isActive, 120, "the first instance to be fenced")
        error = str(first.exception())
        assert names_the_fencing(error), error
        wait_for_the_whole_input(pipeline, second)
    finally:
        for query in (first, second):
            if query is not None and query.isActive:
                query.stop()
    pipeline.assert_exactly_once()


@contextlib.contextmanager
def instance_in_its_own_application(pipeline: Pipeline, checkpoint: Path, log: Path, tag: str,
                                    max_offsets_per_trigger: int):
    """tests/instance_job.py in a driver process of its own, in a session of its own so that its
    JVM and Python workers go with it whatever the test's outcome."""
    command = [sys.executable, "-m", "tests.instance_job", pipeline.bootstrap, pipeline.input, pipeline.output,
               pipeline.group, str(checkpoint), tag, str(max_offsets_per_trigger)]
    with open(log, "wb") as output:
        process = start_dying_with_parent(command, cwd=PROJECT_ROOT, stdout=output, stderr=subprocess.STDOUT,
                                          stdin=subprocess.DEVNULL, start_new_session=True)
    try:
        yield process
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(process.pid, signal.SIGKILL)
        process.wait(60)


def has_committed_a_batch(checkpoint: Path) -> bool:
    """Spark's commit log has a batch once all its tasks committed their Kafka transactions: a file
    to look for, where the group's offsets would take an admin client per look."""
    return (checkpoint / "commits" / "0").exists()


def query_failure(log: Path) -> str:
    """What instance_job printed of its query's error, with whatever the driver logged after it."""
    output = log.read_text(errors="replace")
    return output[output.index("query failed:"):] if "query failed:" in output else ""


def writers_in_input_order(pipeline: Pipeline) -> dict[int, list[bytes]]:
    """Per input partition, in offset order: the key (the writing instance's tag) of each committed
    input record's output."""
    writer = {record.value: record.key for record in read_committed(pipeline.bootstrap, pipeline.output, partitions=2)}
    order: dict[int, list[bytes]] = {}
    for record in read_committed(pipeline.bootstrap, pipeline.input, partitions=PARTITIONS):
        order.setdefault(record.partition, []).append(writer[record.value])
    return order


def assert_handed_over(pipeline: Pipeline) -> None:
    """The first instance's visible output is a prefix of each input partition and the second's
    the rest: with exactly-once, whatever the first wrote past the offsets the second took over
    from (its transactions after the fencing) is nowhere."""
    order = writers_in_input_order(pipeline)
    for partition, writers in order.items():
        handed_over = writers.count(b"first")
        assert writers == [b"first"] * handed_over + [b"second"] * (len(writers) - handed_over), \
            f"input partition {partition}: {writers}"
    everything = [writer for writers in order.values() for writer in writers]
    assert b"first" in everything and b"second" in everything


def test_a_second_application_fences_the_first_whose_query_fails_and_leaks_nothing(spark_sessions, kafka, tmp_path):
    """The same pipeline submitted twice: the first instance runs in a Spark application of its own
    (tests/instance_job.py); the second, in this test's session, starts from the group's offsets
    once the first has committed a batch.

    What makes it pass is static group membership (fencing layer 1): the second instance's driver
    joins the group with the same group instance id, which fences the first's member, and the
    broker then refuses the old member's TxnOffsetCommit (FENCED_INSTANCE_ID), so the first's
    transactions after the takeover abort and its query fails. There is no control run: nothing
    switches the membership fencing off. A regression also shows in the same-application test
    above, and as duplicates in the chaos campaign's second-instance fault (make chaos, before a
    release; the campaign kills a first instance that does not stop rather than failing on it).
    """
    pipeline = Pipeline(kafka, tmp_path, rounds=ROUNDS)
    log = tmp_path / "first.log"
    with instance_in_its_own_application(pipeline, tmp_path / "first", log, "first", FIRST_BATCH_OFFSETS) as first:
        spark = spark_sessions.get(LOCAL)  # starts while the first application starts too
        # Built now so that the takeover, at start(), comes while the first is busy.
        second_query = prepare(pipeline, spark, str(tmp_path / "second"), tag="second", max_offsets_per_trigger=None,
                               startingOffsets="group")
        wait_until(lambda: first.poll() is not None or has_committed_a_batch(tmp_path / "first"), 120,
                   "the first instance to commit a batch")
        assert first.poll() is None, log.read_text(errors="replace")[-4000:]
        moved = committed_offsets(pipeline.bootstrap, pipeline.group, pipeline.input, PARTITIONS, require_stable=False)
        assert all(offset > 0 for offset in moved.values()), moved
        second = second_query.start()
        try:
            wait_until(lambda: first.poll() is not None, 120, "the first instance to be fenced and exit")
            assert first.returncode == FAILED, log.read_text(errors="replace")[-4000:]
            assert names_the_fencing(query_failure(log)), log.read_text(errors="replace")[-4000:]
            # Input that arrives once the first is gone is the second's alone.
            pipeline.add_input(ROUNDS, 3)
            wait_for_the_whole_input(pipeline, second)
        finally:
            second.stop()
    pipeline.assert_exactly_once()
    assert_handed_over(pipeline)
