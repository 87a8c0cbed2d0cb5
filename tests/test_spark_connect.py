"""eos-kafka from a Spark Connect client: a Connect server started from the installed PySpark
(its own Python workers import eos-kafka from this environment), and a client in a process of its
own that registers the format over Connect, reads the input in batch and runs an eos-kafka ->
eos-kafka stream to the input's end; the output is checked with a plain read_committed consumer."""
from __future__ import annotations

import json
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

from pyspark_eos.testing.embedded_kafka import free_ports
from pyspark_eos.testing.local_spark import local_connect_server, self_connected, wait_for_connect_server

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


def test_a_probe_that_connected_to_itself_is_not_taken_for_a_listening_server():
    with socket.socket() as alone, socket.socket() as listener:
        alone.bind(("127.0.0.1", 0))
        alone.connect(alone.getsockname())  # no listener: TCP's simultaneous open with itself
        assert self_connected(alone)
        listener.bind(("127.0.0.1", 0))
        listener.listen()
        with socket.create_connection(listener.getsockname()) as client:
            assert not self_connected(client)


def test_a_connect_server_that_logged_a_failed_start_is_reported_at_once_with_its_log(tmp_path):
    # SparkConnectServer logs a failed bind and lives on: waiting for its port would be in vain.
    log_file = tmp_path / "server.log"
    log_file.write_text("ERROR SparkConnectServer: Error starting Spark Connect server\njava.net.BindException\n")
    lives_on = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(120)"])
    try:
        started = time.monotonic()
        with pytest.raises(RuntimeError, match="(?s)did not start .*BindException"):
            wait_for_connect_server(lives_on, free_ports(1)[0], 60.0, log_file)
        assert time.monotonic() - started < 30
    finally:
        lives_on.kill()
        lives_on.wait()
