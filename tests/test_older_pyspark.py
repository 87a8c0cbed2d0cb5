"""Older PySpark on the oldest supported Kafka broker: 4.0 and 4.1 have no admission control for
Python sources, 4.0 no Arrow writer.

Spark 4.0/4.1 call ``latestOffset()`` with no arguments and never ask for a read limit; the
stream must then continue from its last end and apply maxOffsetsPerTrigger itself. On 4.0 the
sink receives Rows instead of Arrow batches. Each version runs a real eos-kafka -> eos-kafka job
in a virtual environment of its own (kept in .cache/ between runs). 4.0 lacks both admission
control and the Arrow writer, so it runs in every ``make test``; 4.1 (the Arrow writer without
admission control) runs before a release (``make release-tests``). The broker is the oldest
release docs/compatibility.md supports (``maven_jars.OLDEST_KAFKA``), so that every ``make test``
runs one exactly-once pipeline on it; ``make compat`` runs a larger subset on each release.
"""
from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest

from pyspark_eos.testing.embedded_kafka import EmbeddedKafkaCluster
from pyspark_eos.testing.maven_jars import OLDEST_KAFKA

from .kafka_tools import committed_offsets, create_topic, last_stable_offsets, read_committed, unique_name, write_transactions
from .virtualenvs import CHECKOUT, RELEASE_OLDER_PYSPARK, SUITE_OLDER_PYSPARK, older_pyspark_python

pytestmark = pytest.mark.older_pyspark


@pytest.fixture(scope="module")
def oldest_kafka(tmp_path_factory) -> EmbeddedKafkaCluster:
    with EmbeddedKafkaCluster(directory=tmp_path_factory.mktemp("oldest-kafka"), kafka_version=OLDEST_KAFKA) as cluster:
        yield cluster


@pytest.mark.parametrize("version, writer", [
    pytest.param(RELEASE_OLDER_PYSPARK, "DataSourceStreamArrowWriter", marks=pytest.mark.release),
    (SUITE_OLDER_PYSPARK, "DataSourceStreamWriter"),
])
def test_rate_limited_exactly_once_pipeline_on_older_pyspark_and_the_oldest_broker(oldest_kafka, tmp_path, version,
                                                                                    writer):
    bootstrap = oldest_kafka.bootstrap_servers
    source, sink, group = create_topic(bootstrap, unique_name("older")), create_topic(bootstrap, unique_name("out")), unique_name("g")
    # 0-4 committed, 5 marker, 6-7 aborted, 8 marker, 9-10 committed, 11 marker
    write_transactions(bootstrap, source, [(True, [(0, b"a%d" % i) for i in range(5)]),
                                           (False, [(0, b"x"), (0, b"y")]),
                                           (True, [(0, b"b0"), (0, b"b1")])])
    # One driver runs the query twice: its log goes to a file, so that a full pipe never stalls it.
    log = tmp_path / "job.log"
    with open(log, "w") as log_file:
        job = subprocess.Popen([str(older_pyspark_python(version)), str(CHECKOUT / "tests" / "older_pyspark_job.py"),
                                bootstrap, source, sink, group, str(tmp_path / "checkpoint")],
                               stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=log_file, text=True, cwd=tmp_path)
    try:
        outcome = _next_outcome(job, log)
        assert (outcome["pyspark"], outcome["sink_writer"]) == (version, writer)
        assert _broker_version(oldest_kafka) == OLDEST_KAFKA
        assert outcome["rows_per_batch"] == [3, 2, 2]  # [0,3) [3,6) [6,9): only aborted records, [9,12)
        # Restarted after a committed batch (Spark tells the new source process nothing of where it
        # ended), the query continues from the group's offsets, 3 offsets a batch.
        write_transactions(bootstrap, source, [(True, [(0, b"c%d" % i) for i in range(4)])])
        job.stdin.write("again\n")
        job.stdin.flush()
        assert _next_outcome(job, log)["rows_per_batch"] == [3, 1]
        job.communicate(timeout=120)
        assert job.returncode == 0, log.read_text()[-5000:]
    finally:
        if job.poll() is None:
            job.kill()
            job.wait()
    assert sorted(r.value for r in read_committed(bootstrap, sink)) == sorted(r.value for r in read_committed(bootstrap, source))
    assert committed_offsets(bootstrap, group, source, 1) == last_stable_offsets(bootstrap, source, 1)


def _next_outcome(job: subprocess.Popen, log: Path) -> dict:
    """The job's next JSON line: what its query's run read."""
    for line in job.stdout:
        if line.startswith("{"):
            return json.loads(line)
    job.wait(timeout=60)
    raise AssertionError(f"the job ended (exit {job.returncode}) before its run's outcome:\n{log.read_text()[-5000:]}")


def _broker_version(cluster: EmbeddedKafkaCluster) -> str:
    """The release the broker's own log says it runs (its AppInfoParser line)."""
    log_text = cluster.nodes[0].log_path.read_text(errors="replace")
    return log_text.split("Kafka version: ", 1)[1].split()[0]
