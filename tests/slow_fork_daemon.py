"""PySpark's daemon, whose fork of a new worker waits while the file ``SLOW_FORK_MARKER`` names
exists (daemon_restart_job.py): a task's request for a worker then stays unanswered for as long as
a test needs. The daemon touches that name plus ``.asked`` once such a request has come in."""
import os
import time
from pathlib import Path

from pyspark import daemon

_fork = os.fork


def _slow_fork() -> int:
    marker = Path(os.environ["SLOW_FORK_MARKER"])
    if marker.exists():
        marker.with_name(marker.name + ".asked").touch()
        while marker.exists():
            time.sleep(0.05)
    return _fork()


if __name__ == "__main__":
    os.fork = _slow_fork
    daemon.manager()
