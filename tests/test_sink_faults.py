"""Exactly-once under crashes: a worker or an executor killed with SIGKILL (the driver: in
test_driver_kills.py).

No switch turns off what these rest on. A worker or executor killed with its offsets sent and the
commit not asked for is covered by Kafka's transaction itself (the dead attempt's records and
offsets are never committed; the retry's init_transactions on the same id, or the broker's timeout,
aborts them) and by the retry's stable read, which waits for that abort (G5: broken, it reads the
offsets before the batch, and test_group_offsets.py's query test fails). A driver killed between
the Kafka commit and Spark's commit log is covered by the replay check (a replayed task finds its
range committed and writes nothing): broken, the replayed batches of test_driver_kills.py are
written twice, and the after-commit zombie in test_zombie_attempts.py fails too.
"""
from __future__ import annotations

import pytest

from pyspark_eos.testing.fault_injection import EXECUTOR_BEFORE_COMMIT, WORKER_BEFORE_COMMIT, arm

from pyspark_eos.testing.local_spark import executor_local_dirs

from .spark_tools import Pipeline

# The broker aborts a dead writer's transaction after this long; the retry waits for it (G5).
FAST_TIMEOUT = {"kafka.transaction.timeout.ms": 10000}


@pytest.mark.compat
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
