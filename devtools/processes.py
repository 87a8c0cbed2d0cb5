"""Spark's processes under a root process, read from /proc: the memory and Kafka clients of its
Python processes while a benchmark or the chaos campaign runs, and its executor JVMs (which the
chaos campaign kills).

Every Python process under the Spark JVM is sampled from /proc every few seconds: its resident
memory, and how many librdkafka clients it holds (each producer, consumer or admin client runs
one thread named ``rdk:main``). A worker whose memory or clients grow with the batches shows as
growth between the first samples after the warm-up and the last ones.
"""
from __future__ import annotations

import os
import signal
import statistics
import subprocess
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

from pyspark_eos.protocol.process_stat import PROC, parent_pid


def _tasks(pid: int) -> list:
    """The process's threads; none once it has exited (its /proc entry goes while it is listed)."""
    try:
        return list((PROC / str(pid) / "task").glob("*"))
    except OSError:
        return []


def _children(pid: int) -> list[int]:
    found = []
    for task in _tasks(pid):
        try:
            found += [int(c) for c in (task / "children").read_text().split()]
        except OSError:
            continue
    return found


FORK_SERVER = b"\0pyspark_eos.workers.fork_server\0"


def fork_servers() -> list[int]:
    """Pids of pyspark-eos-python's fork servers (pyspark_eos.workers): the Python processes they
    fork for a Spark JVM are the server's children, not the JVM's, and keep its command line."""
    parents = {}
    for entry in PROC.iterdir():
        try:
            if entry.name.isdigit() and FORK_SERVER in (entry / "cmdline").read_bytes():
                parents[int(entry.name)] = parent_pid(int(entry.name))
        except OSError:
            continue
    return [pid for pid, parent in parents.items() if parent not in parents]


def python_descendants(root: int) -> dict[int, str]:
    """pid -> role of every Python process under ``root``: the module it runs, or ``worker`` for
    a process forked by PySpark's daemon (which runs the tasks); and those the machine's fork
    servers forked (``forked``, their workers ``worker``: a benchmark runs one Spark application
    at a time)."""
    found: dict[int, str] = {}
    for server in fork_servers():
        for child in _children(server):
            found[child] = "forked"
            found.update(dict.fromkeys(descendants(child), "worker"))
    todo = [root]
    while todo:
        parent = todo.pop()
        for child in _children(parent):
            todo.append(child)
            try:
                argv = (PROC / str(child) / "cmdline").read_bytes().split(b"\0")
            except OSError:
                continue
            if argv and "python" in Path(argv[0].decode(errors="replace")).name:
                module = (argv[argv.index(b"-m") + 1] if b"-m" in argv[:-1] else argv[-1]).decode(errors="replace")
                found[child] = "worker" if found.get(parent) == "pyspark.daemon" else module
    return found


def descendants(root: int) -> list[int]:
    found, todo = [], [root]
    while todo:
        children = _children(todo.pop())
        found += children
        todo += children
    return found


def executor_jvms(root: int) -> list[int]:
    """Pids of the Spark executor JVMs under ``root`` (local-cluster mode starts them as children
    of the driver JVM's workers)."""
    found = []
    for pid in descendants(root):
        try:
            argv = (PROC / str(pid) / "cmdline").read_bytes().split(b"\0")
        except OSError:
            continue
        if b"org.apache.spark.executor.CoarseGrainedExecutorBackend" in argv:
            found.append(pid)
    return found


def _status_kb(pid: int, field_name: str) -> int | None:
    try:
        for line in (PROC / str(pid) / "status").read_text().splitlines():
            if line.startswith(field_name + ":"):
                return int(line.split()[1])
    except OSError:
        return None
    return None


def kafka_clients(pid: int) -> int:
    count = 0
    for task in _tasks(pid):
        try:
            count += (task / "comm").read_text().strip() == "rdk:main"
        except OSError:
            continue
    return count


@dataclass
class WorkerTrace:
    pid: int
    role: str
    rss_kb: list[tuple[float, int]] = field(default_factory=list)
    clients: list[int] = field(default_factory=list)
    peak_kb: int = 0

    def summary(self, warm_up_fraction: float) -> dict:
        values = [kb for _, kb in self.rss_kb]
        skip = int(len(values) * warm_up_fraction)
        steady = values[skip:] or values
        third = max(1, len(steady) // 3)
        return {"pid": self.pid, "role": self.role, "samples": len(values),
                "peak_rss_mib": round(self.peak_kb / 1024, 1),
                "rss_mib_early": round(statistics.median(steady[:third]) / 1024, 1),
                "rss_mib_late": round(statistics.median(steady[-third:]) / 1024, 1),
                "kafka_clients_max": max(self.clients, default=0),
                "kafka_clients_late": self.clients[-1] if self.clients else 0}


class WorkerSampler:
    """Samples the Python processes under ``jvm_pid`` in a thread until ``stop()``."""

    def __init__(self, jvm_pid: int, interval_s: float = 2.0):
        self.jvm_pid = jvm_pid
        self.interval_s = interval_s
        self.traces: dict[int, WorkerTrace] = {}
        self._stopped = threading.Event()
        self._thread = threading.Thread(target=self._run, name="worker-sampler", daemon=True)

    def __enter__(self) -> "WorkerSampler":
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._stopped.set()
        self._thread.join()

    def _run(self) -> None:
        started = time.monotonic()
        while not self._stopped.is_set():
            self.sample(time.monotonic() - started)
            self._stopped.wait(self.interval_s)

    def sample(self, at: float) -> None:
        for pid, role in python_descendants(self.jvm_pid).items():
            rss, peak = _status_kb(pid, "VmRSS"), _status_kb(pid, "VmHWM")
            if rss is None:
                continue
            trace = self.traces.setdefault(pid, WorkerTrace(pid, role))
            trace.rss_kb.append((at, rss))
            trace.clients.append(kafka_clients(pid))
            trace.peak_kb = max(trace.peak_kb, peak or 0)

    def summary(self, warm_up_fraction: float = 0.2) -> list[dict]:
        """Per process that lived through at least three samples: peak, early and late memory, clients."""
        return [t.summary(warm_up_fraction) for t in self.traces.values() if len(t.rss_kb) >= 3]


def kill_session(process: subprocess.Popen) -> None:
    """SIGKILL a process started in a session of its own, with its process group (a driver and what
    it started there), and reap it."""
    try:
        os.killpg(process.pid, signal.SIGKILL)
    except ProcessLookupError:
        pass
    process.wait(60)
