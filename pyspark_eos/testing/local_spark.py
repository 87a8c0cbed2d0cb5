"""A SparkSession for local development, the tests and the example pipeline.

``local[N]`` runs tasks in the driver JVM; ``local-cluster[E,C,M]`` starts E executor JVMs the
way a standalone cluster would, which is what anything about executors (lost executors, one
producer per worker slot) has to be tested on. Both work from the pip-installed PySpark.
"""
from __future__ import annotations

import contextlib
import logging
import os
import re
import shutil
import socket
import subprocess
import sys
import time
from pathlib import Path
from typing import Mapping

from ..operator.pyspark_bytecode import compile_pyspark_zip
from .jvm_options import class_archive_options, extra_jvm_options
from .project_files import cache_dir, cache_lock, conf_dir

log = logging.getLogger(__name__)

LOCAL = "local[2]"
LOCAL_CLUSTER = "local-cluster[2,1,1024]"
# For tests of lost executors: the driver declares a silent executor lost after 8 s (Spark's
# default is 120 s), and a shuffle or broadcast fetch from a stopped executor, which accepts the
# connection and answers nothing, gives up after 10 s (120 s by default) and goes elsewhere.
FAST_EXECUTOR_LOSS = {
    "spark.executor.heartbeatInterval": "1s",
    "spark.storage.blockManagerHeartbeatTimeoutMs": "8000",
    "spark.network.timeoutInterval": "1s",
    "spark.shuffle.io.connectionTimeout": "10s",
}


# The Spark settings docs/deployment.md recommends beside pyspark-eos-python (warm_python): Spark's
# JVM talks to its Python processes over Unix domain sockets instead of loopback TCP (PySpark 4.1
# and later; 4.0 ignores it). Over TCP, each task's Python data source reader started reading tens of
# milliseconds after the task's writer, every micro-batch (docs/performance.md).
RECOMMENDED_CONF = {"spark.python.unix.domain.socket.enabled": "true"}
# Spark's own defaults for what RECOMMENDED_CONF sets: a session as a user's without it.
SPARK_DEFAULTS = {"spark.python.unix.domain.socket.enabled": "false"}


def spark_java_options() -> str:
    """The driver's and executors' JVM options: the project's logging, jvm_options' extras, and the
    class archive of the Spark home local_spark_session launches (a JVM of another home ignores it)."""
    return " ".join([*_log4j_options(), *extra_jvm_options(), *class_archive_options(spark_classpath_key())])


def spark_classpath_key() -> str:
    """What the classpath of a Spark JVM local_spark_session launches is made of: its Spark home's
    jars (and conf/)."""
    return f"spark {launched_spark_home()}"


def _log4j_options() -> list[str]:
    try:
        return [f"-Dlog4j2.configurationFile={conf_dir() / 'spark-log4j2.properties'}"]
    except Exception:  # an installed copy without conf/: keep Spark's own logging
        return []


# When set, local_spark_session launches Spark from this Spark home (spark_home_with_compiled_zip),
# so that Spark's Python processes start from a compiled pyspark.zip: the test suite sets it, and
# the cold benchmark for one contender. A home that is no copy of the PySpark installed here (a job
# of another PySpark's environment inheriting the variable) is ignored.
COMPILED_SPARK_HOME_ENV = "EOS_KAFKA_COMPILED_SPARK_HOME"
_COMPLETE = ".complete"


def spark_home_with_compiled_zip() -> Path:
    """The installed PySpark as a Spark home of links to its files, but for a python/lib/pyspark.zip
    holding compiled bytecode (``python -m pyspark_eos compile-pyspark-zip``); made once per PySpark
    and Python version, in the cache."""
    import pyspark

    installed = Path(pyspark.__file__).parent
    name = f"spark-home-compiled-{pyspark.__version__}-py{sys.version_info.major}{sys.version_info.minor}"
    home = cache_dir() / name
    with cache_lock(name):
        if not (home / _COMPLETE).exists():
            shutil.rmtree(home, ignore_errors=True)
            _link_spark_home(installed, home)
            compile_pyspark_zip(home / "python" / "lib" / "pyspark.zip")
            (home / _COMPLETE).touch()
    return home


def _link_spark_home(installed: Path, home: Path) -> None:
    lib = home / "python" / "lib"
    lib.mkdir(parents=True)
    for parent, target in ((installed, home), (installed / "python", home / "python")):
        for entry in parent.iterdir():
            if not (target / entry.name).exists():
                (target / entry.name).symlink_to(entry)
    for entry in (installed / "python" / "lib").iterdir():
        if entry.name == "pyspark.zip":
            shutil.copy2(entry, lib / entry.name)
        else:
            (lib / entry.name).symlink_to(entry)


