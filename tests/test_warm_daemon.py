"""Spark's Python processes started warm (pyspark-eos-python, pyspark_eos.workers): the process Spark
starts hands its streams to a child forked from the fork server of its interpreter, which stands in
for it as Spark expects (a daemon's port on stdout, workers on that port, SIGTERM, stdin's end, a
module's output and exit status), and it runs the module itself where no server may serve."""
from __future__ import annotations

import os
import shutil
import signal
import socket
import struct
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

from pyspark_eos.kafka import fault_hooks
from pyspark_eos.protocol.process_stat import parent_pid, running
from pyspark_eos.workers import server_address
from pyspark_eos.workers.fork_server import PRELOADED_MODULES

from pyspark_eos.testing.local_spark import warm_python

from .kafka_tools import wait_until

INT = struct.Struct("!i")
LAUNCHER = warm_python()
SECRET = "a-secret-only-spark-knows"


def command_of(pid: int) -> str:
    return Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode()


@pytest.fixture
def runtime_dir():
    # A socket's path must stay short (108 bytes): not under pytest's tmp_path.
    directory = Path(tempfile.mkdtemp(prefix="eos-rt-", dir="/tmp"))
    yield directory
    shutil.rmtree(directory, ignore_errors=True)


class SparkSide:
    """What Spark's PythonWorkerFactory does with a daemon: start it, read its port, ask for workers."""

    def __init__(self, runtime_dir: Path, cwd: Path, idle_seconds: float = 30.0):
        self.env = env = {**os.environ, "XDG_RUNTIME_DIR": str(runtime_dir), "PYTHON_WORKER_FACTORY_SECRET": SECRET,
               "PYTHONUNBUFFERED": "YES", "EOS_KAFKA_FORK_SERVER_IDLE_SECONDS": str(idle_seconds)}
        self.process = subprocess.Popen([LAUNCHER, "-m", "pyspark.daemon", "pyspark.worker"],
                                        stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                        env=env, cwd=cwd)
        self.port = INT.unpack(self.process.stdout.read(INT.size))[0]
        self.workers: list[socket.socket] = []

    def worker(self) -> tuple[int, str]:
        """A worker's pid, and its answer to Spark's secret; it lives until ``stop``, as a worker
        Spark holds (it exits when its connection closes)."""
        conn = socket.create_connection(("127.0.0.1", self.port), timeout=60)
        self.workers.append(conn)
        pid = INT.unpack(conn.recv(INT.size, socket.MSG_WAITALL))[0]
        conn.sendall(INT.pack(len(SECRET)) + SECRET.encode())
        length = INT.unpack(conn.recv(INT.size, socket.MSG_WAITALL))[0]
        return pid, conn.recv(length, socket.MSG_WAITALL).decode()

    def stop(self) -> int:
        for conn in self.workers:
            conn.close()
        self.process.stdin.close()  # as a JVM that goes away
        return self.process.wait(60)


def test_a_daemon_spark_starts_is_forked_from_the_fork_server_with_sparks_streams(runtime_dir, tmp_path):
    first, second = SparkSide(runtime_dir, tmp_path), SparkSide(runtime_dir, tmp_path)
    (worker, answer), (other_worker, _) = first.worker(), second.worker()
    daemon, other_daemon = parent_pid(worker), parent_pid(other_worker)
    assert answer == "ok"  # the worker read Spark's secret from the environment Spark gave the daemon
    assert daemon != first.process.pid and other_daemon != second.process.pid
    server = parent_pid(daemon)
    assert "pyspark_eos.workers.fork_server" in command_of(server)
    assert parent_pid(other_daemon) == server  # one server per interpreter, both daemons forked from it
    assert os.readlink(f"/proc/{daemon}/cwd") == str(tmp_path)
    # stdin's end stops the daemon, and its stand-in with the daemon's status (PySpark's exits 1 then)
    assert first.stop() == 1 and second.stop() == 1
    assert not running(daemon) and not running(other_daemon)


def test_sparks_sigterm_stops_the_forked_daemon_and_its_stand_in(runtime_dir, tmp_path):
    spark_side = SparkSide(runtime_dir, tmp_path)
    worker, _ = spark_side.worker()
    daemon = parent_pid(worker)
    spark_side.process.terminate()  # Spark's stopDaemon: Process.destroy()
    assert spark_side.process.wait(60) == 1  # PySpark's daemon exits 1 on SIGTERM
    wait_until(lambda: not running(daemon) and not running(worker), 30, "the daemon and its worker to exit")


def test_a_forked_daemon_killed_is_a_stand_in_killed_for_spark(runtime_dir, tmp_path):
    spark_side = SparkSide(runtime_dir, tmp_path)
    os.kill(parent_pid(spark_side.worker()[0]), signal.SIGKILL)  # as the OOM killer would
    assert spark_side.process.wait(60) == -signal.SIGKILL
    assert spark_side.stop() == -signal.SIGKILL  # its worker, orphaned, ends with its connection


