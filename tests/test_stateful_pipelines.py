"""Stateful queries into eos-kafka under faults, the shapes side by side in one driver
(stateful_job.py): a write task killed right after its commit (retried), the driver killed once a
batch's output committed but before Spark's commit log (replayed on restart), and after the
restart a stalled attempt per query: its executor stops answering after the attempt read its
progress, is declared lost, and the task runs again elsewhere; the stalled attempt resumes once
the job has ended, a zombie that has passed its check. An independent read_committed consumer
checks the output against the ground truth: every result once, every aggregate right.

Controls, run both ways: written at-least-once (``run_through_faults(runs, tmp_path,
"at-least-once")``), every shape gets duplicates under the same faults; with attempt fencing off
(``"fencing-off"``), the zombies commit their records a second time."""
from __future__ import annotations

import json
import os
import subprocess
import sys
from collections import Counter
from datetime import datetime, timedelta, timezone
from pathlib import Path

from pyspark_eos.protocol.process_stat import running
from pyspark_eos.testing.fault_injection import STALL_AFTER_STABLE_READ, stall_reports

from .kafka_tools import create_topic, read_committed, unique_name, wait_until
from .spark_tools import logged_batches
from .stateful_job import KEYS, WINDOW_S

JOB = Path(__file__).resolve().parent / "stateful_job.py"
START = datetime(2026, 1, 1, tzinfo=timezone.utc)
PER_FILE = 20
FAULTS = ("kill-worker", "kill-driver")


class StatefulRun:
    # Four batches: the window query commits output from its third (its watermark closes windows
    # a batch late), and a batch after the replayed one is where an attempt stalls.
    def __init__(self, kafka, tmp_path: Path, shape: str, files: int = 4, topics: int = 1):
        self.bootstrap, self.shape = kafka.bootstrap_servers, shape
        self.input = tmp_path / "input"
        self.input.mkdir(parents=True)
        self.events = [{"id": n, "key": f"k{n % KEYS}", "ts": START + timedelta(seconds=n)}
                       for n in range(files * PER_FILE)]
        for number in range(files):
            batch = self.events[number * PER_FILE:][:PER_FILE]
            if shape == "dedup":  # each event twice, and the file before's last five once more
                batch = self.events[max(number * PER_FILE - 5, 0):number * PER_FILE] + batch + batch
            lines = [json.dumps({**e, "ts": e["ts"].isoformat()}) for e in batch]
            path = self.input / f"part-{number:03d}.json"
            path.write_text("\n".join(lines) + "\n")
            # The file source takes files in the order of their modification times: event time's order.
            os.utime(path, (START.timestamp() + number, START.timestamp() + number))
        self.topics = [create_topic(self.bootstrap, unique_name(f"{shape}-out"), partitions=2) for _ in range(topics)]
        self.checkpoint = tmp_path / "checkpoint"
        self.prefix = unique_name(shape)

    def spec(self) -> dict:
        return {"shape": self.shape, "input": str(self.input), "checkpoint": str(self.checkpoint),
                "prefix": self.prefix, "topics": self.topics}

    def batches(self, log: str) -> set[str]:
        return logged_batches(self.checkpoint, log)

    def records(self, topic: str) -> list[tuple[str, str | None]]:
        return [(r.key.decode(), None if r.value is None else r.value.decode())
                for r in read_committed(self.bootstrap, topic, partitions=2)]

    def window_counts(self) -> dict[str, int]:
        """The ground truth: each (key, window)'s count, keyed as the job writes it."""
        counts = Counter()
        for event in self.events:
            start = event["ts"] - timedelta(seconds=event["ts"].second % WINDOW_S)
            counts[f"{event['key']}@{start.strftime('%Y-%m-%d %H:%M:%S')}"] += 1
        return dict(counts)


def run_together(runs: list[StatefulRun], *faults: str) -> subprocess.CompletedProcess:
    """One driver, the runs' queries side by side."""
    command = [sys.executable, str(JOB), runs[0].bootstrap, json.dumps([run.spec() for run in runs]), *faults]
    return subprocess.run(command, capture_output=True, text=True, timeout=600)


