"""Shipping eos-kafka to a Spark job with a real ``spark-submit`` (the script of a pip-installed
PySpark) against the embedded broker, beyond what docs/deployment.md runs: its page test
(test_docs.py) already runs each way the page shows (the pip-installed wheel, ``--py-files``,
``--packages``) in ``local[2]`` on a Python without the package. Here, what the artifacts hold
(the runtime and its test kit with the conf/ files it reads, none of the project's tooling) and
the version each states, the kit's embedded broker run from the unzipped wheel alone,
``--packages`` on two executors, with the driver and each executor's Python workers reporting
where they imported the package from, and the error a Python without confluent-kafka gets. Before
a release (``make release``, ``make release-tests``): the wheel installed with pip into a fresh
virtual environment, running a pipeline.
"""
from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

import pyspark_eos
from devtools.distribution import KIT_CONF, MAVEN_COORDINATES, built, content_problems, declared_versions, expected_files
from pyspark_eos.testing.local_spark import LOCAL, LOCAL_CLUSTER, spark_java_options
from pyspark_eos.testing.maven_jars import KAFKA_BROKER
from pyspark_eos.testing.project_files import CACHE_DIR_ENV, CONF_DIR_ENV, cache_dir

from .spark_tools import Pipeline
from . import virtualenvs
from .virtualenvs import CHECKOUT, constraints_file, virtualenv

SUBMIT_JOB = CHECKOUT / "tests" / "submit_job.py"


@pytest.fixture(scope="module")
def dist():
    # The checkout's dist/, as the docs pages build it: make rebuilds it only when its sources changed.
    subprocess.run(["make", "dist"], cwd=CHECKOUT, check=True, capture_output=True, timeout=600)
    return built(CHECKOUT / "dist")


@pytest.fixture(scope="module")
def runtime_python():
    """The runtime dependencies, without eos-kafka."""
    return virtualenvs.runtime_python()


def spark_submit(python: Path, options: list[str], pipeline: Pipeline, *job_args: str,
                 master: str = LOCAL) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "SPARK_HOME", "VIRTUAL_ENV")}
    env.update(PYSPARK_PYTHON=str(python), PYSPARK_DRIVER_PYTHON=str(python), SPARK_LOCAL_IP="127.0.0.1")
    command = [str(python.parent / "spark-submit"), "--master", master,
               "--conf", "spark.ui.enabled=false", "--conf", "spark.driver.host=127.0.0.1",
               "--conf", "spark.driver.bindAddress=127.0.0.1", "--driver-java-options", spark_java_options(),
               *options, str(SUBMIT_JOB),
               pipeline.bootstrap, pipeline.input, pipeline.output, pipeline.group, pipeline.checkpoint, *job_args]
    return subprocess.run(command, capture_output=True, text=True, timeout=600, env=env, cwd=Path(pipeline.checkpoint).parent)


def report(result: subprocess.CompletedProcess) -> dict:
    assert result.returncode == 0, (result.stdout + result.stderr)[-6000:]
    return json.loads(result.stdout.strip().splitlines()[-1])


def assert_imported_from(outcome: dict, archive: str, executors: int = 1) -> None:
    assert archive in outcome["driver"], outcome
    assert all(archive in path for _, path in outcome["executors"]), outcome
    assert len({executor for executor, _ in outcome["executors"]}) == executors, outcome


def test_the_artifacts_ship_the_runtime_and_the_test_kit_and_no_tooling(dist):
    """The wheel (built from the sdist), the sdist, --py-files and --packages: the checkout's files,
    the same in each (make release checks the same)."""
    runtime = [name for name in expected_files() if not name.startswith("pyspark_eos/testing/")]
    assert len(runtime) > 25 and "pyspark_eos/__init__.py" in runtime
    assert [problem for artifact in (dist.wheel, dist.sdist, dist.zip, dist.jar)
            for problem in content_problems(artifact)] == []


