"""The pipeline under test, in a driver process of its own so that the campaign can kill it.

``python -m devtools.chaos.query`` runs eos-kafka -> transformation -> eos-kafka on Spark
in local-cluster mode (two executor JVMs) until SIGTERM, or until the query fails. The
transformation appends each record's input offset to its value, so the verifiers can check that
the output carries the record the source read. ``QueryInstance`` is the campaign's handle on one
such process: started in a session of its own, so that killing the driver (``kill()``) takes its
executors and Python workers with it, as losing the driver's machine would.
"""
from __future__ import annotations

import argparse
import logging
import signal
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

from pyspark_eos.testing.embedded_kafka import start_dying_with_parent

from ..processes import kill_session
from ..python_logging import environment

log = logging.getLogger(__name__)

# The driver declares a silent executor lost after 8 s (Spark's default is 120 s), so that a
# stalled executor's task is retried elsewhere while the stalled attempt still lives: a zombie.
EXECUTOR_LOSS_TIMEOUT_S = 8
SPARK_CONF = {
    "spark.executor.heartbeatInterval": "1s",
    "spark.storage.blockManagerHeartbeatTimeoutMs": str(EXECUTOR_LOSS_TIMEOUT_S * 1000),
    "spark.network.timeoutInterval": "1s",
    # Faults come one after another: a task may fail a few times before a batch gets through.
    "spark.task.maxFailures": "8",
}
MAX_OFFSETS_PER_TRIGGER = 3000
# The driver's log line once its query has started (Spark's session and executors are up): what a
# restart fault counts as the new driver's start, its own time, apart from the query's recovery.
STARTED = "query started:"


@dataclass(frozen=True)
class QuerySpec:
    bootstrap: str
    topics: tuple[str, ...]
    output: str
    group: str
    transactional_id_prefix: str
    transaction_timeout_ms: int

    def arguments(self) -> list[str]:
        return ["--bootstrap", self.bootstrap, "--topics", ",".join(self.topics), "--output", self.output,
                "--group", self.group, "--transactional-id-prefix", self.transactional_id_prefix,
                "--transaction-timeout-ms", str(self.transaction_timeout_ms)]


class QueryInstance:
    """One driver process of the pipeline; its log is ``<directory>/driver-<n>.log``."""

    def __init__(self, spec: QuerySpec, checkpoint: Path, starting_offsets: str, directory: Path, number: int):
        self.checkpoint = checkpoint.resolve()
        self.log_path = directory / f"driver-{number}.log"
        # The driver works in a directory of its own, which its JVM's Python processes work in
        # too (forked by a fork server, they are no descendants of it): a network fault finds the
        # driver's connections there (faults.NETWORK_SCOPES), as an executor's in its own.
        self.working_directory = (directory / f"driver-{number}").resolve()
        self.working_directory.mkdir(parents=True, exist_ok=True)
        command = [sys.executable, "-m", __name__, *spec.arguments(), "--checkpoint", str(self.checkpoint),
                   "--starting-offsets", starting_offsets]
        with open(self.log_path, "ab") as log_file:
            # A session of its own (kill() takes the whole group), dying with the campaign.
            self.process = start_dying_with_parent(command, stdout=log_file, stderr=subprocess.STDOUT,
                                                   stdin=subprocess.DEVNULL, start_new_session=True,
                                                   cwd=self.working_directory, env=environment("INFO"))
        log.info("query driver %d started: pid %d, checkpoint %s, startingOffsets=%s, log %s",
                 number, self.process.pid, checkpoint, starting_offsets, self.log_path)

    @property
    def pid(self) -> int:
        return self.process.pid

    def alive(self) -> bool:
        return self.process.poll() is None

    def kill(self) -> None:
        """SIGKILL the driver and everything it started (executors, Python workers)."""
        kill_session(self.process)

    def stop(self, grace_s: float = 120.0) -> int | None:
        """Stop the query cleanly (SIGTERM); kill it after ``grace_s``. Its exit code."""
        if self.alive():
            self.process.send_signal(signal.SIGTERM)
            try:
                self.process.wait(grace_s)
            except subprocess.TimeoutExpired:
                log.warning("query driver %d did not stop in %.0f s; killing it", self.pid, grace_s)
        self.kill()
        return self.process.returncode

    def wait_started(self, timeout_s: float = 180.0) -> float | None:
        """Seconds until this driver's query has started (its log says so), from now; None if the
        driver died first or it did not start in ``timeout_s``."""
        waiting = time.monotonic()
        while time.monotonic() - waiting < timeout_s and self.alive():
            if STARTED in self.log_path.read_text(errors="replace"):
                return round(time.monotonic() - waiting, 1)
            time.sleep(0.1)
        return None

    def wait_exit(self, timeout_s: float) -> bool:
        try:
            self.process.wait(timeout_s)
            return True
        except subprocess.TimeoutExpired:
            return False


# Lines of a driver's log that say why its query ended: Spark's error and its causes, and the
# abort of a Python process (a failed assertion in librdkafka, a fatal Python error), which Spark
# itself reports only as an EOFException from that process.
_CAUSE_MARKERS = ("terminated with error", "Caused by:", "Assertion", "Fatal Python error", "query ended:")


def death_cause(log_path: Path, lines: int = 8) -> list[str]:
    """The last ``lines`` lines of a driver's log that say why its query ended."""
    try:
        text = log_path.read_text(errors="replace")
    except FileNotFoundError:
        return []
    return [line[:400] for line in text.splitlines() if any(marker in line for marker in _CAUSE_MARKERS)][-lines:]


def _run(args: argparse.Namespace) -> int:
    from pyspark_eos.testing.local_spark import LOCAL_CLUSTER, local_spark_session, wait_for_executors

    spark = local_spark_session(LOCAL_CLUSTER, app_name="eos-kafka chaos", conf=SPARK_CONF)
    wait_for_executors(spark, 2)
    frame = (spark.readStream.format("eos-kafka").option("kafka.bootstrap.servers", args.bootstrap)
             .option("subscribe", args.topics).option("kafka.group.id", args.group)
             .option("startingOffsets", args.starting_offsets)
             .option("maxOffsetsPerTrigger", str(MAX_OFFSETS_PER_TRIGGER)).load())
    transformed = frame.selectExpr("key", "cast(concat(cast(value as string), '|', cast(offset as string)) as binary) as value")
    query = (transformed.writeStream.format("eos-kafka").option("kafka.bootstrap.servers", args.bootstrap)
             .option("topic", args.output).option("kafka.group.id", args.group)
             .option("transactionalIdPrefix", args.transactional_id_prefix)
             .option("kafka.transaction.timeout.ms", str(args.transaction_timeout_ms))
             .option("checkpointLocation", args.checkpoint).trigger(processingTime="1 second").start())
    log.info("%s %s", STARTED, query.id)
    stopping = []
    signal.signal(signal.SIGTERM, lambda *_: stopping.append(True))
    while query.isActive and not stopping:
        time.sleep(0.5)
    if stopping:
        query.stop()
        log.info("query stopped on request")
        return 0
    log.error("query ended: %s", query.exception())
    return 2


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog=f"python -m {__name__}", description=__doc__.splitlines()[0])
    for name in ("bootstrap", "topics", "output", "group", "transactional-id-prefix", "checkpoint"):
        parser.add_argument(f"--{name}", required=True)
    parser.add_argument("--transaction-timeout-ms", type=int, required=True)
    parser.add_argument("--starting-offsets", default="earliest")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    return _run(args)


if __name__ == "__main__":
    sys.exit(main())