def test_the_server_exits_once_idle(runtime_dir, tmp_path):
    spark_side = SparkSide(runtime_dir, tmp_path, idle_seconds=1)
    server = parent_pid(parent_pid(spark_side.worker()[0]))
    assert spark_side.stop() == 1
    wait_until(lambda: not running(server), 30, "the idle fork server to exit")
    assert not list(runtime_dir.glob("*/*.sock"))


def test_a_module_spark_runs_fresh_runs_forked_with_its_output_and_status_and_anything_else_as_usual(
        runtime_dir, tmp_path):
    # A streaming source's runner is such a module; find_spark_home prints, then exits 0.
    env = {**os.environ, "XDG_RUNTIME_DIR": str(runtime_dir), "SPARK_HOME": "/spark-home-of-this-test"}
    forked = subprocess.run([LAUNCHER, "-m", "pyspark.find_spark_home"], env=env, cwd=tmp_path, capture_output=True,
                            text=True, timeout=60)
    assert (forked.returncode, forked.stdout.strip()) == (0, "/spark-home-of-this-test"), forked.stderr
    assert list(runtime_dir.glob("*/*.sock"))  # it went through a server
    failed = subprocess.run([LAUNCHER, "-m", "pyspark.no_such_module"], env=env, capture_output=True, text=True,
                            timeout=60)
    assert failed.returncode == 1 and "No module named pyspark.no_such_module" in failed.stderr
    plain = subprocess.run([LAUNCHER, "-c", "import sys; print(sys.argv[1:]); sys.exit(3)", "a"], env=env,
                           capture_output=True, text=True, timeout=60)
    assert (plain.returncode, plain.stdout.strip()) == (3, "['a']")


def test_where_others_may_write_the_daemon_is_pysparks_own_in_the_started_process(runtime_dir, tmp_path):
    shared = runtime_dir / f"pyspark-eos-{os.getuid()}"
    shared.mkdir()
    shared.chmod(0o777)
    spark_side = SparkSide(runtime_dir, tmp_path)
    worker, answer = spark_side.worker()
    assert answer == "ok" and parent_pid(worker) == spark_side.process.pid
    assert spark_side.stop() == 1
    assert b"is not this user's alone (mode 777): starting Spark's Python process directly" in \
        spark_side.process.stderr.read()
    assert not list(shared.glob("*.sock"))


def test_the_server_preloads_eos_kafkas_task_modules_and_pysparks_daemon():
    assert {"pyspark.daemon", "pyspark.worker", "pyspark_eos.sink.transactional_writer"} <= set(PRELOADED_MODULES)


def server_of_this_worker(_):
    yield command_of(parent_pid(os.getppid()))


def test_the_kits_spark_forks_its_python_workers_from_the_fork_server(spark):
    # local_spark_session sets PYSPARK_PYTHON to pyspark-eos-python, as docs/deployment.md recommends
    commands = spark.sparkContext.parallelize(range(2), 2).mapPartitions(server_of_this_worker).collect()
    assert commands and all("pyspark_eos.workers.fork_server" in command for command in commands)


# ------------------------------------------------------------------ which server: broker-free


def digest(environ=None, paths=None):
    return server_address.interpreter_digest("/usr/bin/python3", environ or {}, paths or {}, 1000)


def test_a_daemon_shares_a_server_only_with_daemons_its_interpreter_would_equal():
    env = {"PYTHONPATH": "/app/lib.zip", "PYTHONHASHSEED": "0", "SPARK_HOME": "/spark"}
    assert server_address.import_time_environment({**env, "PYTHON_WORKER_FACTORY_SECRET": "s"}) == {
        "PYTHONHASHSEED": "0", "PYTHONPATH": "/app/lib.zip"}
    # per-launch variables, read while a daemon runs, leave it the same server
    assert digest(env) == digest({**env, "PYTHON_WORKER_FACTORY_SECRET": "s", "SPARK_HOME": "/other"})
    # what the interpreter or an import fixes at start does not
    for changed in ({"PYTHONHASHSEED": "1"}, {"PYTHONPATH": "/app/other.zip"}, {"CONTAINER_ID": "c2"},
                    {fault_hooks.HOOKS_ENV: "tests.hooks"}):
        assert digest(env) != digest({**env, **changed})
    # an upgraded package, an edited module
    assert digest(env, {"/site-packages": 1}) != digest(env, {"/site-packages": 2})


def test_the_digest_sees_an_edited_module(tmp_path):
    module = tmp_path / "pkg" / "mod.py"
    module.parent.mkdir()
    module.write_text("x = 1\n")
    before = server_address.path_versions(["/nonexistent"], [module.parent])
    os.utime(module, ns=(1, 1))
    after = server_address.path_versions(["/nonexistent"], [module.parent])
    assert before[str(module)] != after[str(module)] and before["/nonexistent"] is None
    assert server_address.socket_path("/run/user/1000", 1000, "ab") == Path("/run/user/1000/pyspark-eos-1000/ab.sock")
