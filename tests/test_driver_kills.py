"""The driver killed between a batch's Kafka commits and Spark's commit log, then restarted: Spark
replays the batch, and what it committed before must not be written again (G2).

One driver (driver_kill_job.py) runs four pipelines side by side and dies once each of them has
committed its first batch in Kafka:
- eos-kafka -> eos-kafka with a group: the input offsets are in each task's transaction;
- a file copy and a rate copy without a group: each task's progress record is;
- an eos-kafka copy without a group whose partitions' ranges are split over tasks
  (maxRecordsPerPartition): each piece's progress record is, the replay split the same way;
- a copy of the files repartitioned by rand(), whose replay puts records in other tasks: it must
  fail, writing nothing.
Broken (the replay check skipping nothing), the first three write their replayed batch twice.

The restarted driver starts the random copy once the others ended. Its replay's failed task
cancels its other task, and a task cancelled while Spark gets it a Python worker makes Spark
restart its Python daemon, which kills the worker of every running task (test_spark_ground): with
one attempt per task in local mode, another query then failed at its replay and wrote none of its
later batches (the file copy once failed so, its output holding only the crashed run's batch).

The crashed run's claims stay unreleased, as when the driver's death takes its workers' releases
with it. The restarted application's executor ids and slot numbers, and with them the
transactional ids of the copies without a group, repeat the dead one's: an attempt that fenced
such a claim's id again aborted the transaction of a task of its own application holding it (or
the producer a worker kept for its next task), and the query failed. That holder's
init_transactions came after the claim, so the attempt leaves the id alone (attempt_fencing).
"""
from __future__ import annotations

import json
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest

from pyspark_eos.testing.output_check import high_watermarks, last_stable_offsets

from .spark_tools import Pipeline, logged_batches
from .test_any_source import PER_FILE, SPLIT_RECORDS, FileCopy, assert_each_once, assert_whole_rate_batches

JOB = Path(__file__).resolve().parent / "driver_kill_job.py"
# Every test here runs in one test process: they share the module's driver runs.
pytestmark = [pytest.mark.xdist_group("driver-kills"), pytest.mark.compat]


@dataclass
class DriverKill:
    narrow: Pipeline
    copies: dict[str, FileCopy]  # by source: "files", "rate", "random", "split"
    first: dict[str, list]  # each pipeline's output after the crash
    restarted: subprocess.CompletedProcess
    logs: Path  # both drivers' output: crashed.err, restarted.err (and .out)

    @property
    def outcomes(self) -> dict[str, str | None]:
        """Each restarted query's error by name (narrow, files, rate, random); None: it ran to its end."""
        lines = [line for line in self.restarted.stdout.splitlines() if line.startswith("outcomes ")]
        assert lines, f"the restarted driver reported no outcomes ({self.logs}): {self.restarted.stderr[-3000:]}"
        return json.loads(lines[-1].removeprefix("outcomes "))

    def assert_ran_to_its_end(self, name: str) -> None:
        """A failed restarted query explains missing output: say so, with its error."""
        assert self.outcomes[name] is None, (f"the restarted {name} query failed: {self.outcomes[name]}\n"
                                             f"the drivers' logs: {self.logs}")


def run_driver(bootstrap: str, queries: list[dict], logs: Path, *extra: str) -> subprocess.CompletedProcess:
    """The driver's run; its stdout and stderr are also kept in ``logs`` (.out, .err) for a failure to be read."""
    command = [sys.executable, str(JOB), bootstrap, json.dumps(queries), *extra]
    done = subprocess.run(command, capture_output=True, text=True, timeout=600)
    logs.with_suffix(".out").write_text(done.stdout)
    logs.with_suffix(".err").write_text(done.stderr)
    return done


