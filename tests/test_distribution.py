"""The three ways data engineers ship eos-kafka to a Spark job, each with a real ``spark-submit``
(the script of a pip-installed PySpark) against the embedded broker: a small eos-kafka -> eos-kafka
job runs to the input's end and its output is checked with a plain read_committed consumer.

Each runs in a virtual environment of its own, on a Python that does not have the package from
this checkout: the driver and the executors' workers report where they imported it from.
"""
from __future__ import annotations

import json
import os
import re
import subprocess
from pathlib import Path

import pytest

from pyspark_eos.testing.distribution import MAVEN_COORDINATES, build
from pyspark_eos.testing.local_spark import LOCAL, LOCAL_CLUSTER
from pyspark_eos.testing.project_files import conf_dir

from .spark_tools import Pipeline
from .virtualenvs import CHECKOUT, RUNTIME, constraints_file, pinned, virtualenv

SUBMIT_JOB = CHECKOUT / "tests" / "submit_job.py"


@pytest.fixture(scope="module")
def dist(tmp_path_factory):
    return build(tmp_path_factory.mktemp("dist"))


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


def test_a_pip_installed_wheel_needs_no_other_step(kafka, tmp_path, dist):
    python = virtualenv("wheel", [str(dist.wheel), "--constraint", str(constraints_file(tmp_path))], home=tmp_path / "venv")
    pipeline = Pipeline(kafka, tmp_path)
    outcome = report(spark_submit(python, [], pipeline))
    assert_imported_from(outcome, str(tmp_path / "venv" / "lib"))
    assert outcome["batches"] > 1
    pipeline.assert_exactly_once()


def test_spark_submit_py_files_ships_the_zip_to_a_python_without_the_package(kafka, tmp_path, dist, runtime_python):
    pipeline = Pipeline(kafka, tmp_path)
    outcome = report(spark_submit(runtime_python, ["--py-files", str(dist.zip)], pipeline, "register"))
    assert_imported_from(outcome, f"{dist.zip.name}/pyspark_eos/")
    pipeline.assert_exactly_once()


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