def launched_spark_home() -> Path:
    """The Spark home local_spark_session launches Spark from (its standalone workers' work/ too)."""
    import pyspark

    installed = Path(pyspark.__file__).parent
    compiled = os.environ.get(COMPILED_SPARK_HOME_ENV)
    if compiled and (Path(compiled) / "jars").resolve() == (installed / "jars").resolve():
        return Path(compiled)
    return Path(os.environ.get("SPARK_HOME") or installed)


@contextlib.contextmanager
def _spark_home_for_launch():
    # Only the JVM launched now (and the processes it starts) sees it: the test's own subprocesses,
    # which may run another PySpark, keep the environment they had.
    previous, os.environ["SPARK_HOME"] = os.environ.get("SPARK_HOME"), str(launched_spark_home())
    try:
        yield
    finally:
        if previous is None:
            os.environ.pop("SPARK_HOME")
        else:
            os.environ["SPARK_HOME"] = previous


def warm_python() -> str:
    """The Python Spark's Python processes run: ``pyspark-eos-python`` beside this interpreter (they
    start warm, as docs/deployment.md recommends), or this interpreter where it is not installed."""
    launcher = Path(sys.executable).with_name("pyspark-eos-python")
    return str(launcher) if launcher.exists() else sys.executable


def local_spark_session(master: str = LOCAL, app_name: str = "eos-kafka", conf: Mapping[str, str] | None = None):
    """Build (or return the active) SparkSession bound to 127.0.0.1 with quiet logging and the
    recommended settings (RECOMMENDED_CONF, which ``conf`` may override)."""
    from pyspark.sql import SparkSession

    # Workers must run the same interpreter (and so see the same installed packages) as the driver;
    # the JVM starts the driver's Python processes (data source planners) with PYSPARK_DRIVER_PYTHON.
    os.environ.setdefault("PYSPARK_PYTHON", warm_python())
    os.environ.setdefault("PYSPARK_DRIVER_PYTHON", warm_python())
    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    java_options = spark_java_options()
    builder = (
        SparkSession.builder.master(master)
        .appName(app_name)
        .config("spark.driver.host", "127.0.0.1")
        .config("spark.driver.bindAddress", "127.0.0.1")
        .config("spark.ui.enabled", "false")
        .config("spark.ui.showConsoleProgress", "false")
        .config("spark.sql.shuffle.partitions", "4")
        .config("spark.driver.extraJavaOptions", java_options)
        .config("spark.executor.extraJavaOptions", java_options)
    )
    for key, value in {**RECOMMENDED_CONF, **(conf or {})}.items():
        builder = builder.config(key, value)
    with _spark_home_for_launch():
        return builder.getOrCreate()


def jars_not_in_spark(jars: list[Path]) -> list[Path]:
    """Drop the jars Spark ships itself (scala-library, hadoop-client, ...): a second copy of an
    artifact at another version on the classpath breaks Spark in ways that are hard to trace."""
    import pyspark

    shipped = {_artifact(jar.name) for jar in (Path(pyspark.__file__).parent / "jars").glob("*.jar")}
    return [jar for jar in jars if _artifact(jar.name) not in shipped]


def _artifact(jar_name: str) -> str:
    return re.sub(r"-\d[^-]*(-[^-]*)?\.jar$", "", jar_name)


def executor_local_dirs(spark, timeout: float = 60.0) -> set[str]:
    """``SPARK_LOCAL_DIRS`` as the Python workers of each executor see it (the driver's in local
    mode): where fault injection is armed and task-local files live. Asked until every registered
    executor has answered: on a busy machine one executor can run all of a short job's tasks."""
    expected = max(len(executor_ids(spark)), 1)
    deadline = time.monotonic() + timeout
    while True:
        tasks = spark.sparkContext.parallelize(range(16), 16)
        found = set(tasks.map(lambda _: os.environ.get("SPARK_LOCAL_DIRS", "")).collect())
        if len(found) >= expected or time.monotonic() > deadline:
            return found


def executor_work_directory(spark, executor: str) -> Path:
    """Where a local-cluster executor runs (its Python workers' working directory), and logs."""
    return launched_spark_home() / "work" / spark.sparkContext.applicationId / executor