def run_through_faults(runs: list[StatefulRun], tmp_path: Path, *options: str) -> None:
    """Each query: a write task killed after its commit, then the driver killed once every query had
    committed a batch in Kafka; then the driver restarted, to the end, with an attempt of each
    query stalled in a batch after the replayed one, and resumed once the driver has ended."""
    crashed = run_together(runs, *FAULTS, *options)
    assert crashed.returncode != 0 and "finished" not in crashed.stdout, crashed.stderr[-3000:]
    assert crashed.stderr.count("stall-after-commit, killing worker") == len(runs), "a worker kill did not happen"
    for run in runs:
        assert len(run.batches("offsets") - run.batches("commits")) == 1, f"{run.shape}: no batch between the logs"
    replayed = max(int(batch) for run in runs for batch in run.batches("offsets"))
    stalls = tmp_path / "stalls"
    stalls.mkdir()
    try:
        finished = run_together(runs, f"stall-attempts:{stalls}:{replayed + 1}", *options)
        assert finished.returncode == 0, finished.stderr[-4000:]
    finally:
        (stalls / "resume").touch()  # never leave a stalled worker behind
    stalled = stall_reports(STALL_AFTER_STABLE_READ, "stalled", stalls)
    assert len({report["query"] for report in stalled}) == len(runs), f"not every query had a stalled attempt: {stalled}"
    for report in stalled:
        wait_until(lambda: not running(report["pid"]), 120, f"the resumed attempt {report} to finish")
    assert len(stall_reports(STALL_AFTER_STABLE_READ, "resumed", stalls)) == len(runs), "a stalled attempt never resumed"


def assert_updates_once_and_last_counts_right(records: list[tuple[str, str]], truth: dict[str, int]) -> None:
    """Update mode writes each changed window's count every batch, as "<count>@<batch>"."""
    duplicates = [r for r, n in Counter(records).items() if n > 1]
    assert not duplicates, f"{len(duplicates)} update(s) written twice, e.g. {duplicates[:3]}"
    last: dict[str, tuple[int, int]] = {}
    for key, value in records:
        count, batch = map(int, value.split("@"))
        last[key] = max(last.get(key, (-1, 0)), (batch, count))
    assert {key: count for key, (_, count) in last.items()} == truth


def _once(values: list[str]) -> list[str]:
    duplicates = [v for v, n in Counter(values).items() if n > 1]
    assert not duplicates, f"{len(duplicates)} result(s) written twice, e.g. {duplicates[:3]}"
    return values


def check_updates(run: StatefulRun, records: list[tuple[str, str]]) -> None:
    for topic in run.topics:  # foreachBatch writes the batch into each of them
        assert_updates_once_and_last_counts_right(run.records(topic), run.window_counts())


def check_windows(run: StatefulRun, records: list[tuple[str, str]]) -> None:
    counts = dict(zip(_once([key for key, _ in records]), (int(value) for _, value in records)))
    truth = run.window_counts()
    assert all(counts[key] == truth[key] for key in counts), "a window's count is wrong"
    # Append mode writes a window once the watermark (latest event - WINDOW_S) has passed its end.
    latest = run.events[-1]["ts"] - timedelta(seconds=WINDOW_S)
    closed = {key for key in truth
              if datetime.fromisoformat(key.split("@")[1]).replace(tzinfo=timezone.utc) + timedelta(seconds=WINDOW_S)
              <= latest}
    assert set(counts) == closed


def check_ids(run: StatefulRun, records: list[tuple[str, str]]) -> None:
    assert sorted(map(int, _once([value for _, value in records]))) == [e["id"] for e in run.events]


def check_names(run: StatefulRun, records: list[tuple[str, str]]) -> None:
    assert sorted(_once([value for _, value in records])) == sorted(f"{e['id']}:name-{e['key'][1:]}"
                                                                    for e in run.events)


def check_running_counts(run: StatefulRun, records: list[tuple[str, str]]) -> None:
    _once([f"{key}={value}" for key, value in records])  # a key's count grows: each (key, count) once
    final = {key: max(int(value) for k, value in records if k == key) for key, _ in records}
    assert final == dict(Counter(e["key"] for e in run.events))


def check_complete_tables(run: StatefulRun, records: list[tuple[str, str]]) -> None:
    _once([f"{key}={value}" for key, value in records])
    batches = len(run.batches("commits"))
    assert len(records) == KEYS * batches, f"{len(records)} records for {batches} batches of the whole table"
    assert ("k0", None) in records, "count 7 is written as a null value (a tombstone)"
    last = {key: value for key, value in records}  # each partition in order; a key has one partition
    assert last == {key: str(count) for key, count in Counter(e["key"] for e in run.events).items()}


CHECKS = {"update": check_updates, "window": check_windows, "dedup": check_ids, "static-join": check_names,
          "stream-join": check_ids,
          "transform-with-state": check_running_counts, "complete": check_complete_tables}


def test_stateful_queries_write_every_result_once_under_faults(kafka, tmp_path):
    # One driver runs them side by side: each query gets its worker kill, and the driver dies once
    # every one of them is between its Kafka commits and Spark's commit log; the restarted driver's
    # queries each get a stalled attempt, resumed after they ended. "update" is a windowed count in
    # update mode, which the sink cannot take: through foreachBatch, into two topics.
    runs = [StatefulRun(kafka, tmp_path / shape, shape, topics=2 if shape == "update" else 1) for shape in CHECKS]
    run_through_faults(runs, tmp_path)
    for run in runs:
        CHECKS[run.shape](run, run.records(run.topics[0]))
