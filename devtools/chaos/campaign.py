"""The campaign: a three-node cluster, the pipeline, its input written all along, and faults fired
one after another by a seeded schedule until the count or the time is reached; then the three
verifiers and the report.

After each fault the campaign waits for the query to recover, which it measures from Kafka alone:
the group has committed every input offset written before the fault ended. A query that dies without a fault that
stops it is counted (and restarted, so that the verifiers still run): it should ride through.
"""
from __future__ import annotations

import argparse
import faulthandler
import logging
import os
import random
import shutil
import sys
import tempfile
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

from confluent_kafka import KafkaException

from pyspark_eos.testing import fault_injection
from pyspark_eos.testing.embedded_kafka import EmbeddedKafkaCluster, create_topic

from ..processes import WorkerSampler
from . import report
from .faults import KINDS, NETWORK_KINDS, OWN_S, Schedule
from .input_writer import InputWriter
from .query import QueryInstance, QuerySpec, death_cause
from .verifiers import OutputWatcher, committed_total, final_check, input_end_total, offsets_lag, open_transactions

log = logging.getLogger(__name__)

INPUT_TOPICS = {"chaos-in-a": 3, "chaos-in-b": 2}
OUTPUT_PARTITIONS = 4
TRANSACTION_TIMEOUT_MS = 20000
RECOVERY_TIMEOUT_S = 300.0
SAMPLE_INTERVAL_S = 0.5


@dataclass
class Settings:
    seed: int
    faults: int
    minutes: float
    kinds: list[str]
    results: Path
    work_dir: Path
    rate: int = 300
    plot: bool = True
    attempt_fencing_off: bool = False


def split_recovery(fault: dict, waited: float | None) -> None:
    """Set the fault's recovery, from its start (a driver restart or a broker's downtime is part of
    it), and after_s, what follows the fault's own time (took_s): the query's and eos-kafka's part.
    ``waited``: seconds from the fault's function's return to recovery (None: not recovered)."""
    applied_s = fault.pop("applied_s")
    total = None if waited is None else applied_s + waited
    fault["recovered_s"] = None if total is None else round(total, 1)
    fault["after_s"] = None if total is None else round(total - fault["took_s"], 1)


class ProgressTracker(threading.Thread):
    """Samples the group's committed offsets over the input every half second: (seconds, total).
    A fault's recovery is seen at the next sample, so the interval is part of each one measured."""

    def __init__(self, bootstrap: str, group: str, topics: list[str], started: float):
        super().__init__(name="chaos-progress", daemon=True)
        self.args, self.started = (bootstrap, group, topics), started
        self.samples: list[tuple[float, int]] = []
        self._stopped = threading.Event()

    def run(self) -> None:
        while not self._stopped.wait(SAMPLE_INTERVAL_S):
            try:
                total = committed_total(*self.args)
                # Committed offsets do not move back: a lower sum is an unanswered partition.
                if total >= self.latest():
                    self.samples.append((round(time.monotonic() - self.started, 1), total))
            except Exception as error:  # a broker down: the next sample will do
                log.debug("progress sample failed: %s", error)

    def latest(self) -> int:
        return self.samples[-1][1] if self.samples else -1

    def stop(self) -> None:
        self._stopped.set()
        self.join(60)


@dataclass
class Rig:
    """The campaign's ground, on which the faults act (faults.Rig)."""

    cluster: EmbeddedKafkaCluster
    work_dir: Path
    seed: int
    topics: list[str] = field(default_factory=lambda: list(INPUT_TOPICS))
    transaction_timeout_ms: int = TRANSACTION_TIMEOUT_MS
    query: QueryInstance | None = None
    instances: int = 0
    checkpoints: int = 0
    expected_exits: set[int] = field(default_factory=set)

    def __post_init__(self):
        self.fault_dir = str(self.work_dir / "faults")
        self.group = f"chaos-{self.seed}"
        self.transactional_id_prefix = f"chaos-{self.seed}-out"
        self.output = "chaos-out"
        # The query's clients go through the proxies of a proxied cluster; the campaign's own do not.
        cluster = self.cluster
        query_bootstrap = cluster.proxied_bootstrap_servers if cluster.proxied else cluster.bootstrap_servers
        self.spec = QuerySpec(query_bootstrap, tuple(self.topics), self.output, self.group,
                              self.transactional_id_prefix, self.transaction_timeout_ms)

    def _start(self, starting_offsets: str) -> QueryInstance:
        self.instances += 1
        checkpoint = self.work_dir / f"checkpoint-{self.checkpoints}"
        return QueryInstance(self.spec, checkpoint, starting_offsets, self.work_dir, self.instances)

    def restart_query(self, fresh_checkpoint: bool = False) -> QueryInstance:
        if fresh_checkpoint:
            shutil.rmtree(self.query.checkpoint, ignore_errors=True)
        self.expected_exits.add(self.query.pid)
        self.query = self._start("group")
        return self.query

    def start_second_instance(self) -> QueryInstance:
        self.expected_exits.add(self.query.pid)
        self.checkpoints += 1
        self.query = self._start("group")
        return self.query