def test_every_artifact_states_the_version_of_the_version_module(dist):
    versions = declared_versions(dist)
    assert {"wheel metadata", "sdist PKG-INFO", "jar manifest", "Maven coordinates", "Maven pom"} <= versions.keys()
    assert {where: version for where, version in versions.items() if version != pyspark_eos.__version__} == {}
    assert dist.maven_coordinates == f"io.github.eoskafka:pyspark-eos-kafka:{pyspark_eos.__version__}"
    assert dist.wheel.name == f"pyspark_eos_kafka-{pyspark_eos.__version__}-py3-none-any.whl"


# Run by a Python that imports eos-kafka from the unzipped wheel: one broker, a topic, one record
# produced and read back. Prints where the package, its conf/ and the broker jars came from.
BROKER_FROM_THE_WHEEL = """
import json, sys, time
from pathlib import Path
from confluent_kafka import Consumer, Producer, TopicPartition, OFFSET_BEGINNING
import pyspark_eos
from pyspark_eos.testing.embedded_kafka import EmbeddedKafkaCluster, create_topic
from pyspark_eos.testing.maven_jars import KAFKA_BROKER
from pyspark_eos.testing.project_files import cache_dir, conf_dir

with EmbeddedKafkaCluster(nodes=1, directory=sys.argv[1]) as kafka:
    topic = create_topic(kafka.bootstrap_servers, "from-the-wheel")
    producer = Producer({"bootstrap.servers": kafka.bootstrap_servers})
    producer.produce(topic, b"a record", partition=0)
    assert producer.flush(30) == 0
    consumer = Consumer({"bootstrap.servers": kafka.bootstrap_servers, "group.id": "from-the-wheel",
                         "enable.auto.commit": False})
    consumer.assign([TopicPartition(topic, 0, OFFSET_BEGINNING)])
    deadline, values = time.monotonic() + 30, []
    while not values and time.monotonic() < deadline:
        message = consumer.poll(1)
        if message is not None and message.error() is None:
            values.append(message.value().decode())
    consumer.close()
    broker_java = Path(f"/proc/{kafka.pids[1]}/cmdline").read_bytes().decode().split(chr(0))
print(json.dumps({"package": pyspark_eos.__file__, "conf": str(conf_dir()), "pom": str(KAFKA_BROKER.pom_path()),
                  "jars": str(KAFKA_BROKER.directory()), "cache": str(cache_dir()), "values": values,
                  "log4j": [a for a in broker_java if a.startswith("-Dlog4j2.configurationFile=")]}))
"""


def installed_copy_env(path: Path, **env: str) -> dict[str, str]:
    """The environment of a Python that imports eos-kafka from ``path`` (ahead of the checkout,
    which the editable install's .pth entry puts on sys.path after it)."""
    base = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", CONF_DIR_ENV, CACHE_DIR_ENV)}
    return {**base, "PYTHONPATH": str(path), **env}


