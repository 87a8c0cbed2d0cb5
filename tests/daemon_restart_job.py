"""A job cancelled while its task waits for a new Python worker from PySpark's daemon, beside a
job whose task is running in a worker of that daemon (test_spark_ground).

Spark (PythonWorkerFactory.createThroughDaemon) waits for the daemon's answer in a selector; a
cancelled job's task thread is interrupted, the selector returns at once, and Spark takes that for
a daemon that stopped answering: it logs "Lost connection to Python daemon, attempting to restart"
and restarts the daemon, whose shutdown hangs up on every worker it forked. The running job's task
loses its worker.

Two rounds in one local[2] session, the daemon's fork held back by slow_fork_daemon.py: first the
waiting job is let through (the control), then it is cancelled. Prints one line,
``outcomes {JSON}``: each job's error by round and name (null: it ran to its end).

Usage: python daemon_restart_job.py WORK_DIRECTORY
"""
import json
import os
import sys
import threading
from functools import partial
from pathlib import Path

from pyspark_eos.testing.local_spark import local_spark_session
from tests.kafka_tools import wait_until

ROOT = Path(__file__).resolve().parent.parent
DEADLINE_S = 120.0


def wait_for(path: Path) -> None:
    wait_until(path.exists, DEADLINE_S, str(path), interval=0.05)


def hold(directory: str, value: int) -> int:
    """A task that runs until its round's directory has a ``release`` file."""
    (Path(directory) / "running").touch()
    wait_for(Path(directory) / "release")
    return value


def outcome(outcomes: dict, name: str, job) -> None:
    try:
        job()
        outcomes[name] = None
    except Exception as error:  # noqa: BLE001 - what the round reports
        outcomes[name] = f"{type(error).__name__}: {error}"[:3000]


def one_round(sc, directory: Path, marker: Path, cancel: bool) -> dict:
    directory.mkdir()
    outcomes: dict = {}
    running = threading.Thread(target=outcome, args=(outcomes, "running", lambda: sc.parallelize(
        [0], 1).map(partial(hold, str(directory))).collect()))
    running.start()
    wait_for(directory / "running")
    marker.touch()  # the next worker's fork waits

    def waiting_job():
        sc.setJobGroup(directory.name, "a job whose task waits for a new Python worker", interruptOnCancel=True)
        sc.parallelize([1], 1).map(lambda value: value).collect()

    waiting = threading.Thread(target=outcome, args=(outcomes, "waiting", waiting_job))
    waiting.start()
    wait_for(marker.with_name(marker.name + ".asked"))
    if cancel:
        sc.cancelJobGroup(directory.name)
        waiting.join(DEADLINE_S)
    marker.unlink()
    marker.with_name(marker.name + ".asked").unlink()
    waiting.join(DEADLINE_S)
    (directory / "release").touch()
    running.join(DEADLINE_S)
    return outcomes


def main(work: str) -> None:
    work_directory = Path(work)
    marker = work_directory / "slow-fork"
    os.environ["SLOW_FORK_MARKER"] = str(marker)
    os.environ["PYTHONPATH"] = os.pathsep.join(p for p in (str(ROOT), os.environ.get("PYTHONPATH", "")) if p)
    # PySpark's own interpreter start: the daemon module below runs as Spark starts it.
    os.environ["PYSPARK_PYTHON"] = os.environ["PYSPARK_DRIVER_PYTHON"] = sys.executable
    # No worker kept for reuse: each round's tasks ask the daemon for theirs.
    spark = local_spark_session("local[2]", app_name="eos-kafka daemon restart",
                                conf={"spark.python.daemon.module": "tests.slow_fork_daemon",
                                      "spark.python.worker.reuse": "false"})
    outcomes = {"let through": one_round(spark.sparkContext, work_directory / "let-through", marker, cancel=False),
                "cancelled": one_round(spark.sparkContext, work_directory / "cancelled", marker, cancel=True)}
    print("outcomes", json.dumps(outcomes), flush=True)
    spark.stop()


if __name__ == "__main__":
    main(*sys.argv[1:])