class Campaign:
    def __init__(self, settings: Settings):
        self.settings = settings
        self.started = time.monotonic()
        self.faults: list[dict] = []
        self.unexpected_exits: list[dict] = []

    def run(self) -> dict:
        settings = self.settings
        settings.work_dir.mkdir(parents=True, exist_ok=True)
        fault_injection.enable(settings.work_dir / "faults")
        if settings.attempt_fencing_off:  # to see the verifiers catch what the fencing prevents
            fault_injection.arm(fault_injection.ATTEMPT_FENCING_OFF, settings.work_dir / "faults")
            log.warning("attempt fencing is switched off: zombie attempts may commit twice")
        log.info("chaos campaign: seed %d, up to %d faults or %.0f minutes, kinds %s; replay with "
                 "CHAOS_SEED=%d", settings.seed, settings.faults, settings.minutes, ", ".join(settings.kinds),
                 settings.seed)
        proxied = bool(NETWORK_KINDS & set(settings.kinds))
        with EmbeddedKafkaCluster(nodes=3, directory=settings.work_dir / "kafka", proxied=proxied) as cluster:
            rig = Rig(cluster, settings.work_dir, settings.seed)
            for topic, partitions in INPUT_TOPICS.items():
                create_topic(cluster.bootstrap_servers, topic, partitions, replication=3)
            create_topic(cluster.bootstrap_servers, rig.output, OUTPUT_PARTITIONS, replication=3)
            return self._with_pipeline(rig)

    def _with_pipeline(self, rig: Rig) -> dict:
        bootstrap = rig.cluster.bootstrap_servers
        writer = InputWriter(bootstrap, rig.topics, self.settings.seed, rate=self.settings.rate)
        watcher = OutputWatcher(bootstrap, rig.output, OUTPUT_PARTITIONS)
        tracker = ProgressTracker(bootstrap, rig.group, rig.topics, self.started)
        with WorkerSampler(os.getpid(), interval_s=5.0) as sampler:
            for thread in (writer, watcher, tracker):
                thread.start()
            rig.query = rig._start("earliest")
            try:
                if self._wait_recovered(rig, tracker, 1, "the query's first batch") is None:
                    log.error("the query committed nothing in %.0f s; see %s", RECOVERY_TIMEOUT_S, rig.query.log_path)
                else:
                    self._fire_faults(rig, tracker, watcher, writer)
                writer.stop()
                ended = self._drain(rig)
            finally:
                rig.query.stop()
                watcher.catch_up()
                watcher.stop()
                tracker.stop()
        return self._verify(rig, writer, watcher, tracker, sampler, ended)

    def _fire_faults(self, rig: Rig, tracker: ProgressTracker, watcher: OutputWatcher, writer: InputWriter) -> None:
        schedule = Schedule(self.settings.seed, self.settings.kinds)
        deadline = self.started + self.settings.minutes * 60
        while schedule.fired < self.settings.faults and time.monotonic() < deadline:
            kind, gap, rng = schedule.next()
            time.sleep(gap)  # the schedule's pause between faults
            fault = self._fire(rig, kind, rng, schedule.fired)
            ended = time.monotonic()
            # Recovered: everything written before the fault ended is committed (a stalled task's
            # partitions included: the other tasks' commits alone do not count). Asking for the
            # input's end waits for the cluster as the query does (a hard-killed broker's partitions
            # have no leader until its session times out): the clock runs from the fault's end.
            try:
                baseline = input_end_total(rig.cluster.bootstrap_servers, rig.topics)
            except KafkaException:
                baseline = tracker.latest() + 1
            waited = self._wait_recovered(rig, tracker, baseline, kind, since=ended)
            split_recovery(fault, waited)
            log.info("fault %d/%d at %.0f s: %s %s -> %s", schedule.fired, self.settings.faults, fault["at_s"], kind,
                     fault["details"], f"recovered in {fault['recovered_s']} s (the fault itself {fault['took_s']} s, "
                     f"after it {fault['after_s']} s)" if fault["recovered_s"] is not None else "NOT recovered")
            if fault["recovered_s"] is None or watcher.duplicates or writer.error:
                log.error("stopping the campaign: %s", watcher.first_duplicate or
                          (writer.error and f"the input writer failed: {writer.error}") or f"no recovery after {kind}")
                return

    def _fire(self, rig: Rig, kind: str, rng: random.Random, number: int) -> dict:
        at = time.monotonic()
        details = KINDS[kind](rig, rng)
        applied_s = time.monotonic() - at
        # took_s: the fault's own time, which a kind may tell apart from what its function waited for
        # (a stall goes on after the function returned; a fenced instance's stop is recovery)
        fault = {"number": number, "kind": kind, "at_s": round(at - self.started, 1), "details": details,
                 "took_s": round(details.pop(OWN_S, applied_s), 1), "applied_s": applied_s}
        self.faults.append(fault)
        return fault

    def _wait_recovered(self, rig: Rig, tracker: ProgressTracker, baseline: int, what: str,
                        since: float | None = None) -> float | None:
        """Seconds from ``since`` (default: now) until the committed offsets over the input add up
        to ``baseline``; None if they do not in time. A query that died by itself meanwhile is
        recorded and restarted."""
        waiting = time.monotonic() if since is None else since
        while time.monotonic() - waiting < RECOVERY_TIMEOUT_S:
            if tracker.latest() >= baseline:
                return round(time.monotonic() - waiting, 1)
            if not rig.query.alive() and rig.query.pid not in rig.expected_exits:
                self._record_unexpected_exit(rig, what)
            time.sleep(0.2)
        return None

    def _record_unexpected_exit(self, rig: Rig, after: str) -> None:
        from pyspark_eos.testing.embedded_kafka import log_tail

        tail = log_tail(rig.query.log_path, 15)
        cause = death_cause(rig.query.log_path)
        log.error("the query died (exit %s) after %s; restarting it. Why:\n%s\nIts log ends:\n%s",
                  rig.query.process.returncode, after, "\n".join(cause), tail)
        self.unexpected_exits.append({"at_s": round(time.monotonic() - self.started, 1), "after": after,
                                      "exit": rig.query.process.returncode, "log": str(rig.query.log_path),
                                      "cause": cause, "tail": tail.splitlines()[-5:]})
        rig.restart_query()

    def _drain(self, rig: Rig) -> bool:
        """Wait until the group's offsets reach the input's end (the input has stopped)."""
        deadline = time.monotonic() + RECOVERY_TIMEOUT_S
        while time.monotonic() < deadline:
            lag = offsets_lag(rig.cluster.bootstrap_servers, rig.group, rig.topics)
            if not lag:
                return True
            if not rig.query.alive() and rig.query.pid not in rig.expected_exits:
                self._record_unexpected_exit(rig, "the input's end")
            time.sleep(1.0)
        log.error("the group's offsets did not reach the input's end in %.0f s: %s", RECOVERY_TIMEOUT_S, lag)
        return False

    def _verify(self, rig: Rig, writer: InputWriter, watcher: OutputWatcher, tracker: ProgressTracker,
                sampler: WorkerSampler, ended: bool) -> dict:
        bootstrap = rig.cluster.bootstrap_servers
        left_open = self._open_transactions_after_timeout(rig)
        check = final_check(bootstrap, rig.topics, rig.output, OUTPUT_PARTITIONS, writer.aborted)
        return report.build(
            self.settings, self.faults, self.unexpected_exits, check, watcher, ended,
            offsets_lag(bootstrap, rig.group, rig.topics), left_open, writer, tracker.samples, sampler)

    def _open_transactions_after_timeout(self, rig: Rig) -> list[str]:
        """Transactions of the query's ids still open once the broker has had time to abort any a
        killed writer left (its transaction timeout)."""
        deadline = time.monotonic() + rig.transaction_timeout_ms / 1000 + 30
        while True:
            left = open_transactions(rig.cluster.bootstrap_servers, rig.transactional_id_prefix)
            if not left or time.monotonic() > deadline:
                return left
            time.sleep(2.0)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m devtools.chaos", description=__doc__.splitlines()[0])
    parser.add_argument("--seed", type=int, default=None, help="the schedule's seed (default: random, printed)")
    parser.add_argument("--faults", type=int, default=200, help="faults to fire (default 200)")
    parser.add_argument("--minutes", type=float, default=120.0, help="stop firing after this long (default 120)")
    parser.add_argument("--kinds", default=",".join(KINDS), help=f"fault kinds (default all: {','.join(KINDS)})")
    parser.add_argument("--results", default="docs/chaos", help="where chaos-<seed>.json/.png go")
    parser.add_argument("--work-dir", default=None, help="cluster, checkpoints and driver logs (default: a temporary directory)")
    parser.add_argument("--rate", type=int, default=300, help="input records per second (default 300)")
    parser.add_argument("--no-plot", action="store_true", help="skip the timeline plot (needs matplotlib)")
    parser.add_argument("--attempt-fencing-off", action="store_true",
                        help="switch the sink's attempt fencing off, to see the verifiers catch what it prevents")
    args = parser.parse_args(argv)
    # A crash inside librdkafka (the campaign's own clients live through every broker bounce)
    # leaves the Python stacks of all threads in the output instead of only an exit code.
    faulthandler.enable()
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    for noisy in ("py4j", "pyspark_eos.testing.embedded_kafka"):
        logging.getLogger(noisy).setLevel(logging.WARNING)
    seed = args.seed if args.seed is not None else random.randrange(1, 10**6)
    settings = Settings(seed, args.faults, args.minutes, [k for k in args.kinds.split(",") if k], Path(args.results),
                        Path(args.work_dir or tempfile.mkdtemp(prefix=f"eos-kafka-chaos-{seed}-")), args.rate,
                        not args.no_plot, args.attempt_fencing_off)
    result = Campaign(settings).run()
    print(report.summary(result))
    return 0 if result["verdict"] == "passed" else 1


if __name__ == "__main__":
    sys.exit(main())
