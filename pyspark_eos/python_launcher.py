"""``pyspark-eos-python``: the Python that Spark's Python processes start warm with. Set it as
``spark.pyspark.python`` (docs/deployment.md).

Spark runs ``<python> -m <module> ...`` for each of its Python processes: the daemons of task
workers and of data source planners, a streaming source's runner. This command hands each such
start to a fork server (``pyspark_eos.workers``) that has imported PySpark, pandas, pyarrow,
confluent-kafka and eos-kafka already, so none of them imports those again. Anything else, and a
start no server can serve (a runtime directory that is not the user's alone, a server that fails),
runs this environment's own ``python`` with the same arguments, as Spark would have.
"""
from __future__ import annotations

import os
import signal
import sys

# Spark's own entry points; a user's `-m` module runs as usual.
_FORKED_PREFIX = "pyspark."


def main() -> int:
    args = sys.argv[1:]
    if len(args) >= 2 and args[0] == "-m" and args[1].startswith(_FORKED_PREFIX):
        from .workers.handoff import run_forked
        status = run_forked(args[1], args[2:])
        if status is not None:
            return _exit_as(status)
    os.execv(sys.executable, [sys.executable, *args])
    return 1  # not reached: execv replaced this process


def _exit_as(status: int) -> int:
    """The forked process's exit status; a child killed by a signal has its stand-in killed by the
    same signal, so that Spark sees what it would have seen."""
    if status < 0:
        if -status not in (signal.SIGKILL, signal.SIGSTOP):
            signal.signal(-status, signal.SIG_DFL)  # the stand-in's own handler passes signals on
        os.kill(os.getpid(), -status)
    return status


if __name__ == "__main__":
    sys.exit(main())
