"""Exactly-once while executors come and go, and transactional ids bounded by the write slots.

A streaming pipeline runs on a standalone cluster (two workers on two loopback addresses, executors
of one core) with dynamic allocation: its executors idle out between micro-batches and are removed
(decommissioned), and the next batch brings new ones, so the pipeline's batches run on a new
executor after another. While it runs, executors are decommissioned with a write task in them
(SIGPWR, as a cluster manager sends it): once with the task finishing before the executor goes,
once with the task stalled past ``spark.executor.decommission.forceKillTimeout``, so that the
executor exits in the middle of the task's transaction. Each time, every input record reaches the
output once (read_committed), and the transactional ids the broker knows for the pipeline are at
most twice the task slots its executors had at once: Spark never reuses an executor id within an
application, and ids named for executors would grow with each executor (twice the slots: PySpark
hands a task to any idle worker of its executor, and an idle worker keeps its id for its producer).

``EOS_KAFKA_EXECUTOR_CHURN`` sets how many executors are removed in the run (make
executor-churn runs 20; the suite, a few).
"""
from __future__ import annotations

import logging
import os
import signal
import sys
import threading
import time
from contextlib import contextmanager
from itertools import count

import pytest

from pyspark_eos.testing.fault_injection import SHARED_DIRECTORY_ENV, STALL_AFTER_STABLE_READ, arm, stall_report

from .kafka_tools import transactional_ids, unique_name, wait_until
from .spark_tools import Pipeline
from .standalone_spark import StandaloneCluster, executor_lives, peak_cores_at_once, task_attempts, ui_conf

log = logging.getLogger(__name__)

CHURN = int(os.environ.get("EOS_KAFKA_EXECUTOR_CHURN", "3"))
FORCE_KILL_AFTER_S = 6

ELASTIC = {
    "spark.dynamicAllocation.enabled": "true",
    # Without an external shuffle service, dynamic allocation needs shuffle tracking; a copy has
    # no shuffle, so no executor is kept for its shuffle files.
    "spark.dynamicAllocation.shuffleTracking.enabled": "true",
    "spark.dynamicAllocation.minExecutors": "0",
    "spark.dynamicAllocation.maxExecutors": "2",
    "spark.dynamicAllocation.executorIdleTimeout": "1s",
    "spark.dynamicAllocation.schedulerBacklogTimeout": "1s",
    "spark.dynamicAllocation.sustainedSchedulerBacklogTimeout": "1s",
    # Executors removed by dynamic allocation or signalled with SIGPWR are decommissioned: they take
    # no new task, finish their running ones, and are killed after this long if those run on.
    "spark.decommission.enabled": "true",
    "spark.executor.decommission.forceKillTimeout": f"{FORCE_KILL_AFTER_S}s",
    "spark.executor.cores": "1",
    "spark.executor.memory": "512m",
    "spark.cores.max": "2",
    "spark.pyspark.python": sys.executable,
    "spark.executorEnv.PYSPARK_PYTHON": sys.executable,
}


@pytest.fixture(scope="module")
def elastic_spark(spark_sessions, tmp_path_factory):
    faults = tmp_path_factory.mktemp("faults")
    with StandaloneCluster(tmp_path_factory.mktemp("standalone"), python_log_level="INFO") as cluster:
        try:
            # Faults are armed in one directory for every executor: their local directories come and go.
            session = spark_sessions.get(cluster.master_url, {**ELASTIC, **ui_conf(),
                                                              f"spark.executorEnv.{SHARED_DIRECTORY_ENV}": str(faults)})
            yield session, faults
        finally:
            spark_sessions.stop()


@contextmanager
def fed(pipeline: Pipeline, interval_s: float = 0.3):
    """Input written to the pipeline's topic all along the block (committed and aborted transactions)."""
    stop = threading.Event()

    def feed():
        for round_ in count(1):
            if stop.wait(interval_s):
                return
            pipeline.add_input(round_, 1)

    feeder = threading.Thread(target=feed, name="input feeder", daemon=True)
    feeder.start()
    try:
        yield
    finally:
        stop.set()
        feeder.join(60)


@pytest.mark.spark_standalone
def test_executors_added_removed_and_decommissioned_mid_stream_keep_exactly_once_and_few_transactional_ids(
        elastic_spark, kafka, tmp_path):
    spark, faults = elastic_spark
    began = time.monotonic()
    pipeline = Pipeline(kafka, tmp_path, rounds=1)
    prefix = unique_name("elastic")
    with pipeline.riding_through(spark, trigger="2 seconds", sink_options={"transactionalIdPrefix": prefix},
                                 maxOffsetsPerTrigger=None) as query:
        with fed(pipeline):
            for finishes in (True, False):
                _decommission_with_a_write_task_running(spark, query, faults, tmp_path, finishes)
            wait_until(lambda: _removed(spark) >= CHURN or not query.isActive, 60 * CHURN + 120,
                       f"{CHURN} executors to be removed")

    lives = executor_lives(spark)
    ids, peak = transactional_ids(pipeline.bootstrap, prefix), peak_cores_at_once(lives)
    log.info("%.0f s: %d executors, %d removed, at most %d task slots at once; %d transactional ids: %s",
             time.monotonic() - began, len(lives), _removed(spark), peak, len(ids), sorted(ids))
    assert len(ids) <= 2 * peak, f"{len(ids)} transactional ids for {peak} task slots at once: {sorted(ids)}"


def _decommission_with_a_write_task_running(spark, query, faults, reports, finishes: bool) -> None:
    """SIGPWR the executor of a write task stalled mid-transaction (records produced, offsets read, not committed),
    which either resumes before the executor's force-kill timeout or stays stalled past it."""
    reports = reports / unique_name("stall")  # each stall's reports apart: the marker's name is the same
    reports.mkdir()
    resume = reports / "resume"
    marker = arm(STALL_AFTER_STABLE_READ, faults, with_executor=True, report_dir=str(reports), resume_file=str(resume),
                 seconds=3 if finishes else 4 * FORCE_KILL_AFTER_S)
    report = wait_until(lambda: stall_report(marker, "stalled", reports) or not query.isActive, 120,
                        "a write task to stall")
    assert query.isActive, f"the query died: {query.exception()}"
    jvm = report["executor_jvm"]
    log.info("decommissioning executor %s (JVM %s) with task %s stalled, %s", report["executor"], jvm,
             report["task_attempt_id"], "to finish" if finishes else "past the force-kill timeout")
    os.kill(jvm, signal.SIGPWR)
    gone = wait_until(lambda: next((life for life in executor_lives(spark)
                                    if life.executor_id == report["executor"] and life.removed_ms), None),
                      60 + FORCE_KILL_AFTER_S, f"executor {report['executor']} to be removed")
    resume.touch()
    (stalled,) = [t for t in task_attempts(spark) if t.task_id == report["task_attempt_id"]]
    log.info("executor %s removed (%s); the stalled attempt: %s", gone.executor_id, gone.removal_reason, stalled)
    # Finished on the decommissioned executor, or ended with it in the middle of its transaction.
    assert (stalled.status == "SUCCESS") == finishes, stalled


def _removed(spark) -> int:
    return sum(1 for life in executor_lives(spark) if life.removed_ms is not None)
