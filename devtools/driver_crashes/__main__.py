"""The driver-crash loop: ``python -m devtools.driver_crashes --runs 20`` (``make driver-crashes``).

Each run, on one embedded broker and with names of its own: an input topic written in transactions
(one in five aborted) of JSON events of 8 keys over 31 ten-second windows; the update-mode pipeline
of ``job.py``; its first driver (maxOffsetsPerTrigger 1500, three write tasks of batch 0 killed right
after their commits) killed with its process group 0.5-3 s after the first output is visible; a
restart that finishes; more input; a restart killed 0.5-3 s after its query started; a restart
that finishes. Right after that last run, with no wait, a read_committed consumer reads the output
to its last stable offset: every row once, every window's last count equal to the input's, and no
transaction left open (the last stable offsets equal the high watermarks). A run that fails is
checked again once the open transactions, if any, ended: "hidden" if it is right then, "lost" if not.

One line per run, a summary at the end, the drivers' logs under ``--dir``; exits non-zero unless
every run held.
"""
from __future__ import annotations

import argparse
import json
import logging
import random
import subprocess
import sys
import tempfile
import time
import uuid
from collections import Counter
from dataclasses import asdict, dataclass, field
from datetime import datetime, timedelta, timezone
from pathlib import Path

from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient

from pyspark_eos.testing.embedded_kafka import EmbeddedKafkaCluster, create_topic, start_dying_with_parent
from pyspark_eos.testing.output_check import held_partitions, last_stable_offsets, read_committed

from ..processes import kill_session
from ..python_logging import environment

log = logging.getLogger("driver_crashes")

KEYS = 8
WINDOWS = 31
WINDOW_S = 10
START = datetime(2026, 1, 1, tzinfo=timezone.utc)
INPUT_PARTITIONS, OUTPUT_PARTITIONS = 4, 2
PER_TRANSACTION = 40
RUN_TIMEOUT_S = 600.0


@dataclass
class Outcome:
    run: int
    seed: int
    rows: int = 0
    duplicates: int = 0
    windows: int = 0
    wrong_windows: int = 0
    open_partitions: int = 0  # output partitions whose last stable offset is short of the high watermark
    verdict: str = "ok"  # ok, hidden (right once open transactions ended), lost, failed (a run did not end)
    kills: list = field(default_factory=list)
    seconds: float = 0.0
    detail: str = ""


class Driver:
    """One driver process of job.py, in a session of its own."""

    def __init__(self, args: list[str], log_path: Path):
        self.log_path = log_path
        with open(log_path, "ab") as out:
            self.process = start_dying_with_parent([sys.executable, "-m", "devtools.driver_crashes.job", *args],
                                                   stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                                   start_new_session=True, env=environment("INFO"))

    def started(self, timeout_s: float = 180.0) -> bool:
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline and self.process.poll() is None:
            if "query started:" in self.log_path.read_text(errors="replace"):
                return True
            time.sleep(0.05)
        return False

    def finish(self) -> bool:
        try:
            return self.process.wait(RUN_TIMEOUT_S) == 0
        except subprocess.TimeoutExpired:
            kill_session(self.process)
            return False


def events(rng: random.Random, count: int) -> list[dict]:
    span = WINDOWS * WINDOW_S
    return [{"key": f"k{rng.randrange(KEYS)}", "ts": (START + timedelta(seconds=rng.uniform(0, span))).isoformat()}
            for _ in range(count)]


def write_input(bootstrap: str, topic: str, rng: random.Random, count: int) -> list[dict]:
    """``count`` events in transactions, one in five aborted; the committed ones."""
    producer = Producer({"bootstrap.servers": bootstrap, "transactional.id": f"driver-crashes-{uuid.uuid4().hex}"})
    producer.init_transactions(30)
    committed = []
    batch = events(rng, count)
    for start in range(0, count, PER_TRANSACTION):
        chunk = batch[start:start + PER_TRANSACTION]
        producer.begin_transaction()
        for event in chunk:
            producer.produce(topic, json.dumps(event).encode(), partition=rng.randrange(INPUT_PARTITIONS))
        producer.flush(30)
        if rng.random() < 0.2:
            producer.abort_transaction(30)
        else:
            producer.commit_transaction(30)
            committed += chunk
    return committed


def truth(committed: list[dict]) -> dict[str, int]:
    counts = Counter()
    for event in committed:
        ts = datetime.fromisoformat(event["ts"])
        start = ts - timedelta(seconds=ts.second % WINDOW_S, microseconds=ts.microsecond)
        counts[f"{event['key']}@{start.strftime('%Y-%m-%d %H:%M:%S')}"] += 1
    return dict(counts)


def check(bootstrap: str, topic: str, expected: dict[str, int], outcome: Outcome) -> bool:
    records = read_committed(bootstrap, topic, OUTPUT_PARTITIONS)
    rows = [(r.key.decode(), int(r.value.decode())) for r in records]
    last = {}
    for key, count in rows:  # each partition in offset order: a key's rows share a partition
        last[key] = count
    outcome.rows, outcome.windows = len(rows), len(last)
    outcome.duplicates = len(rows) - len(set(rows))
    wrong = sum(last.get(key) != count for key, count in expected.items())
    outcome.wrong_windows = wrong + len(set(last) - set(expected))
    outcome.open_partitions = len(held_partitions(bootstrap, topic, OUTPUT_PARTITIONS))
    return outcome.duplicates == 0 and outcome.wrong_windows == 0 and outcome.open_partitions == 0


