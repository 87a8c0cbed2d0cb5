"""The exactly-once protocol's cost per task as a cluster grows: P pipelines, T tasks in each
pipeline's batch, C tasks at a time across the cluster. No Spark: the runtime's own claims,
fencing, stable-read and commit code (sink/attempt_fencing, protocol/claims_log,
kafka/group_offsets) driven by simulated write tasks against a three-node Kafka cluster.

    .venv/bin/python -m benchmarks.protocol_load                 # every case (make protocol-load)
    .venv/bin/python -m benchmarks.protocol_load --pipelines 1,10 --tasks 100 --layouts 1,2

Each case plans one batch per pipeline (its driver's plan record), then runs its P·T tasks on C
worker threads, the pipelines' tasks interleaved as a shared cluster runs them; a batch of one
task per thread and pipeline before it is not measured (each thread's clients learn the
pipeline's topics there, as an executor's do in a pipeline's first batch). A task is a
first attempt: it claims its input partition, enforces the claim (reads what its layout makes it
read, fences what it finds), reads its group's offsets stable, commits them in a transaction
(one transactional producer per worker thread, kept across tasks as the sink keeps a slot's),
and releases the claim. Per task it records the claims records and bytes its read took and each
step's time; per case it prints medians and p99s, the whole batch's claims reads across the
pipelines, and each case's p99 protocol time against the reference case (layout 2, 1 pipeline
of 100 tasks) measured in the same run. Results are appended to
benchmarks/results/protocol_load.jsonl.

Layout 1 (one claims partition for every pipeline, eos-kafka 0.1.0's) reads grow with P·T per
task, so its cases run only up to ``--layout1-max-tasks`` tasks in all (the batch's reads grow
with the square). Layout 3 is a pipeline without a group on a topic of its own (layout 2 for
progress records, sink/progress_claims): no attempt takes the control log's fast path, so a task
reads its batch's claims, which grow with T but not with P; its cases take the same limit.
"""
from __future__ import annotations

import argparse
import json
import logging
import statistics
import sys
import threading
import time
import uuid
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass
from pathlib import Path

from confluent_kafka import Consumer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from pyspark_eos.kafka.clients import init_transactional_producer
from pyspark_eos.kafka.group_offsets import fetch_stable_commits
from pyspark_eos.protocol.claims_log import ClaimsClients, ClaimsLog
from pyspark_eos.sink.attempt_fencing import claim_attempt

from . import report

log = logging.getLogger("benchmarks.protocol_load")

RESULTS = Path(__file__).resolve().parent / "results" / "protocol_load.jsonl"
STEPS = ("claim", "read", "stable read", "commit", "release")
TRANSACTION_TIMEOUT_MS = 60_000
REFERENCE = (2, 1, 100)  # layout, pipelines, tasks: what every case's time is compared with
PROGRESS_LAYOUT = 3  # a pipeline without a group on its own topic: layout 2, read as progress attempts read
WARM_UP = (5, 100)  # pipelines, tasks: run before the cases, not measured


@dataclass
class TaskResult:
    records_read: int
    bytes_read: int
    seconds: dict[str, float]

    @property
    def protocol_seconds(self) -> float:
        return sum(self.seconds.values())


@dataclass
class CaseResult:
    layout: int
    pipelines: int
    tasks: int
    concurrency: int
    wall_seconds: float
    tasks_run: int
    records_read: dict[str, float]
    bytes_read: dict[str, float]
    step_ms: dict[str, dict[str, float]]
    protocol_ms: dict[str, float]
    batch_records_read: int
    batch_bytes_read: int
    against_reference: float | None = None

    @property
    def key(self) -> tuple[int, int, int]:
        return self.layout, self.pipelines, self.tasks


def spread(values: list[float]) -> dict[str, float]:
    return {"mean": statistics.fmean(values), "p50": report.percentile(values, 0.5),
            "p99": report.percentile(values, 0.99), "max": max(values)}


