"""A Spark standalone cluster on one machine, with one worker per loopback address.

Spark never launches a speculative copy of a task on a host where an attempt of that task
runs, so local-cluster mode (every executor on one host) cannot show speculative execution. A
standalone cluster can when each worker has a host of its own: on Linux every 127.x.y.z address
reaches loopback, so a master on 127.0.0.1 and workers on 127.0.0.2, 127.0.0.3, ... (each with
``SPARK_LOCAL_IP`` set to its address) are distinct hosts to Spark. The master and the workers
run from the pip-installed PySpark's own ``bin/spark-class``.

``task_attempts`` reads the task attempts of a running application (speculative ones included)
from the driver's REST API, which needs the session's UI on (``ui_conf``).
"""
from __future__ import annotations

import http.client
import json
import logging
import os
import signal
import subprocess
import time
import urllib.error
import urllib.request
from dataclasses import dataclass
from pathlib import Path

from devtools import python_logging
from pyspark_eos.protocol.process_stat import START_TICKS, STATE, parent_pid, stat_fields
from pyspark_eos.testing.embedded_kafka import free_ports, log_tail, start_dying_with_parent

log = logging.getLogger(__name__)

MASTER_HOST = "127.0.0.1"


class StandaloneClusterError(RuntimeError):
    pass


def spark_home() -> Path:
    import pyspark

    return Path(pyspark.__file__).resolve().parent


def _start_time(pid: int) -> int | None:
    """The process's start time in clock ticks since boot (with the pid, its identity), or None
    once it has exited (or is a zombie nobody reaped yet)."""
    try:
        fields = stat_fields(pid)
    except (OSError, IndexError):
        return None
    return None if fields[STATE] == "Z" else int(fields[START_TICKS])


def _descendants(root: int) -> list[tuple[int, int]]:
    """(pid, start time) of every live descendant of ``root``."""
    children: dict[int, list[int]] = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            parent = parent_pid(int(entry.name))
        except (OSError, IndexError, ValueError):
            continue
        children.setdefault(parent, []).append(int(entry.name))
    found, pending = [], list(children.get(root, []))
    while pending:
        pid = pending.pop()
        started = _start_time(pid)
        if started is not None:
            found.append((pid, started))
        pending.extend(children.get(pid, []))
    return found


def process_alive(pid: int, started: int | None = None) -> bool:
    """True while ``pid`` runs (and, given ``started``, is still the same process)."""
    now = _start_time(pid)
    return now is not None and (started is None or now == started)


@dataclass
class _Daemon:
    name: str
    process: subprocess.Popen
    log_path: Path

    @property
    def pid(self) -> int:
        return self.process.pid

    def alive(self) -> bool:
        return self.process.poll() is None