@pytest.fixture(scope="module")
def driver_kill(kafka, tmp_path_factory) -> DriverKill:
    tmp_path = tmp_path_factory.mktemp("driver-kills")
    narrow = Pipeline(kafka, tmp_path / "narrow")
    copies = {source: FileCopy(kafka, tmp_path / source, files={"files": 3, "rate": 0, "random": 2, "split": 0}[source])
              for source in ("files", "rate", "random", "split")}
    specs = [{"source": f"kafka:{narrow.input}:{narrow.group}", "topic": narrow.output,
              "checkpoint": narrow.checkpoint, "prefix": "eos-kafka"},
             copies["files"].spec(str(copies["files"].input)), copies["rate"].spec("rate"),
             copies["random"].spec(f"random:{copies['random'].input}"),
             copies["split"].spec(copies["split"].add_split_input(SPLIT_RECORDS))]
    crashed = run_driver(kafka.bootstrap_servers, specs, tmp_path / "crashed", "arm")
    assert crashed.returncode != 0 and "finished" not in crashed.stdout, crashed.stdout[-2000:]
    for spec in specs:  # each batch 0 is in Kafka (output, and offsets or progress), not in the commit log
        assert logged_batches(spec["checkpoint"], "offsets") - logged_batches(spec["checkpoint"], "commits") == {"0"}, \
            spec
    first = {"narrow": narrow.output_values(), **{source: copy.output_ids() for source, copy in copies.items()}}
    for name, output in first.items():
        assert output, f"{name}: the crashed batch should have committed its Kafka transactions"
    return DriverKill(narrow, copies, first, run_driver(kafka.bootstrap_servers, specs, tmp_path / "restarted"),
                      tmp_path)


def test_the_replayed_batch_of_a_pipeline_with_a_group_is_not_written_again(driver_kill):
    driver_kill.assert_ran_to_its_end("narrow")
    assert set(driver_kill.first["narrow"]) <= set(driver_kill.narrow.output_values())
    try:
        driver_kill.narrow.assert_exactly_once()
    except AssertionError as failed:  # what the restarted driver said tells a loss from a failed restart
        errors = [line for line in driver_kill.restarted.stderr.splitlines() if "Error" in line or "Exception" in line]
        raise AssertionError(f"{failed}\nthe restarted driver's errors: {errors[-15:]}") from None


def test_the_replayed_batch_of_a_file_rate_or_split_copy_is_not_written_again(driver_kill):
    for source in ("files", "rate", "split"):
        copy, first = driver_kill.copies[source], driver_kill.first[source]
        driver_kill.assert_ran_to_its_end(source)
        ids = copy.output_ids()
        try:
            if source == "rate":
                assert_whole_rate_batches(ids)
            else:
                assert_each_once(ids, copy.expected)
        except AssertionError as failed:
            stands = _where_the_output_stands(copy, driver_kill.restarted)
            raise AssertionError(f"{source}: {failed}\n{stands}\nthe drivers' logs: {driver_kill.logs}") from None
        assert set(first) <= set(ids)
        last_batch = max(int(b) for b in copy.batches("commits"))
        if source == "split":  # its last batch has fewer pieces than its first (test_any_source)
            assert sorted(copy.progress().values()) == [1, 1, 2, 2, 2, 2], copy.progress()
        else:
            assert set(copy.progress().values()) == {last_batch + 1}


def _where_the_output_stands(copy: FileCopy, restarted: subprocess.CompletedProcess) -> str:
    """Whether a transaction left open holds the output's stable offset back, or the restarted
    query failed: what tells a race of this test from records lost."""
    stable = last_stable_offsets(copy.bootstrap, copy.output, 2)
    high = high_watermarks(copy.bootstrap, copy.output, 2)
    errors = dict.fromkeys(line for line in restarted.stderr.splitlines() if line[:1].strip()
                           and ("Error" in line or "Exception" in line) and "NonDeterministic" not in line
                           and "Stage cancelled" not in line)
    return (f"output's last stable offsets {stable}, high watermarks {high}; committed batches "
            f"{sorted(copy.batches('commits'))}; the restarted driver exited {restarted.returncode}, its errors "
            f"other than the random copy's: {list(errors)[-10:]}")


def test_a_replay_of_a_non_deterministic_plan_fails_loudly_and_writes_nothing(driver_kill):
    copy, first, restarted = driver_kill.copies["random"], driver_kill.first["random"], driver_kill.restarted
    assert len(first) == len(set(first)) == PER_FILE  # one file: the batch Spark did not log as done
    assert restarted.returncode != 0 and "finished" not in restarted.stdout
    assert "NonDeterministicReplayError" in (driver_kill.outcomes["random"] or ""), driver_kill.outcomes
    assert "NonDeterministicReplayError" in restarted.stderr and "is not deterministic" in restarted.stderr, \
        restarted.stderr[-4000:]
    assert sorted(copy.output_ids()) == sorted(first)