class Worker:
    """One executor slot: its claims clients, its admin client, its transactional producer."""

    def __init__(self, bootstrap: str, index: int, run: str):
        self.bootstrap = bootstrap
        self.clients = ClaimsClients(bootstrap, {}, None, TRANSACTION_TIMEOUT_MS)
        self.admin = AdminClient({"bootstrap.servers": bootstrap})
        self.transactional_id = f"protocol-load-{run}.{index}"
        self.producer = init_transactional_producer(bootstrap, {}, self.transactional_id, TRANSACTION_TIMEOUT_MS)
        self._metadata: dict[str, object] = {}

    def group_metadata(self, group: str):
        """What send_offsets_to_transaction takes for a group with no members (as progress groups)."""
        if group not in self._metadata:
            consumer = Consumer({"bootstrap.servers": self.bootstrap, "group.id": group})
            self._metadata[group] = consumer.consumer_group_metadata()
            consumer.close()
        return self._metadata[group]

    def run_task(self, plan, group: str, input_topic: str, partition: int, attempt: int, layout: int) -> TaskResult:
        before = (self.clients.read.records, self.clients.read.bytes)
        seconds: dict[str, float] = {}
        started = time.perf_counter()

        def ended(step: str) -> None:
            nonlocal started
            now = time.perf_counter()
            seconds[step] = now - started
            started = now

        key = (input_topic, partition)
        progress = layout == PROGRESS_LAYOUT  # the attempt of a run that committed its task last (SAME)
        claim = claim_attempt(self.clients, [plan], group, [key], attempt, f"task {partition} (attempt {attempt})",
                              self.transactional_id, run_tokens=[] if progress else ["protocol-load"],
                              first_of_plan=layout == 2, progress=progress)
        ended("claim")
        claim.enforce()
        ended("read")
        fetch_stable_commits(self.admin, group, [key], TRANSACTION_TIMEOUT_MS)
        ended("stable read")
        self.producer.begin_transaction()
        self.producer.send_offsets_to_transaction([TopicPartition(input_topic, partition, 1)],
                                                  self.group_metadata(group), 30)
        self.producer.commit_transaction(30)
        ended("commit")
        claim.release()
        ended("release")
        return TaskResult(self.clients.read.records - before[0], self.clients.read.bytes - before[1], seconds)

    def close(self) -> None:
        self.clients.producer().flush(30)
        self.clients.close()


class Slots:
    """The cluster's C task slots: threads, each with its Worker, kept from case to case as
    executors keep their workers' clients."""

    def __init__(self, bootstrap: str, concurrency: int):
        self.bootstrap = bootstrap
        self.concurrency = concurrency
        self.pool = ThreadPoolExecutor(concurrency, thread_name_prefix="task")
        self.run = uuid.uuid4().hex[:8]
        self.workers: list[Worker | None] = []
        self._local = threading.local()
        self._lock = threading.Lock()

    def worker(self) -> Worker:
        if not hasattr(self._local, "worker"):
            with self._lock:
                index = len(self.workers)
                self.workers.append(None)
            self._local.worker = self.workers[index] = Worker(self.bootstrap, index, self.run)
        return self._local.worker

    def close(self) -> None:
        self.pool.shutdown()
        for w in self.workers:
            if w is not None:
                w.close()


