"""A driver killed with its process group while its write tasks are inside their transactions:
the restarted query must leave nothing open for the broker's transaction timeout to end, since
until then a read_committed reader of the output sees nothing past the first open transaction.

The pipeline is an update-mode aggregation written through foreachBatch (dead_driver_job.py):
each batch's ``df.write.format("eos-kafka")`` commits its tasks' progress records. Five queries
run side by side in one driver, each with both write tasks of a batch stopped at one moment of
their transactions: before the first record, with every record produced, after the stable read
of their progress (claimed), with the progress sent, after the commit. Once all ten are there the
driver is killed with its process group; the workers die with it. The restarted driver runs on
one core (``local[1]``): it takes only the first slot's transactional id of each query, so the
second slot's transaction, left open by the dead run, is ended by nothing but the protocol. The
output is read right after the last run: every window's rows once, its last count right, and no
transaction left open (each output partition's last stable offset at its high watermark).

Before claims came first a task delivered its records, then claimed: killed in between, it left
an open transaction no later attempt knew of. ``CLAIM_FIRST_OFF`` switches the order back: the
control (a release test) shows the output held behind that transaction.
"""
from __future__ import annotations

import json
import logging
import os
import signal
import subprocess
import sys
import time
import uuid
from collections import Counter
from datetime import datetime, timedelta, timezone
from pathlib import Path

import pytest

from pyspark_eos.protocol.process_stat import running
from pyspark_eos.testing import fault_injection as faults
from pyspark_eos.testing.embedded_kafka import start_dying_with_parent
from pyspark_eos.testing.output_check import held_partitions, read_committed

from .dead_driver_job import TRANSACTION_TIMEOUT_MS
from .kafka_tools import create_topic, unique_name, wait_until

JOB = Path(__file__).resolve().parent / "dead_driver_job.py"
POINTS = (faults.STALL_BEFORE_PRODUCE, faults.STALL_RECORDS_PRODUCED, faults.STALL_AFTER_STABLE_READ,
          faults.STALL_BEFORE_COMMIT, faults.STALL_AFTER_COMMIT)
CRASHED_BATCH = 1
FILES, PER_FILE, KEYS = 4, 24, 8
START = datetime(2026, 1, 1, tzinfo=timezone.utc)
OUTPUT_PARTITIONS = 2
pytestmark = pytest.mark.xdist_group("dead-driver")


class Query:
    """One query of the job: its input files, checkpoint, output topic, and the moment its tasks stop at."""

    def __init__(self, bootstrap: str, directory: Path, point: str):
        self.bootstrap, self.point, self.id = bootstrap, point, str(uuid.uuid4())
        self.input = directory / "input"
        self.input.mkdir(parents=True)
        self.events = [(f"k{n % KEYS}", START + timedelta(seconds=n)) for n in range(FILES * PER_FILE)]
        for number in range(FILES):
            lines = [json.dumps({"key": key, "ts": ts.isoformat()})
                     for key, ts in self.events[number * PER_FILE:(number + 1) * PER_FILE]]
            path = self.input / f"part-{number}.json"
            path.write_text("\n".join(lines) + "\n")
            os.utime(path, (START.timestamp() + number,) * 2)  # the file source's order: event time's
        self.topic = create_topic(bootstrap, unique_name("dead-driver-out"), partitions=OUTPUT_PARTITIONS)
        self.checkpoint, self.prefix = directory / "checkpoint", unique_name("dead-driver")

    def spec(self, armed: bool) -> dict:
        return {"id": self.id, "input": str(self.input), "checkpoint": str(self.checkpoint), "topic": self.topic,
                "prefix": self.prefix, "point": self.point if armed else None, "from_batch": CRASHED_BATCH}

    def last_counts(self) -> dict[str, int]:
        counts = Counter()
        for key, ts in self.events:
            counts[f"{key}@{(ts - timedelta(seconds=ts.second % 10)).strftime('%Y-%m-%d %H:%M:%S')}"] += 1
        return dict(counts)

    def problems(self) -> list[str]:
        """What is wrong with the output right now: rows twice, wrong last counts, open transactions."""
        rows = [(r.key.decode(), int(r.value.decode())) for r in
                read_committed(self.bootstrap, self.topic, OUTPUT_PARTITIONS)]
        last = dict(rows)  # each partition in offset order: a window's rows share one
        wrong = {key: (last.get(key), count) for key, count in self.last_counts().items() if last.get(key) != count}
        held = held_partitions(self.bootstrap, self.topic, OUTPUT_PARTITIONS)
        twice = [row for row, n in Counter(rows).items() if n > 1]
        return ([f"{len(twice)} row(s) twice"] if twice else []) + \
            ([f"{len(wrong)} window(s) with a wrong last count (seen, expected): {dict(list(wrong.items())[:3])}"]
             if wrong else []) + ([f"partition(s) held by an open transaction: {held}"] if held else [])


