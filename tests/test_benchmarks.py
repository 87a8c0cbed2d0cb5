"""The benchmarks' scenarios at their smoke scale (a few thousand records, one run each): every
scenario still runs, checks its output, and reaches the README's results, so that a change of the
runtime or of the benchmarks cannot break one unnoticed. The figures themselves mean nothing here.

All scenarios run once, one after the other, on the suite's broker and local[2] session."""
from __future__ import annotations

import time

import pytest

from benchmarks import bench, contenders, report
from benchmarks.contenders import AT_LEAST_ONCE, Ground
from benchmarks.scenarios import COLD_CONTENDERS, PYTHON_STREAM, SCENARIOS, Options, Variant
from benchmarks.workload import SCALES
from pyspark_eos.testing.local_spark import LOCAL

SMOKE = SCALES["smoke"]
JVM_ONLY = ("spark-kafka", "jvm-stream")  # contenders that start no Python process
# python-stream, and a variant that reads every Kafka column in tasks of fewer records.
VARIANTS = (Variant(PYTHON_STREAM),
            Variant.parse("all-columns", ["source.schema=", "source.minRecordsPerPartition=500"]))


@pytest.fixture(scope="module")
def smoke_run(kafka, spark_sessions, tmp_path_factory):
    spark = spark_sessions.get(LOCAL)
    ground = Ground(kafka.bootstrap_servers, spark, tmp_path_factory.mktemp("bench"))
    started = time.time()
    rows, seconds = bench.run_scenarios(ground, list(SCENARIOS), SMOKE, Options(VARIANTS))
    each = ", ".join(f"{name} {s:.0f} s" for name, s in seconds.items())
    print(f"every scenario at smoke scale: {time.time() - started:.0f} s ({each})")
    return rows, seconds, started


def _rows(smoke_run, scenario: str) -> list[dict]:
    return [row for row in smoke_run[0] if row["scenario"] == scenario]


@pytest.mark.parametrize("scenario", list(SCENARIOS))
def test_each_scenario_ran_and_wrote_every_record(smoke_run, scenario):
    rows = _rows(smoke_run, scenario)
    assert rows, f"{scenario} produced no result"
    failed = [(row["contender"], extra["error"]) for row in rows for extra in row["extra"] if "error" in extra]
    assert not failed
    checked = [row for row in rows if row["records_out"]]
    assert checked, f"{scenario} checked no output"
    for row in checked:
        verdict = report.output_ok(row)
        if row["contender"] in AT_LEAST_ONCE:
            assert verdict.startswith("yes"), (row["contender"], verdict)
        else:
            assert verdict == "yes", (row["contender"], verdict)


