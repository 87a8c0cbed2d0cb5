"""Test ground: a real Kafka broker and real Spark sessions.

Set ``EOS_KAFKA_BOOTSTRAP_SERVERS`` to run the single-broker tests against an external Kafka
instead of the embedded one (it must allow transactions with replication factor 1, or have at
least three brokers). Tests that kill brokers always use their own embedded three-node cluster.
"""
from __future__ import annotations

import logging
import os
from dataclasses import dataclass

import pytest

from pyspark_eos.testing import fault_injection
from pyspark_eos.testing.embedded_kafka import EmbeddedKafkaCluster
from pyspark_eos.testing.local_spark import (LOCAL, LOCAL_CLUSTER, jars_not_in_spark, local_spark_session,
                                            wait_for_executors)
from pyspark_eos.testing.maven_jars import SPARK_KAFKA_CONNECTOR
from pyspark_eos.workers.handoff import IDLE_SECONDS_ENV

from .class_archives import use_suite_jvms

# Before any Spark process starts: the tests arm faults in the processes they start (jobs and
# clusters in subprocesses too inherit it).
fault_injection.enable()
use_suite_jvms()  # before any JVM starts: the jobs and clusters in subprocesses inherit it too
# The fork servers of the suite's Spark Python processes (pyspark-eos-python) end soon after it.
os.environ.setdefault(IDLE_SECONDS_ENV, "120")

EXTERNAL_BOOTSTRAP_ENV = "EOS_KAFKA_BOOTSTRAP_SERVERS"

# Tests that need a kind of Spark session run together, so each kind is started once (a process
# holds one SparkContext, and each switch costs a stop and a start): by the session fixture they
# use, then by the markers of what else they start (the three-node cluster is module-scoped).
# The elastic session last: the sessions a process starts after one with dynamic allocation found
# no executors registering (tests/test_elastic_executors.py).
_SESSION_ORDER = ("spark", "spark_cluster", "spark_fast_loss", "speculative_spark", "elastic_spark")
_RUN_LAST = ("spark_local_cluster", "cluster3", "spark_standalone")
# Under pytest-xdist (make test runs several processes with --dist loadgroup) a group runs in one
# process: the tests on executor JVMs share their sessions there, and one three-node cluster serves
# the broker-failure tests; the benchmarks' smoke runs its scenarios once, for all its tests, and
# the models' check (every configuration of docs/model/*.pml) runs once for all of test_model's.
_GROUP_ORDER = ("executors", "cluster3", "benchmarks", "model", None)
# Then the modules whose tests start Spark applications or environments of their own (a minute
# each), so that the short tests fill the processes' time at the end.
_SLOW_MODULES = ("test_docs", "test_distribution", "test_older_pyspark", "test_example_pipeline", "test_driver_kills",
                 "test_second_instance", "test_sink_faults", "test_spark_connect", "test_stateful_pipelines")
# Long campaigns run before a release (make release-tests), not in every make test: deselected
# unless a -m expression names them.
RELEASE_MARKER = "release"


def _session_rank(item) -> int:
    fixtures = getattr(item, "fixturenames", ())
    return max((i for i, name in enumerate(_SESSION_ORDER) if name in fixtures), default=0)


def _marker_rank(item) -> int:
    return next((i + 1 for i, name in enumerate(_RUN_LAST) if item.get_closest_marker(name)), 0)


def _slow_rank(item) -> int:
    return 0 if item.module.__name__.rsplit(".", 1)[-1] in _SLOW_MODULES else 1


def _xdist_group(item) -> str | None:
    if _session_rank(item) > 0 or item.get_closest_marker("spark_standalone"):
        return "executors"
    if item.get_closest_marker("cluster3"):
        return "cluster3"
    module = item.module.__name__.rsplit(".", 1)[-1]
    if module == "test_benchmarks":
        return "benchmarks"
    if module == "test_model":
        return "model"
    return None


@pytest.hookimpl(tryfirst=True)  # before pytest-xdist reads the groups
def pytest_collection_modifyitems(config, items):
    if RELEASE_MARKER not in (config.option.markexpr or ""):
        release = [item for item in items if item.get_closest_marker(RELEASE_MARKER)]
        if release:
            config.hook.pytest_deselected(items=release)
            items[:] = [item for item in items if not item.get_closest_marker(RELEASE_MARKER)]
    # The groups first: pytest-xdist hands work out in this order, and they are the longest.
    items.sort(key=lambda item: (_GROUP_ORDER.index(_xdist_group(item)), _session_rank(item), _slow_rank(item),
                                 _marker_rank(item)))
    for item in items:
        group = _xdist_group(item)
        if group is not None:
            item.add_marker(pytest.mark.xdist_group(group))


@dataclass(frozen=True)
class KafkaEndpoint:
    bootstrap_servers: str
    cluster: EmbeddedKafkaCluster | None


@pytest.fixture(scope="session")
def kafka(tmp_path_factory) -> KafkaEndpoint:
    external = os.environ.get(EXTERNAL_BOOTSTRAP_ENV)
    if external:
        logging.getLogger(__name__).info("using external Kafka at %s", external)
        yield KafkaEndpoint(external, None)
        return
    # With TLS, mutual-TLS and SASL_SSL listeners beside PLAINTEXT (test_secure_clusters).
    with EmbeddedKafkaCluster(nodes=1, directory=tmp_path_factory.mktemp("kafka"), secure=True) as cluster:
        yield KafkaEndpoint(cluster.bootstrap_servers, cluster)


@pytest.fixture(scope="module")
def kafka_cluster3(tmp_path_factory) -> EmbeddedKafkaCluster:
    with EmbeddedKafkaCluster(nodes=3, directory=tmp_path_factory.mktemp("kafka3")) as cluster:
        yield cluster


def _with_kafka_connector() -> dict[str, str]:
    """Spark's own Kafka connector (format "kafka", see conf/spark-kafka-connector-pom.xml) for
    independent checks. The driver's classpath is fixed when its JVM starts, which happens once
    per test process, so every session gets it."""
    jars = jars_not_in_spark(SPARK_KAFKA_CONNECTOR.jars())
    return {"spark.jars": ",".join(str(jar) for jar in jars)}


class SparkSessions:
    """Holds at most one SparkSession: a Python process can run only one SparkContext."""

    def __init__(self):
        self.key: tuple | None = None
        self.session = None

    def get(self, master: str, conf: dict[str, str] | None = None):
        """The session for ``master`` with ``conf`` (fixed at SparkContext start), replacing another."""
        key = (master, tuple(sorted((conf or {}).items())))
        if self.key != key:
            self.stop()
            self.session = local_spark_session(master, app_name=f"eos-kafka-tests {master}",
                                               conf={**_with_kafka_connector(), **(conf or {})})
            self.key = key
        return self.session

    def stop(self) -> None:
        if self.session is not None:
            self.session.stop()
        self.session, self.key = None, None


@pytest.fixture(scope="session")
def spark_sessions(kafka):
    # Depends on kafka so that Spark, whose Python workers hold Kafka clients, stops first.
    sessions = SparkSessions()
    yield sessions
    sessions.stop()


@pytest.fixture
def spark(spark_sessions):
    """Spark in local[2]: tasks in the driver JVM, Python workers on this interpreter."""
    return spark_sessions.get(LOCAL)


@pytest.fixture
def spark_cluster(spark_sessions):
    """Spark in local-cluster[2,1,1024]: two executor JVMs with one task slot each, both registered."""
    session = spark_sessions.get(LOCAL_CLUSTER)
    wait_for_executors(session, 2)
    return session
