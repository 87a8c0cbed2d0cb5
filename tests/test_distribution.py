"""Shipping eos-kafka to a Spark job with a real ``spark-submit`` (the script of a pip-installed
PySpark) against the embedded broker, beyond what docs/deployment.md runs: its page test
(test_docs.py) already runs each way the page shows (the pip-installed wheel, ``--py-files``,
``--packages``) in ``local[2]`` on a Python without the package. Here, ``--packages`` on two
executors, with the driver and each executor's Python workers reporting where they imported the
package from, and the error a Python without confluent-kafka gets.
"""
from __future__ import annotations

import json
import os
import re
import subprocess
from pathlib import Path

import pytest

from pyspark_eos.testing.distribution import MAVEN_COORDINATES, built
from pyspark_eos.testing.local_spark import LOCAL, LOCAL_CLUSTER
from pyspark_eos.testing.project_files import conf_dir

from .spark_tools import Pipeline
from .virtualenvs import CHECKOUT, RUNTIME, pinned, virtualenv

SUBMIT_JOB = CHECKOUT / "tests" / "submit_job.py"


@pytest.fixture(scope="module")
def dist():
    # The checkout's dist/, as the docs pages build it: make rebuilds it only when its sources changed.
    subprocess.run(["make", "dist"], cwd=CHECKOUT, check=True, capture_output=True, timeout=600)
    return built(CHECKOUT / "dist")


@pytest.fixture(scope="module")
def runtime_python():
    """The runtime dependencies, without eos-kafka."""
    return virtualenv("runtime", pinned(*RUNTIME))


def spark_submit(python: Path, options: list[str], pipeline: Pipeline, *job_args: str,
                 master: str = LOCAL) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "SPARK_HOME", "VIRTUAL_ENV")}
    env.update(PYSPARK_PYTHON=str(python), PYSPARK_DRIVER_PYTHON=str(python), SPARK_LOCAL_IP="127.0.0.1")
    log4j = f"-Dlog4j2.configurationFile={conf_dir() / 'spark-log4j2.properties'}"
    command = [str(python.parent / "spark-submit"), "--master", master,
               "--conf", "spark.ui.enabled=false", "--conf", "spark.driver.host=127.0.0.1",
               "--conf", "spark.driver.bindAddress=127.0.0.1", "--driver-java-options", log4j,
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


def test_load_says_what_to_install_when_confluent_kafka_is_missing(kafka, tmp_path, dist):
    python = virtualenv("no-kafka-client", pinned("pyspark", "pyarrow"))
    pipeline = Pipeline(kafka, tmp_path)
    result = spark_submit(python, ["--py-files", str(dist.zip)], pipeline, "register")
    output = result.stdout + result.stderr  # spark-submit merges the Python driver's stderr into stdout
    assert result.returncode != 0
    assert re.search(r"line \d+, in load\b", output)  # raised by load(), before any query started
    assert "MissingDependencyError: eos-kafka needs confluent-kafka" in output, output[-4000:]
    assert "pip install 'confluent-kafka>=2.6'" in output
    assert pipeline.output_values() == []