class Driver:
    def __init__(self, bootstrap: str, queries: list[Query], directory: Path, name: str, master: str, armed: bool,
                 switches: list[str]):
        self.reports, self.faults, self.log = (directory / f"{name}-{part}" for part in ("reports", "faults", "log"))
        self.reports.mkdir()
        self.faults.mkdir()
        spec = {"master": master, "faults_dir": str(self.faults), "reports": str(self.reports),
                "switches": switches, "queries": [q.spec(armed) for q in queries]}
        with open(self.log, "wb") as log:
            self.process = start_dying_with_parent([sys.executable, str(JOB), bootstrap, json.dumps(spec)], stdout=log,
                                                   stderr=subprocess.STDOUT, start_new_session=True)

    def kill_once_stopped_at(self, points: list[str]) -> None:
        """Wait until both write tasks of each point's query stopped there, then kill the driver with its
        process group, and wait until the stopped workers are gone too."""
        def stopped():
            assert self.process.poll() is None, f"the driver ended before its tasks stopped: {self.tail()}"
            return all((self.reports / f"{point}.stalled").exists() for point in points)

        wait_until(stopped, 300, f"the write tasks to stop at {points} ({self.log})")
        # The faults' gatherings name every worker that stopped (fault_injection._gather).
        workers = {int(path.name) for point in points
                   for path in (self.faults / "eos-kafka-faults" / f"{point}.arrived").iterdir()}
        os.killpg(self.process.pid, signal.SIGKILL)
        self.process.wait(60)
        wait_until(lambda: not any(running(pid) for pid in workers), 60, f"the stopped workers {workers} to die")

    def finish(self) -> None:
        assert self.process.wait(600) == 0, f"the restarted driver failed: {self.tail()}"

    def tail(self) -> str:
        return self.log.read_text(errors="replace")[-4000:]


def run_through_dead_drivers(kafka, tmp_path: Path, crashes: int, switches: list[str]) -> dict[str, list[str]]:
    """Each query's problems (Query.problems), read right after the restarted driver ended."""
    queries = [Query(kafka.bootstrap_servers, tmp_path / point, point) for point in POINTS]
    for crash in range(crashes):
        driver = Driver(kafka.bootstrap_servers, queries, tmp_path, f"crashed-{crash}", "local[12]", True, switches)
        driver.kill_once_stopped_at(list(POINTS))
    killed = time.monotonic()
    Driver(kafka.bootstrap_servers, queries, tmp_path, "restarted", "local[1]", False, switches).finish()
    problems = {q.point: q.problems() for q in queries}
    logging.getLogger(__name__).info("right after the restart: %s", problems)
    # Read before the broker's timeout could have ended what the dead drivers left open.
    assert time.monotonic() - killed < TRANSACTION_TIMEOUT_MS / 1000 / 2
    return problems


# make test runs the second (a kill in a batch, and one in its replay, the restart on one core after
# the second); the first alone, with the restart on one core after it, runs before a release.
@pytest.mark.parametrize("crashes", [pytest.param(1, marks=pytest.mark.release, id="killed-in-a-batch"),
                                     pytest.param(2, id="killed-again-in-its-replay")])
def test_a_restarted_query_leaves_no_transaction_of_its_dead_drivers_open(kafka, tmp_path, crashes):
    problems = run_through_dead_drivers(kafka, tmp_path, crashes, [])
    assert not any(problems.values()), problems


@pytest.mark.release
def test_claiming_after_the_records_leaves_a_dead_drivers_transaction_open_and_the_output_held(kafka, tmp_path):
    """The control: CLAIM_FIRST_OFF, the order before claims came first."""
    problems = run_through_dead_drivers(kafka, tmp_path, 1, [faults.CLAIM_FIRST_OFF])
    assert any("open transaction" in p for p in problems[faults.STALL_RECORDS_PRODUCED]), problems
    # Claimed before they stopped, the others were fenced by the replay in that order too.
    assert not any(problems[point] for point in POINTS if point != faults.STALL_RECORDS_PRODUCED), problems