def executor_logs(spark) -> str:
    """What the executors of a local-cluster session wrote to stderr (their log4j lines, the
    exceptions of failed tasks, their Python workers' output): Spark's standalone worker keeps it
    in $SPARK_HOME/work/<application id>/<executor id>/stderr."""
    work = launched_spark_home() / "work" / spark.sparkContext.applicationId
    return "".join(path.read_text(errors="replace") for path in sorted(work.glob("*/stderr")))


def executor_ids(spark) -> set[str]:
    """Ids of the executors registered with the driver (the driver itself excluded)."""
    ids = spark.sparkContext._jsc.sc().getExecutorIds()
    return {str(ids.apply(i)) for i in range(ids.size())}


def wait_for_executors(spark, count: int, timeout: float = 120.0) -> set[str]:
    """Wait until ``count`` executors have registered; local-cluster starts them asynchronously."""
    deadline = time.monotonic() + timeout
    while True:
        registered = executor_ids(spark)
        if len(registered) >= count:
            return registered
        if time.monotonic() > deadline:
            raise TimeoutError(f"only executors {sorted(registered)} registered in {timeout:.0f} s, expected {count}")
        time.sleep(0.2)


CONNECT_SERVER_CLASS = "org.apache.spark.sql.connect.service.SparkConnectServer"


@contextlib.contextmanager
def local_connect_server(log_file: Path, master: str = LOCAL, timeout: float = 180.0):
    """A Spark Connect server on 127.0.0.1, started with ``spark-submit`` from the Spark home
    local_spark_session launches (the installed PySpark's jars include the server), its Python
    workers on this interpreter; yields the ``sc://`` URL a client connects to. Its log goes to
    ``log_file``."""
    from .embedded_kafka import free_ports

    port = free_ports(1)[0]
    java_options = spark_java_options()
    home = launched_spark_home()
    env = {**os.environ, "PYSPARK_PYTHON": warm_python(), "PYSPARK_DRIVER_PYTHON": warm_python(),
           "SPARK_LOCAL_IP": "127.0.0.1", "SPARK_HOME": str(home)}
    command = [str(home / "bin" / "spark-submit"), "--master", master, "--class", CONNECT_SERVER_CLASS,
               "--conf", "spark.connect.grpc.binding.address=127.0.0.1",
               "--conf", f"spark.connect.grpc.binding.port={port}",
               "--conf", "spark.driver.host=127.0.0.1", "--conf", "spark.driver.bindAddress=127.0.0.1",
               "--conf", "spark.ui.enabled=false", "--conf", "spark.sql.shuffle.partitions=4",
               *(part for key, value in RECOMMENDED_CONF.items() for part in ("--conf", f"{key}={value}")),
               "--driver-java-options", java_options]
    with open(log_file, "w") as log_output:
        server = subprocess.Popen(command, stdout=log_output, stderr=subprocess.STDOUT, env=env)
    try:
        wait_for_connect_server(server, port, timeout, log_file)
        log.info("Spark Connect server %d listening on 127.0.0.1:%d (log: %s)", server.pid, port, log_file)
        yield f"sc://127.0.0.1:{port}"
    finally:
        server.terminate()  # spark-submit execs the JVM: this is the server itself
        try:
            server.wait(60)
        except subprocess.TimeoutExpired:
            server.kill()
            server.wait(30)


# SparkConnectServer logs this and does not exit when its service cannot start (a port taken).
_CONNECT_START_FAILED = "Error starting Spark Connect server"


def _listens(port: int) -> bool:
    with socket.socket() as probe:
        return probe.connect_ex(("127.0.0.1", port)) == 0 and not self_connected(probe)


def self_connected(sock: socket.socket) -> bool:
    """Whether a connected socket reached itself: a connect to a port no one listens on, from the
    same port of the ephemeral range, succeeds as TCP's simultaneous open."""
    return sock.getsockname() == sock.getpeername()


def wait_for_connect_server(server: subprocess.Popen, port: int, timeout: float, log_file: Path) -> None:
    """Until ``server`` listens on ``port``; an error with its log when it exited or failed to start."""
    deadline = time.monotonic() + timeout
    while True:
        log_text = log_file.read_text(errors="replace")
        if server.poll() is not None or _CONNECT_START_FAILED in log_text:
            raise RuntimeError(f"the Spark Connect server did not start (exit code {server.returncode}): "
                               f"{log_text[-3000:]}")
        if _listens(port):
            return
        if time.monotonic() > deadline:
            raise TimeoutError(f"the Spark Connect server did not listen on port {port} within {timeout:.0f} s "
                               f"(log: {log_file})")
        time.sleep(0.2)