def test_the_embedded_broker_runs_from_the_unzipped_wheel(dist, tmp_path):
    unzipped = tmp_path / "wheel"
    with zipfile.ZipFile(dist.wheel) as wheel:
        wheel.extractall(unzipped)
    work = tmp_path / "cwd"
    work.mkdir()
    # The checkout's jar cache: the wheel's pom is the checkout's, so its jars are there already.
    env = installed_copy_env(unzipped, **{CACHE_DIR_ENV: str(cache_dir())})
    result = subprocess.run([sys.executable, "-c", BROKER_FROM_THE_WHEEL, str(tmp_path / "kafka")],
                            cwd=work, env=env, capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, (result.stdout + result.stderr)[-6000:]
    outcome = json.loads(result.stdout.strip().splitlines()[-1])
    shipped_conf = unzipped / "pyspark_eos" / "testing" / "conf"
    assert outcome["values"] == ["a record"]
    assert Path(outcome["package"]) == unzipped / "pyspark_eos" / "__init__.py"
    assert Path(outcome["conf"]) == shipped_conf
    assert Path(outcome["pom"]) == shipped_conf / "kafka-broker-pom.xml"
    assert outcome["log4j"] == [f"-Dlog4j2.configurationFile={shipped_conf / 'broker-log4j2.properties'}"]
    assert Path(outcome["cache"]) == cache_dir()
    assert Path(outcome["jars"]) == KAFKA_BROKER.directory()  # the same pom: no second download


WHERE_FROM = """
import json
import pyspark_eos
from pyspark_eos.testing.project_files import cache_dir, conf_dir
print(json.dumps({"package": pyspark_eos.__file__, "conf": str(conf_dir()), "cache": str(cache_dir())}))
"""


@pytest.mark.parametrize("artifact", ["wheel", "zip"])
def test_an_installed_copy_reads_its_own_conf_and_caches_per_user(dist, tmp_path, artifact):
    """Without EOS_KAFKA_CACHE_DIR, outside a checkout, the cache is $XDG_CACHE_HOME/eos-kafka; from
    a zip (--py-files), the packaged conf/ files are copied out into it for Java and Maven to read."""
    if artifact == "wheel":
        path = tmp_path / "wheel"
        with zipfile.ZipFile(dist.wheel) as wheel:
            wheel.extractall(path)
    else:
        path = dist.zip
    xdg = tmp_path / "xdg-cache"
    result = subprocess.run([sys.executable, "-c", WHERE_FROM], cwd=tmp_path, capture_output=True, text=True,
                            env=installed_copy_env(path, XDG_CACHE_HOME=str(xdg)), timeout=120)
    assert result.returncode == 0, result.stderr[-4000:]
    outcome = json.loads(result.stdout.strip().splitlines()[-1])
    assert outcome["package"].startswith(f"{path}/"), outcome
    assert Path(outcome["cache"]) == xdg / "eos-kafka"
    conf = Path(outcome["conf"])
    if artifact == "wheel":
        assert conf == path / "pyspark_eos" / "testing" / "conf"
    else:
        assert conf.parent == xdg / "eos-kafka" / "packaged-conf"
    assert sorted(p.name for p in conf.iterdir()) == sorted(KIT_CONF)
    for name in KIT_CONF:
        assert (conf / name).read_bytes() == (CHECKOUT / "conf" / name).read_bytes()


@pytest.mark.spark_local_cluster
def test_spark_submit_packages_resolves_the_jar_from_a_maven_repository(kafka, tmp_path, dist, runtime_python):
    pipeline = Pipeline(kafka, tmp_path)
    options = ["--packages", MAVEN_COORDINATES, "--repositories", dist.maven_repository.as_uri(),
               "--conf", f"spark.jars.ivy={tmp_path / 'ivy'}"]  # an empty Ivy cache: resolved from the repository
    result = spark_submit(runtime_python, options, pipeline, "register", master=LOCAL_CLUSTER)
    outcome = report(result)
    assert f"found {MAVEN_COORDINATES.replace(':', '#', 1).replace(':', ';')} in repo-1" in result.stdout + result.stderr
    assert_imported_from(outcome, ".jar/pyspark_eos/", executors=2)
    pipeline.assert_exactly_once()


@pytest.mark.release
def test_the_wheel_installed_with_pip_runs_an_exactly_once_pipeline(kafka, tmp_path, dist):
    """What ``pip install`` of the wheel alone gives a user: a fresh virtual environment with the
    wheel and the dependencies it declares (at this environment's versions, from pip's cache), in
    which Spark discovers the format with no register() call."""
    home = tmp_path / "venv"
    python = virtualenv("wheel", [str(dist.wheel), "--constraint", str(constraints_file(tmp_path))], home=home)
    pipeline = Pipeline(kafka, tmp_path)
    outcome = report(spark_submit(python, [], pipeline))
    assert_imported_from(outcome, f"{home}/lib/")
    pipeline.assert_exactly_once()


def test_load_says_what_to_install_when_confluent_kafka_is_missing(kafka, tmp_path, dist):
    python = virtualenvs.no_kafka_client_python()
    pipeline = Pipeline(kafka, tmp_path)
    result = spark_submit(python, ["--py-files", str(dist.zip)], pipeline, "register")
    output = result.stdout + result.stderr  # spark-submit merges the Python driver's stderr into stdout
    assert result.returncode != 0
    assert re.search(r"line \d+, in load\b", output)  # raised by load(), before any query started
    assert "MissingDependencyError: eos-kafka needs confluent-kafka" in output, output[-4000:]
    assert "pip install 'confluent-kafka>=2.6'" in output
    assert pipeline.output_values() == []