def one_run(bootstrap: str, number: int, seed: int, directory: Path, shuffle_partitions: int) -> Outcome:
    rng = random.Random(seed)
    outcome = Outcome(number, seed)
    started = time.monotonic()
    name = f"crashes-{number}-{uuid.uuid4().hex[:6]}"
    source = create_topic(bootstrap, f"{name}-in", INPUT_PARTITIONS)
    output = create_topic(bootstrap, f"{name}-out", OUTPUT_PARTITIONS)
    run_dir = directory / f"run-{number:03d}"
    (run_dir / "faults").mkdir(parents=True)
    base = ["--bootstrap", bootstrap, "--input", source, "--output", output, "--group", name,
            "--checkpoint", str(run_dir / "checkpoint"), "--faults-dir", str(run_dir / "faults"),
            "--shuffle-partitions", str(shuffle_partitions)]
    committed = write_input(bootstrap, source, rng, 7800)
    drivers = 0

    def driver(*extra: str) -> Driver:
        nonlocal drivers
        drivers += 1
        return Driver([*base, *extra], run_dir / f"driver-{drivers}.log")

    first = driver("--max-offsets", "1500", "--kill-workers", "3")
    visible = _wait_for_output(bootstrap, output, first)
    delay = rng.uniform(0.5, 3.0)
    time.sleep(delay)  # the fault's moment, not a synchronization
    kill_session(first.process)
    outcome.kills.append(f"driver 1 {delay:.1f} s after output ({visible})")
    if not driver().finish():
        return _failed(outcome, started, "the restart after the first kill failed", run_dir)
    committed += write_input(bootstrap, source, rng, 2300)
    third = driver()
    if third.started():
        delay = rng.uniform(0.5, 3.0)
        time.sleep(delay)
        outcome.kills.append(f"driver 3 {delay:.1f} s after its query started")
    kill_session(third.process)
    if not driver().finish():
        return _failed(outcome, started, "the last restart failed", run_dir)
    expected = truth(committed)
    if not check(bootstrap, output, expected, outcome):
        outcome.verdict = "lost"
        _wait_for_open_transactions(bootstrap, output)
        again = Outcome(number, seed)
        if check(bootstrap, output, expected, again):
            outcome.verdict = "hidden"
    outcome.seconds = round(time.monotonic() - started, 1)
    return outcome


def _wait_for_output(bootstrap: str, topic: str, driver: Driver, timeout_s: float = 300.0) -> str:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline and driver.process.poll() is None:
        if sum(last_stable_offsets(bootstrap, topic, OUTPUT_PARTITIONS, admin).values()):
            return "visible"
        time.sleep(0.05)
    return "driver ended first" if driver.process.poll() is not None else "none after the wait"


def _wait_for_open_transactions(bootstrap: str, topic: str, timeout_s: float = 120.0) -> None:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline and held_partitions(bootstrap, topic, OUTPUT_PARTITIONS, admin):
        time.sleep(0.5)


def _failed(outcome: Outcome, started: float, detail: str, run_dir: Path) -> Outcome:
    outcome.verdict, outcome.detail = "failed", f"{detail}; logs in {run_dir}"
    outcome.seconds = round(time.monotonic() - started, 1)
    return outcome


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--runs", type=int, default=20)
    parser.add_argument("--seed", type=int, default=None, help="the first run's seed (default: random, printed)")
    parser.add_argument("--dir", type=Path, default=None, help="where the runs' logs and checkpoints go")
    parser.add_argument("--shuffle-partitions", type=int, default=200)
    parser.add_argument("--results", type=Path, default=None, help="write the outcomes as JSON here")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(message)s", datefmt="%H:%M:%S")
    seed = args.seed if args.seed is not None else random.randrange(1 << 30)
    directory = args.dir or Path(tempfile.mkdtemp(prefix="eos-kafka-driver-crashes-"))
    directory.mkdir(parents=True, exist_ok=True)
    log.info("driver-crash loop: %d run(s) from seed %d, logs in %s", args.runs, seed, directory)
    outcomes = []
    with EmbeddedKafkaCluster(nodes=1, directory=directory / "kafka") as kafka:
        for number in range(args.runs):
            outcome = one_run(kafka.bootstrap_servers, number, seed + number, directory, args.shuffle_partitions)
            outcomes.append(outcome)
            log.info("run %d/%d (seed %d): %s, %d rows, %d twice, %d/%d windows wrong, %d output partition(s) held "
                     "open, %.0f s; %s %s", number + 1, args.runs, outcome.seed, outcome.verdict.upper(), outcome.rows,
                     outcome.duplicates, outcome.wrong_windows, outcome.windows, outcome.open_partitions,
                     outcome.seconds, "; ".join(outcome.kills), outcome.detail)
    verdicts = Counter(o.verdict for o in outcomes)
    log.info("driver-crash loop: %s of %d run(s) held (seed %d)%s", verdicts.get("ok", 0), len(outcomes), seed,
             "" if verdicts.get("ok", 0) == len(outcomes) else f"; {dict(verdicts)}")
    if args.results:
        args.results.write_text(json.dumps([asdict(o) for o in outcomes], indent=1))
    return 0 if verdicts.get("ok", 0) == len(outcomes) else 1


if __name__ == "__main__":
    sys.exit(main())
