"""eos-kafka from a Spark Connect client: a Connect server started from the installed PySpark
(its own Python workers import eos-kafka from this environment), and a client in a process of its
own that registers the format over Connect, reads the input in batch and runs an eos-kafka ->
eos-kafka stream to the input's end; the output is checked with a plain read_committed consumer."""
from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from pyspark_eos.testing.local_spark import local_connect_server

from .spark_tools import Pipeline

CONNECT_JOB = Path(__file__).parent / "connect_job.py"


@pytest.fixture(scope="module")
def connect_url(tmp_path_factory):
    with local_connect_server(tmp_path_factory.mktemp("connect") / "server.log") as url:
        yield url


def test_a_connect_client_registers_the_format_reads_in_batch_and_streams_exactly_once(kafka, tmp_path, connect_url):
    pipeline = Pipeline(kafka, tmp_path, rounds=3)
    result = subprocess.run([sys.executable, str(CONNECT_JOB), connect_url, pipeline.bootstrap, pipeline.input,
                             pipeline.output, pipeline.group, pipeline.checkpoint],
                            capture_output=True, text=True, timeout=600)
    assert result.returncode == 0, (result.stdout + result.stderr)[-6000:]
    report = json.loads(result.stdout.strip().splitlines()[-1])
    assert report["session"].startswith("pyspark.sql.connect"), report
    assert report["exception"] is None and report["batches"] >= 2, report
    assert report["batch_rows"] == len(pipeline.input_values())
    pipeline.assert_exactly_once()