def test_the_scenarios_measured_what_they_report(smoke_run):
    copy = {row["contender"] for row in _rows(smoke_run, "copy")}
    assert copy == {"eos-kafka", "eos-kafka at-least-once", "spark-kafka", "spark-kafka -> eos-kafka", "kafka-copier",
                    "python-loop"}
    assert all(row["median_records_per_s"] > 0 for row in _rows(smoke_run, "copy"))
    cold = {row["contender"]: row for row in _rows(smoke_run, "cold")}
    assert list(cold) == list(SMOKE.cold_contenders) == ["eos-kafka", "spark-kafka"]
    assert set(SMOKE.cold_contenders) < set(COLD_CONTENDERS)  # the others from the quick scale on
    for row in cold.values():  # a process of its own, Spark's start outside the time from start()
        assert row["process_s"] > row["median_s"] > 0 and row["cpu_s_per_million"] > 0, row
        assert row["cpu_s_per_million_by_group"]["python"] > 0 or row["contender"] in JVM_ONLY, row
    # Spark's charge comes from python-stream over jvm-stream, cold contenders of the larger scales.
    split = report.cpu_split({**cold, PYTHON_STREAM: {"cpu_s_per_million": 3.0}, "jvm-stream": {"cpu_s_per_million": 1.0}})
    assert split is not None and split["charge"] == 2.0 and split["own"] == cold["eos-kafka"]["cpu_s_per_million"] - 3
    assert {(row["side"], row["contender"]) for row in _rows(smoke_run, "alone")} == {
        (side, name) for side in ("source", "sink") for name in ("eos-kafka", "spark-kafka")}
    ids = {row["contender"]: row["transactional_ids"] for row in _rows(smoke_run, "scaling")}
    assert set(ids) == {"eos-kafka", "eos-kafka task per partition", "python-stream task per partition", "spark-kafka"}
    assert ids["eos-kafka"] >= 1 and ids["spark-kafka"] == ids["python-stream task per partition"] == 0
    per_batch = _rows(smoke_run, "per-batch")
    assert {row["contender"] for row in per_batch} == {"eos-kafka", "spark-kafka", PYTHON_STREAM}
    assert all(row["batch_p50_ms"] for row in per_batch)
    claim, *copies = _rows(smoke_run, "fencing")
    assert claim["tasks"] == SMOKE.fencing_claims and claim["claim_p50_ms"] > 0
    assert {row["contender"] for row in copies} == {"eos-kafka", "eos-kafka fencing off"}
    for row in _rows(smoke_run, "latency"):
        assert row["latency_records"] > 0 and 0 < row["latency_p50_ms"] <= row["latency_p99_ms"], row
        assert row["batch_p50_ms"] > 0 and row["between_batches_p50_ms"] is not None, row
    memory, = _rows(smoke_run, "memory")
    assert memory["batches"] > 1 and any(w["role"] == "worker" for w in memory["workers"])
    variants = {row["contender"]: row for row in _rows(smoke_run, "variants")}
    assert list(variants) == ["spark-kafka", "eos-kafka", PYTHON_STREAM, "all-columns"]
    assert variants["all-columns"]["settings"] == "source.schema= source.minRecordsPerPartition=500"


def test_the_readme_shows_the_newest_run_of_each_scenario(smoke_run, tmp_path):
    rows, seconds, started = smoke_run
    report.save(rows, SMOKE.name, started, "python -m benchmarks.bench --scale smoke", seconds, tmp_path)
    assert (tmp_path / "latest.csv").read_text().count("\n") == len(rows) + 1
    readme = tmp_path / "README.md"
    readme.write_text(f"# Benchmarks\n\n{report.START}\nold figures\n{report.END}\n\n## What is measured\n")
    report.update_readme(tuple(SCENARIOS), tmp_path, readme)
    text = readme.read_text()
    assert "old figures" not in text and text.endswith("## What is measured\n")
    assert "`python -m benchmarks.bench --scale smoke` (smoke scale" in text
    block = text.split(report.START)[1].split(report.END)[0]
    table = [line for line in block.splitlines()
             if line.startswith("| ") and not line.startswith(("| scenario", "| ---"))]
    assert len(table) == len(rows)
    assert {line.split(" | ")[0][2:] for line in table} == set(SCENARIOS)
    assert "failed" not in block and "| no " not in block


def test_the_runner_takes_scenarios_scales_and_variants():
    args = bench.parse_args(["--scenario", "copy,latency", "--scale", "smoke", "--repeats", "2",
                             "--variant", "bigger", "source.minRecordsPerPartition=1000", "conf.spark.x=1",
                             "--records", "500"])
    assert args.scenario == ["copy", "latency"] and args.scale.name == "smoke" and args.scale.repeats == 2
    variant, = args.options.variants
    assert (variant.name, variant.source, variant.conf) == ("bigger", {"minRecordsPerPartition": "1000"},
                                                            {"spark.x": "1"})
    assert args.options.variants_case == (SMOKE.variants_case[0], 500, SMOKE.variants_case[2])
    assert bench.parse_args([]).scenario == list(SCENARIOS)
    latency = bench.parse_args(["--scenario", "latency", "--scale", "quick", "--rate", "5000", "--seconds", "60"]).scale
    assert (latency.latency_rates, latency.latency_seconds) == ((5000,), 60)
    assert bench.parse_args(["--scale", "quick"]).scale == SCALES["quick"]
    for wrong in (["--scenario", "txn"], ["--variant", "x", "side.a=1"], ["--variant", "python-stream", "sink.a=1"]):
        with pytest.raises(SystemExit):
            bench.parse_args(wrong)