def run_case(slots: Slots, layout: int, pipelines: int, tasks: int, input_topic: str, progress=None) -> CaseResult:
    bootstrap, case = slots.bootstrap, uuid.uuid4().hex[:8]
    claims_topic = f"protocol-load-claims-{case}"
    groups = [f"protocol-load-{case}-p{p}" for p in range(pipelines)]
    logs = [ClaimsLog(bootstrap, {}, claims_topic, None if layout == 1 else group) for group in groups]
    warm(slots, logs, groups, layout, input_topic)
    plans = [claims.open_plan(group) for claims, group in zip(logs, groups)]
    # The pipelines' tasks interleaved: task 0 of each pipeline, then task 1 of each, ...
    work = [(p, t) for t in range(tasks) for p in range(pipelines)]
    done = [0]
    lock = threading.Lock()

    def one(item: tuple[int, int]) -> TaskResult:
        p, t = item
        result = slots.worker().run_task(plans[p], groups[p], input_topic, t, 1000 + t, layout)
        with lock:
            done[0] += 1
            if progress is not None and done[0] % max(1, len(work) // 10) == 0:
                progress(done[0], len(work))
        return result

    started = time.monotonic()
    results = list(slots.pool.map(one, work))
    wall = time.monotonic() - started
    for claims in logs:
        claims.close()
    return summarize(layout, pipelines, tasks, slots.concurrency, wall, results)


def warm(slots: Slots, logs: list[ClaimsLog], groups: list[str], layout: int, input_topic: str) -> None:
    """A batch of one task per slot for every pipeline, not measured: each slot's clients learn the
    pipeline's claims topic, as an executor's do in a pipeline's first batch (a long-running
    pipeline's batches are measured, not its first). Each slot runs exactly one task of it: every
    task waits until all the slots hold one."""
    for claims, group in zip(logs, groups):
        plan, barrier = claims.open_plan(group), threading.Barrier(slots.concurrency)

        def one(task: int) -> TaskResult:
            barrier.wait(60)
            return slots.worker().run_task(plan, group, input_topic, task, 100 + task, layout)

        list(slots.pool.map(one, range(slots.concurrency)))


def summarize(layout: int, pipelines: int, tasks: int, concurrency: int, wall: float,
              results: list[TaskResult]) -> CaseResult:
    return CaseResult(
        layout, pipelines, tasks, concurrency, wall, len(results),
        spread([r.records_read for r in results]), spread([r.bytes_read for r in results]),
        {step: {k: v * 1000 for k, v in spread([r.seconds[step] for r in results]).items()} for step in STEPS},
        {k: v * 1000 for k, v in spread([r.protocol_seconds for r in results]).items()},
        sum(r.records_read for r in results), sum(r.bytes_read for r in results))


def ensure_input_topic(bootstrap: str, partitions: int) -> str:
    """Where the simulated tasks' offsets are committed: one partition per task of a batch, so that no
    two tasks of a pipeline wait for each other's pending offsets."""
    topic = f"protocol-load-input-{partitions}"
    admin = AdminClient({"bootstrap.servers": bootstrap})
    if topic not in admin.list_topics(timeout=30).topics:
        admin.create_topics([NewTopic(topic, partitions, 1)])[topic].result(120)
    return topic


def cases(layouts: list[int], pipelines: list[int], tasks: list[int], layout1_max: int,
          reference: tuple[int, int, int] = REFERENCE) -> list[tuple[int, int, int]]:
    """The cases to run, the reference first (run_all compares every case with the first)."""
    chosen = [(layout, p, t) for layout in layouts for p in pipelines for t in tasks
              if layout == 2 or p * t <= layout1_max]  # layouts 1 and 3: a batch's reads grow with T²
    if reference not in chosen:
        chosen.insert(0, reference)
    return sorted(chosen, key=lambda c: (c != reference, c[1] * c[2], c))


def run_all(bootstrap: str, chosen: list[tuple[int, int, int]], concurrency: int) -> list[CaseResult]:
    input_topic = ensure_input_topic(bootstrap, max(t for _, _, t in chosen))
    results = []
    slots = Slots(bootstrap, concurrency)
    try:
        # Not a case: warms every slot's clients, and the brokers' JIT, before the reference runs.
        run_case(slots, 2, WARM_UP[0], min(WARM_UP[1], max(t for _, _, t in chosen)), input_topic)
        for number, (layout, pipelines, tasks) in enumerate(chosen, 1):
            log.info("case %d of %d: layout %d, %d pipeline(s) x %d task(s), %d at a time", number, len(chosen),
                     layout, pipelines, tasks, concurrency)
            results.append(run_case(slots, layout, pipelines, tasks, input_topic,
                                    progress=lambda done, total: log.info("  %d of %d tasks", done, total)))
    finally:
        slots.close()
    reference = results[0]
    for r in results:
        r.against_reference = r.protocol_ms["p99"] / reference.protocol_ms["p99"]
    return results


def table(results: list[CaseResult]) -> str:
    lines = ["| layout | pipelines × tasks a batch | tasks at a time | records a task reads (mean / p99) | "
             "bytes a task reads (p99) | claim+read p99 ms | stable read p99 ms | commit p99 ms | "
             "protocol p50 / p99 ms | p99 against the first row | claims read per batch, all pipelines |",
             "| --- | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |"]
    for r in results:
        claim_read = r.step_ms["claim"]["p99"] + r.step_ms["read"]["p99"]
        layout = "2, no group" if r.layout == PROGRESS_LAYOUT else r.layout
        lines.append(
            f"| {layout} | {r.pipelines} × {r.tasks} | {r.concurrency} | {r.records_read['mean']:,.1f} / "
            f"{r.records_read['p99']:,.0f} | {r.bytes_read['p99']:,.0f} | {claim_read:,.1f} | "
            f"{r.step_ms['stable read']['p99']:,.1f} | {r.step_ms['commit']['p99']:,.1f} | "
            f"{r.protocol_ms['p50']:,.1f} / {r.protocol_ms['p99']:,.1f} | {r.against_reference:.2f}× | "
            f"{r.batch_records_read:,} records, {r.batch_bytes_read / 1e6:,.1f} MB |")
    return "\n".join(lines)


def record(results: list[CaseResult], argv: list[str], nodes: int) -> None:
    RESULTS.parent.mkdir(parents=True, exist_ok=True)
    with RESULTS.open("a") as out:
        out.write(json.dumps({"at": time.strftime("%Y-%m-%d %H:%M:%S"), **report.code_version(), "argv": argv,
                              "nodes": nodes, "machine": report.machine(), "cases": [asdict(r) for r in results]})
                  + "\n")


def _ints(text: str) -> list[int]:
    return [int(x) for x in text.split(",") if x]


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    parser = argparse.ArgumentParser(prog="python -m benchmarks.protocol_load", description=__doc__.split("\n\n")[0])
    parser.add_argument("--pipelines", type=_ints, default=[1, 10, 50])
    parser.add_argument("--tasks", type=_ints, default=[10, 100, 1000])
    parser.add_argument("--layouts", type=_ints, default=[1, 2, PROGRESS_LAYOUT],
                        help=f"1, 2, or {PROGRESS_LAYOUT} (layout 2 for a pipeline without a group)")
    parser.add_argument("--concurrency", type=int, default=8, help="tasks at a time, across the pipelines")
    parser.add_argument("--layout1-max-tasks", type=int, default=1000,
                        help="layout 1's and 3's cases run up to this many tasks in all (P·T)")
    parser.add_argument("--nodes", type=int, default=3, help="Kafka nodes of the embedded cluster")
    parser.add_argument("--bootstrap", help="an existing cluster's bootstrap servers instead")
    parser.add_argument("--no-record", action="store_true", help=f"do not append to {RESULTS}")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(message)s")
    logging.getLogger("pyspark_eos").setLevel(logging.WARNING)
    chosen = cases(args.layouts, args.pipelines, args.tasks, args.layout1_max_tasks)
    if args.bootstrap:
        results = run_all(args.bootstrap, chosen, args.concurrency)
    else:
        from pyspark_eos.testing.embedded_kafka import EmbeddedKafkaCluster

        with EmbeddedKafkaCluster(nodes=args.nodes) as cluster:
            results = run_all(cluster.bootstrap_servers, chosen, args.concurrency)
    print(table(results))
    if not args.no_record:
        record(results, argv, 0 if args.bootstrap else args.nodes)
    return 0


if __name__ == "__main__":
    sys.exit(main())
