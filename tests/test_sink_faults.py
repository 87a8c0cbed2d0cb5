"""Exactly-once under crashes: a worker, an executor or the driver killed with SIGKILL.

No switch turns off what these rest on. A worker or executor killed with its offsets sent and the
commit not asked for is covered by Kafka's transaction itself (the dead attempt's records and
offsets are never committed; the retry's init_transactions on the same id, or the broker's timeout,
aborts them) and by the retry's stable read, which waits for that abort (G5: broken, it reads the
offsets before the batch, and test_group_offsets.py's query test fails). A driver killed between
the Kafka commit and Spark's commit log is covered by the replay check (a replayed task finds its
range committed and writes nothing): broken, the replayed batch is written twice here, and the
after-commit zombie in test_zombie_attempts.py and the any-source driver kill in
test_any_source.py fail too.
"""
from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from pyspark_eos.testing.fault_injection import EXECUTOR_BEFORE_COMMIT, WORKER_BEFORE_COMMIT, arm

from pyspark_eos.testing.local_spark import executor_local_dirs

from .spark_tools import Pipeline

DRIVER_JOB = Path(__file__).resolve().parent / "driver_job.py"

# The broker aborts a dead writer's transaction after this long; the retry waits for it (G5).
FAST_TIMEOUT = {"kafka.transaction.timeout.ms": 10000}


@pytest.mark.spark_local_cluster
@pytest.mark.parametrize("point", [WORKER_BEFORE_COMMIT, EXECUTOR_BEFORE_COMMIT])
def test_a_crash_after_sending_offsets_and_before_commit_loses_and_duplicates_nothing(spark_cluster, kafka,
                                                                                       tmp_path, point):
    pipeline = Pipeline(kafka, tmp_path)
    local_dirs = sorted(executor_local_dirs(spark_cluster))
    assert len(local_dirs) == 2
    marker = arm(point, local_dirs[0])
    pipeline.run(spark_cluster, sink_options=FAST_TIMEOUT, stableOffsetsTimeoutMs=60000)
    assert not marker.exists(), "the armed crash did not happen"
    pipeline.assert_exactly_once()


def run_driver(pipeline: Pipeline, *extra: str) -> subprocess.CompletedProcess:
    command = [sys.executable, str(DRIVER_JOB), pipeline.bootstrap, pipeline.input, pipeline.output,
               pipeline.group, pipeline.checkpoint, *extra]
    return subprocess.run(command, capture_output=True, text=True, timeout=600)


def test_a_driver_killed_between_the_kafka_commit_and_sparks_commit_log_replays_without_duplicates(kafka, tmp_path):
    pipeline = Pipeline(kafka, tmp_path)
    crashed = run_driver(pipeline, "arm")
    assert crashed.returncode != 0 and "finished" not in crashed.stdout
    # The batch is in Kafka (output and offsets) but not in Spark's commit log.
    offsets_log = {p.name for p in (Path(pipeline.checkpoint) / "offsets").iterdir() if p.name.isdigit()}
    commit_log = {p.name for p in (Path(pipeline.checkpoint) / "commits").iterdir() if p.name.isdigit()}
    assert offsets_log - commit_log == {"0"}
    first_batch = pipeline.output_values()
    assert first_batch, "the crashed batch should have committed its Kafka transactions"

    restarted = run_driver(pipeline)
    assert restarted.returncode == 0, restarted.stderr[-4000:]
    pipeline.assert_exactly_once()


@pytest.mark.spark_local_cluster
def test_a_fenced_producer_is_rebuilt_and_its_task_retried(spark_cluster, kafka, tmp_path):
    from confluent_kafka import Producer

    from .kafka_tools import transactional_ids, unique_name

    pipeline = Pipeline(kafka, tmp_path, rounds=4)
    options = {"transactionalIdPrefix": unique_name("fenced"), **FAST_TIMEOUT}
    pipeline.run(spark_cluster, sink_options=options)
    ids = transactional_ids(pipeline.bootstrap, options["transactionalIdPrefix"])
    assert ids
    for transactional_id in ids:  # bumps each id's epoch: every worker's cached producer is now a zombie
        Producer({"bootstrap.servers": pipeline.bootstrap, "transactional.id": transactional_id}).init_transactions(30)
    pipeline.add_input(4, 3)
    pipeline.run(spark_cluster, sink_options=options)
    pipeline.assert_exactly_once()