def test_the_time_between_batches_is_from_one_batchs_end_to_the_next_ones_start():
    progress = [{"timestamp": "2026-12-07T19:54:51.000Z", "durationMs": {"triggerExecution": 200}},
                {"timestamp": "2026-12-07T19:54:51.203Z", "durationMs": {"triggerExecution": 150}},
                {"timestamp": "2026-12-07T19:54:51.400Z", "durationMs": {"triggerExecution": 100}}]
    assert [round(ms) for ms in contenders.between_batches_ms(progress)] == [3, 47]


def test_the_cpu_split_takes_out_what_spark_charges_a_python_pipeline():
    rows = {name: {"cpu_s_per_million": cpu} for name, cpu in
            (("eos-kafka", 18.0), ("spark-kafka", 16.0), ("python-stream", 14.0), ("jvm-stream", 5.0))}
    split = report.cpu_split(rows)
    assert split == {"charge": 9.0, "own": 4.0, "without_charge": 9.0, "ratio": 9.0 / 16.0}
    assert report.cpu_split({**rows, "jvm-stream": {"cpu_s_per_million": None}}) is None


def test_the_protocol_load_benchmark_shows_a_first_attempts_reads_flat_in_tasks_and_pipelines(kafka):
    # The smoke of benchmarks/protocol_load (make protocol-load runs its full cases): what a task's
    # claims read takes is the layout's, on any machine; the times mean nothing here.
    from benchmarks import protocol_load

    chosen = protocol_load.cases([1, 2, 3], [1, 3], [5, 20], layout1_max=60, reference=(2, 1, 20))
    results = {r.key: r for r in protocol_load.run_all(kafka.bootstrap_servers, chosen, concurrency=3)}
    assert {r.tasks_run for r in results.values()} >= {5, 15, 20, 60}
    for (layout, pipelines, tasks), r in results.items():
        if layout == 2:  # its plan record: whatever the batch's tasks and the cluster's pipelines
            assert r.records_read["max"] == 1, (layout, pipelines, tasks, r.records_read)
        if layout == 3:  # without a group: its own batch's claims and releases, no other pipeline's
            assert r.records_read["max"] <= 2 * tasks, (layout, pipelines, tasks, r.records_read)
    # Layout 1: a task reads what the batch's earlier tasks and the other pipelines appended.
    assert results[(1, 3, 20)].records_read["p99"] > results[(1, 1, 5)].records_read["p99"] > 1
    assert results[(1, 3, 20)].records_read["max"] > 2 * 20
    table = protocol_load.table(list(results.values()))
    assert "| 2 | 3 × 20 |" in table and "| 2, no group | 3 × 20 |" in table


def test_the_stable_read_beside_the_claims_read_and_the_partition_spread_benchmarks_run(kafka):
    # Smokes of two standalone measurements (their docs in benchmarks/README.md): each order and
    # kind measured, every task timed.
    from benchmarks import early_stable_read, partition_spread

    early = early_stable_read.rows_of(early_stable_read.measure(kafka.bootstrap_servers, [], [0.0], 3, warm_up=2))
    assert [row["latency_ms"] for row in early] == [0.0]
    assert all(early[0][order]["median_ms"] > 0 for order in early_stable_read.ORDERS)
    spread = partition_spread.rows_of(partition_spread.measure(kafka.bootstrap_servers, [1, 4], 2, warm_up=2))
    assert {(row["partitions"], row["kind"]) for row in spread} == {(p, k) for p in (1, 4) for k in partition_spread.KINDS}
    assert all(row["median_ms"] >= row["records_median_ms"] > 0 for row in spread)