class StandaloneCluster:
    """A master on 127.0.0.1 and one single-core worker per address in ``workers``.

    Use as a context manager: entering starts the daemons and waits until every worker has
    registered with the master; leaving stops them (SIGTERM, then SIGKILL after a grace period)
    and any process they left behind. Logs go to ``<directory>/master.log`` and
    ``<directory>/worker-<address>.log``; executors' stdout and stderr are under
    ``<directory>/work-<address>/<app id>/<executor id>/``. With ``python_log_level``, the executors'
    Python processes log at that level there, each line with its pid (``python_logging``).
    """

    def __init__(self, directory: str | os.PathLike, workers: tuple[str, ...] = ("127.0.0.2", "127.0.0.3"),
                 cores_per_worker: int = 1, memory_per_worker: str = "1g", start_timeout: float = 180.0,
                 python_log_level: str | None = None):
        self.directory = Path(directory)
        self.workers = tuple(workers)
        self.cores_per_worker = cores_per_worker
        self.memory_per_worker = memory_per_worker
        self.start_timeout = start_timeout
        self.python_log_level = python_log_level
        self.master_port: int | None = None
        self.master_ui_port: int | None = None
        self._daemons: list[_Daemon] = []

    @property
    def master_url(self) -> str:
        return f"spark://{MASTER_HOST}:{self.master_port}"

    @property
    def master_ui_url(self) -> str:
        return f"http://{MASTER_HOST}:{self.master_ui_port}"

    def work_dir(self, address: str) -> Path:
        return self.directory / f"work-{address}"

    def __enter__(self) -> "StandaloneCluster":
        try:
            self.start()
        except BaseException:
            self.stop()
            raise
        return self

    def __exit__(self, *exc_info) -> None:
        self.stop()

    def start(self) -> None:
        self.directory.mkdir(parents=True, exist_ok=True)
        (self.directory / "conf").mkdir(exist_ok=True)  # an empty SPARK_CONF_DIR: nothing from the machine
        self.master_port, self.master_ui_port, *worker_ui_ports = free_ports(2 + len(self.workers))
        began = time.monotonic()
        deadline = began + self.start_timeout
        master = self._launch("master", MASTER_HOST, [
            "org.apache.spark.deploy.master.Master", "--host", MASTER_HOST,
            "--port", str(self.master_port), "--webui-port", str(self.master_ui_port)],
            # Its REST server for submissions listens on a fixed port (6066) that nothing here uses.
            SPARK_MASTER_OPTS="-Dspark.master.rest.enabled=false")
        self._wait(lambda: (self.state() or {}).get("status") == "ALIVE", deadline, [master],
                   f"the master at {self.master_url} to be ALIVE")
        workers = []
        for address, ui_port in zip(self.workers, worker_ui_ports):
            work_dir = self.work_dir(address)
            work_dir.mkdir(parents=True, exist_ok=True)
            local_dir = self.directory / f"local-{address}"
            local_dir.mkdir(parents=True, exist_ok=True)
            workers.append(self._launch(f"worker-{address}", address, [
                "org.apache.spark.deploy.worker.Worker", "--host", address,
                "--cores", str(self.cores_per_worker), "--memory", self.memory_per_worker,
                "--webui-port", str(ui_port), "--work-dir", str(work_dir), self.master_url],
                SPARK_LOCAL_DIRS=str(local_dir), SPARK_WORKER_DIR=str(work_dir)))
        self._wait(lambda: set(self.workers) <= {w["host"] for w in self.alive_workers()}, deadline,
                   [master, *workers], f"workers {', '.join(self.workers)} to register with {self.master_url}")
        log.info("standalone cluster up in %.0f s: master %s (UI %s), workers %s", time.monotonic() - began,
                 self.master_url, self.master_ui_url, ", ".join(f"{d.name} pid {d.pid}" for d in workers))

    def state(self) -> dict | None:
        """The master's state as its web UI reports it (``/json/``), or None if it does not answer."""
        try:
            with urllib.request.urlopen(f"{self.master_ui_url}/json/", timeout=5) as response:
                return json.load(response)
        except (OSError, ValueError, urllib.error.URLError):
            return None

    def alive_workers(self) -> list[dict]:
        return [w for w in (self.state() or {}).get("workers", []) if w.get("state") == "ALIVE"]

    def stop(self, grace: float = 30.0) -> None:
        """SIGTERM the workers (their executors go with them), then the master; SIGKILL whatever
        of them, or of the processes they started, is still alive after ``grace`` seconds."""
        if not self._daemons:
            return
        left_behind = [child for daemon in self._daemons if daemon.alive() for child in _descendants(daemon.pid)]
        workers = [d for d in self._daemons if d.name != "master"]
        for daemons in (workers, [d for d in self._daemons if d.name == "master"]):
            for daemon in daemons:
                if daemon.alive():
                    daemon.process.send_signal(signal.SIGTERM)
            deadline = time.monotonic() + grace
            for daemon in daemons:
                try:
                    daemon.process.wait(max(0.0, deadline - time.monotonic()))
                except subprocess.TimeoutExpired:
                    log.warning("%s (pid %d) ignored SIGTERM for %.0f s; SIGKILL", daemon.name, daemon.pid, grace)
                    daemon.process.kill()
                    daemon.process.wait(30)
        for pid, started in left_behind:  # an executor or Python worker its daemon did not end
            if process_alive(pid, started):
                log.warning("pid %d, started by the standalone cluster, outlived it; SIGKILL", pid)
                try:
                    os.kill(pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
        self._daemons = []
        log.info("standalone cluster stopped")

    def _launch(self, name: str, address: str, arguments: list[str], **extra_env: str) -> _Daemon:
        home = spark_home()
        env = {**os.environ, "SPARK_HOME": str(home), "SPARK_CONF_DIR": str(self.directory / "conf"),
               "SPARK_LOCAL_IP": address, **extra_env}
        for inherited in ("SPARK_LOCAL_DIRS", "SPARK_WORKER_DIR"):
            if inherited not in extra_env:
                env.pop(inherited, None)
        if self.python_log_level:  # executors inherit a worker's environment, and their Python workers too
            env = python_logging.environment(self.python_log_level, env)
        log_path = self.directory / f"{name}.log"
        with open(log_path, "ab") as log_file:
            process = start_dying_with_parent([str(home / "bin" / "spark-class"), *arguments], env=env,
                                              stdout=log_file, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                              start_new_session=True)
        daemon = _Daemon(name, process, log_path)
        self._daemons.append(daemon)
        log.info("%s: pid %d on %s, log %s", name, process.pid, address, log_path)
        return daemon

    def _wait(self, condition, deadline: float, daemons: list[_Daemon], what: str) -> None:
        while not condition():
            for daemon in daemons:
                if not daemon.alive():
                    raise StandaloneClusterError(
                        f"{daemon.name} exited with code {daemon.process.returncode} while waiting for {what}; "
                        f"its log is {daemon.log_path}. Last lines:\n{log_tail(daemon.log_path)}")
            if time.monotonic() > deadline:
                logs = ", ".join(str(d.log_path) for d in daemons)
                raise StandaloneClusterError(f"timed out after {self.start_timeout:.0f} s waiting for {what}; "
                                             f"logs: {logs}. Last lines of {daemons[-1].log_path}:\n"
                                             f"{log_tail(daemons[-1].log_path)}")
            time.sleep(0.5)


def ui_conf() -> dict[str, str]:
    """Session settings for the driver's UI and its REST API, which ``task_attempts`` reads, on a
    port free now (the local sessions run without a UI)."""
    (port,) = free_ports(1)
    return {"spark.ui.enabled": "true", "spark.ui.port": str(port)}


@dataclass(frozen=True)
class TaskAttempt:
    stage_id: int
    stage_attempt: int
    task_id: int  # TaskContext.taskAttemptId()
    index: int  # the task's index in its stage: for a write stage, TaskContext.partitionId()
    attempt: int  # TaskContext.attemptNumber()
    executor_id: str
    host: str
    status: str  # RUNNING, SUCCESS, FAILED, KILLED
    speculative: bool


def task_attempts(spark) -> list[TaskAttempt]:
    """Every task attempt of the session's application, from the driver's REST API
    (``/api/v1/applications/<app id>/stages?details=true``)."""
    context = spark.sparkContext
    stages = _ui_json(f"{context.uiWebUrl}/api/v1/applications/{context.applicationId}/stages?details=true")
    return sorted(
        (TaskAttempt(stage["stageId"], stage["attemptId"], task["taskId"], task["index"], task["attempt"],
                     task["executorId"], task["host"], task["status"], bool(task.get("speculative")))
         for stage in stages for task in (stage.get("tasks") or {}).values()),
        key=lambda t: t.task_id)


def _ui_json(url: str, attempts: int = 3):
    """The JSON a driver's UI answers at ``url``. Its Jetty gives up writing a response that has
    been idle for 8 s and ends it short, which a loaded machine can cause: a short answer is asked
    again."""
    for attempt in range(1, attempts + 1):
        try:
            with urllib.request.urlopen(url, timeout=30) as response:
                return json.load(response)
        except (json.JSONDecodeError, http.client.IncompleteRead) as exc:
            if attempt == attempts:
                raise
            log.warning("the driver's UI answered %s short (%s): asking again", url, exc)


def speculative_attempts(spark) -> list[TaskAttempt]:
    return [t for t in task_attempts(spark) if t.speculative]


@dataclass(frozen=True)
class ExecutorLife:
    executor_id: str
    host: str
    cores: int
    added_ms: int
    removed_ms: int | None  # None: still alive
    removal_reason: str


def executor_lives(spark) -> list[ExecutorLife]:
    """Every executor the session's application has had, live and removed, from the driver's REST
    API (``/api/v1/applications/<app id>/allexecutors``), the driver left out."""
    context = spark.sparkContext
    executors = _ui_json(f"{context.uiWebUrl}/api/v1/applications/{context.applicationId}/allexecutors")
    return [ExecutorLife(e["id"], e["hostPort"].rpartition(":")[0], e["totalCores"], _epoch_ms(e["addTime"]),
                         _epoch_ms(e["removeTime"]) if e.get("removeTime") else None, e.get("removeReason", ""))
            for e in executors if e["id"] != "driver"]


def peak_cores_at_once(lives: list[ExecutorLife]) -> int:
    """The most task slots the executors in ``lives`` had at one time (their lifetimes overlapped)."""
    events = sorted([(life.added_ms, life.cores) for life in lives]
                    + [(life.removed_ms, -life.cores) for life in lives if life.removed_ms is not None],
                    key=lambda event: (event[0], event[1]))  # a removal before an addition at the same ms
    peak = running = 0
    for _, change in events:
        running += change
        peak = max(peak, running)
    return peak


def _epoch_ms(text: str) -> int:
    """Spark's REST API's dates (``2026-12-07T07:10:02.123GMT``) in milliseconds since the epoch."""
    from datetime import datetime, timezone

    parsed = datetime.strptime(text.removesuffix("GMT"), "%Y-%m-%dT%H:%M:%S.%f")
    return int(parsed.replace(tzinfo=timezone.utc).timestamp() * 1000)
