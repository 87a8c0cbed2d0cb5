"""Summaries, tables and result files of benchmark runs, and the README's results.

Every run of the runner appends one JSON line to ``results/history.jsonl`` (when and where it
ran: the command, the commit, the machine and versions, and every result row), and writes the
newest run's rows to ``results/latest.csv``. Then this module rewrites the block of
benchmarks/README.md between ``<!-- results:start -->`` and ``<!-- results:end -->`` from the
history: for each scenario, the newest run that ran it (``python -m benchmarks.results`` does so
without a run).

The copy's ratio pooled over runs (``python -m benchmarks.results --pooled``): the ratio
(eos-kafka over Spark's connector) pooled over the repeats of
several runs, each repeat's ratio taken within it (its contenders ran one after the other, so the
machine's drift between runs touches it little), as a mean with its 95% interval, for the whole
run and for its later batches alone, and each contender's mean time outside its batches (the
query's start and stop), in its first batch and in its later batches. One run's ratio moves by 0.1
between runs of the same code on 2 cores; pooled over several runs it tells 0.95x from 1.0x. Runs
before ``--since`` (a run's local start time) are left out, so that the pool holds one version of
the code.
"""
from __future__ import annotations

import csv
import importlib.metadata
import json
import logging
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path

from pyspark_eos.testing.maven_jars import SPARK_KAFKA_CONNECTOR, kafka_version

from .contenders import AT_LEAST_ONCE, Run

BENCHMARKS = Path(__file__).resolve().parent
RESULTS = BENCHMARKS / "results"
README = BENCHMARKS / "README.md"
START, END = "<!-- results:start -->", "<!-- results:end -->"


# ----------------------------------------------------------------------------- summaries

def percentile(values: list[float], q: float) -> float | None:
    if not values:
        return None
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(round(q * (len(ordered) - 1))))]


def summarize(scenario: str, case: dict, runs: list[Run]) -> dict:
    """Medians over the repeats of one contender in one case."""
    batches = [ms for run in runs for ms in run.batch_ms]
    return {
        "scenario": scenario, **case, "contender": runs[0].contender,
        "exactly_once": runs[0].contender not in AT_LEAST_ONCE, "repeats": len(runs), "records": runs[0].records_in,
        "median_s": statistics.median(r.seconds for r in runs),
        "median_records_per_s": statistics.median(r.records_per_second for r in runs),
        "batch_p50_ms": percentile(batches, 0.5), "batch_p99_ms": percentile(batches, 0.99),
        # A query's start (group join, each worker's first clients) shows in its first batch.
        "first_batch_ms": _median_first([r.extra.get("warm_up_batch_ms") or r.batch_ms for r in runs]),
        # How busy the machine's cores were during the runs (every process): a pipeline that keeps
        # them busy is paced by its CPU per record, one that does not by its stages waiting.
        "cores_busy": _median_of(runs, "cpu_busy"),
        # A run's time in no micro-batch: the query's start and stop (for a Python source, Spark
        # starts a new Python process for it), which a short run counts against its throughput.
        "start_stop_ms": _median_of(runs, "outside_batches_ms"),
        "records_out": [r.records_out for r in runs],
        "extra": [r.extra for r in runs],
    }


def _median_of(runs: list[Run], key: str) -> float | None:
    return statistics.median(r.extra[key] for r in runs) if all(key in r.extra for r in runs) else None


def _median_first(batch_lists: list[list[float]]) -> float | None:
    return statistics.median(batches[0] for batches in batch_lists) if all(batch_lists) else None


def output_ok(row: dict) -> str:
    """``yes`` when every run wrote every input record exactly once (at least once for an
    at-least-once contender, whose retried tasks may write some twice); ``-`` for a row of no run."""
    outs, wanted = row.get("records_out") or [], row.get("records")
    if not outs:
        return "-"
    if all(out == wanted for out in outs):
        return "yes"
    if not row.get("exactly_once", True) and all(out >= wanted for out in outs):
        return f"yes (+{max(outs) - wanted} repeated)"
    return f"no {outs}"


def ms(value: float | None) -> str:
    return f"{value:,.0f}" if value is not None else "-"


def _percent(fraction: float | None) -> str:
    return f"{fraction:.0%}" if fraction is not None else "-"


def batch_cost_fit(rows: list[dict]) -> dict[str, tuple[float, float]]:
    """Per contender, the least-squares line batch ms = fixed + per_record * records per batch,
    through the p50 batch durations: ``fixed`` is what a batch costs whatever its size."""
    fits = {}
    for name in sorted({row["contender"] for row in rows}):
        points = [(row["batch_records"], row["batch_p50_ms"]) for row in rows
                  if row["contender"] == name and row["batch_p50_ms"] is not None]
        if len({x for x, _ in points}) < 2:
            continue
        xs, ys = zip(*points)
        slope, intercept = statistics.linear_regression(xs, ys)
        fits[name] = (intercept, slope)
    return fits


# ------------------------------------------------------------------------ printed tables

def _print_line(cells) -> None:
    print("  ".join(f"{str(c):>14}" for c in cells))


def print_table(title: str, rows: list[dict], case_keys: tuple[str, ...]) -> None:
    print(f"\n{title}")
    _print_line([*case_keys, "contender", "records/s", "vs eos-kafka", "p50 batch ms", "p99 batch ms", "1st batch ms",
                 "start+stop ms", "cores busy", "out ok"])
    for row in rows:
        reference = next((r for r in rows if r["contender"] == "eos-kafka"
                          and all(r[k] == row[k] for k in case_keys)), None)
        base = reference["median_records_per_s"] if reference else 0
        ratio = row["median_records_per_s"] / base if base else None
        _print_line([*(row[k] for k in case_keys), row["contender"], f"{row['median_records_per_s']:,.0f}",
                     f"{ratio:.2f}x" if ratio else "-", ms(row["batch_p50_ms"]), ms(row["batch_p99_ms"]),
                     ms(row.get("first_batch_ms")), ms(row.get("start_stop_ms")), _percent(row.get("cores_busy")),
                     output_ok(row)])


def print_phases(rows: list[dict]) -> None:
    """Where a micro-batch's time goes: the median of each Spark phase, per contender and case."""
    phases = [row for row in rows if any(extra.get("phases_ms") for extra in row["extra"])]
    if not phases:
        return
    names = list(next(extra["phases_ms"] for extra in phases[0]["extra"] if extra.get("phases_ms")))
    print("\nMedian ms per micro-batch phase (Spark's durationMs)")
    _print_line(["batch_records", "contender", *names])
    for row in phases:
        medians = [statistics.median(extra["phases_ms"][name] for extra in row["extra"] if extra.get("phases_ms"))
                   for name in names]
        _print_line([row.get("batch_records", "-"), row["contender"], *(f"{m:,.0f}" for m in medians)])


def print_workers(title: str, workers: list[dict]) -> None:
    """One line per Python process: memory early and late in the run, peak, Kafka clients held."""
    print(f"\n{title}")
    _print_line(["pid", "role", "samples", "RSS early MiB", "RSS late MiB", "peak MiB", "clients max", "clients end"])
    for w in sorted(workers, key=lambda w: (w["role"], w["pid"])):
        _print_line([w["pid"], w["role"][-14:], w["samples"], w["rss_mib_early"], w["rss_mib_late"], w["peak_rss_mib"],
                     w["kafka_clients_max"], w["kafka_clients_late"]])


def print_worker_peaks(rows: list[dict], contenders: tuple[str, ...]) -> None:
    """Per Spark contender and case: the Python workers' largest peak memory and most Kafka clients."""
    print("\nSpark's Python workers during the runs (max over workers and repeats)")
    _print_line(["case", "contender", "workers", "peak RSS MiB", "clients max"])
    for row in rows:
        workers = [w for extra in row["extra"] for w in extra.get("workers", []) if w["role"] == "worker"]
        if row["contender"] in contenders and workers:
            _print_line([row.get("record_bytes", "-"), row["contender"], len({w["pid"] for w in workers}),
                         max(w["peak_rss_mib"] for w in workers), max(w["kafka_clients_max"] for w in workers)])


def print_variant(row: dict, spark: dict) -> None:
    """One variant's medians: throughput against Spark's connector, the later batches (after each
    run's first, the query's start: steadier between runs than records/s) and their phases, the
    run's time outside batches (the query's start and stop), and CPU per record by process group."""
    from .contenders import phase_medians

    runs = [extra for extra in row["extra"] if "batch_phases_ms" in extra]
    if not runs:
        print(f"{row['contender']:>24} failed: {row['extra'][0].get('error', '?')[:300]}")
        return
    speed, base = row["median_records_per_s"], spark["median_records_per_s"]
    later = [phases for extra in runs for phases in extra["batch_phases_ms"][1:]]
    steady = statistics.median(p["triggerExecution"] for p in later) if later else None
    cpu_us = {group: statistics.median(extra["cpu_s"][group] for extra in runs) / row["records"] * 1e6
              for group in runs[0]["cpu_s"]}
    print(f"{row['contender']:>24} {speed:>10,.0f} records/s {speed / base if base else 0:>6.2f}x spark-kafka   "
          f"later batches p50 {ms(steady)} ms   outside batches {ms(row['start_stop_ms'])} ms   "
          f"cores busy {_percent(row['cores_busy'])}   out ok: {output_ok(row)}   {row.get('settings', '')}")
    print(f"{'':>24} later batches' phases p50: "
          + ", ".join(f"{k} {v:,.0f}" for k, v in phase_medians(later).items()))
    print(f"{'':>24} CPU per record: " + ", ".join(f"{group} {us:.1f} us" for group, us in cpu_us.items())
          + f" (total {sum(cpu_us.values()):.1f} us)")


def print_cold(rows: list[dict]) -> None:
    """One case of cold jobs: each contender's throughput from start() to the end against Spark's
    connector, where its time went, its CPU per million records (every process), and eos-kafka's
    ratio once Spark's charge for any Python pipeline (python-stream's) is taken out."""
    by_name = {row["contender"]: row for row in rows}
    spark, python = by_name.get("spark-kafka"), by_name.get("python-stream")
    first = rows[0]
    print(f"\nCold jobs: {first['records']:,} records of {first['record_bytes']:,} B, a fresh driver process each, "
          f"medians of {first['repeats']}")
    _print_line(["contender", "records/s", "vs spark-kafka", "seconds", "start+stop ms", "1st batch ms",
                 "later p50 ms", "CPU s / M rec", "process s", "out ok"])
    for row in rows:
        ratio = _ratio(row, spark, "median_records_per_s")
        _print_line([row["contender"], f"{row['median_records_per_s']:,.0f}", f"{ratio:.2f}x" if ratio else "-",
                     f"{row['median_s']:.1f}", ms(row.get("start_stop_ms")), ms(row.get("first_batch_ms")),
                     ms(row.get("later_batch_p50_ms")), _decimal(row.get("cpu_s_per_million")),
                     _decimal(row.get("process_s")), output_ok(row)])
    eos = by_name.get("eos-kafka")
    fixed = {name: fixed_cost_s(row) for name, row in by_name.items()}
    if None not in fixed.values():
        print("  a query's fixed seconds (start+stop, first batch over later ones): "
              + ", ".join(f"{name} {seconds:.2f}" for name, seconds in fixed.items()))
    charge = python_charge_s(python, spark)
    if charge is not None and eos and eos["median_s"] > charge:
        own = spark["median_s"] / (eos["median_s"] - charge)
        print(f"  Spark's charge for a Python source and sink (python-stream's fixed seconds over spark-kafka's): "
              f"{charge:.2f} s; eos-kafka without it {own:.2f}x spark-kafka")
    for row in rows:
        groups = row.get("cpu_s_per_million_by_group") or {}
        print(f"  CPU s / M rec of {row['contender']}: " + ", ".join(f"{g} {s:.1f}" for g, s in groups.items()))
    split = cpu_split(by_name)
    if split:
        print(f"  CPU s / M rec: Spark's charge for moving the records through Python {split['charge']:.1f} "
              f"(python-stream over jvm-stream); eos-kafka's own {split['own']:.1f} (over python-stream); "
              f"eos-kafka without Spark's charge {split['without_charge']:.1f}, {split['ratio']:.2f}x spark-kafka's")


def fixed_cost_s(row: dict | None) -> float | None:
    """A query's fixed seconds: its time outside batches and its first batch's excess over its later ones."""
    if not row or None in (row.get(k) for k in ("start_stop_ms", "first_batch_ms", "later_batch_p50_ms")):
        return None
    return (row["start_stop_ms"] + max(0.0, row["first_batch_ms"] - row["later_batch_p50_ms"])) / 1000


def python_charge_s(python_stream: dict | None, spark: dict | None) -> float | None:
    """What Spark charges a query of any Python source and sink beyond what a query of its own
    Kafka connector pays once: the difference of their fixed costs (a fresh Python process for the
    source, the Python workers' start and imports in the first batch)."""
    python_fixed, spark_fixed = fixed_cost_s(python_stream), fixed_cost_s(spark)
    return None if python_fixed is None or spark_fixed is None else max(0.0, python_fixed - spark_fixed)


def cpu_split(by_name: dict[str, dict]) -> dict[str, float] | None:
    """eos-kafka's CPU per million records apart from what Spark charges any Python source and
    sink for the same records: python-stream's (Spark handing Arrow batches to and from Python
    workers, no Kafka) over jvm-stream's (Spark's engine alone, no Python, no Kafka). A ratio
    below 1.0: less CPU than spark-kafka."""
    cpu = {name: (by_name.get(name) or {}).get("cpu_s_per_million")
           for name in ("eos-kafka", "spark-kafka", "python-stream", "jvm-stream")}
    if None in cpu.values():
        return None
    charge = max(0.0, cpu["python-stream"] - cpu["jvm-stream"])
    without = cpu["eos-kafka"] - charge
    return {"charge": charge, "own": cpu["eos-kafka"] - cpu["python-stream"], "without_charge": without,
            "ratio": without / cpu["spark-kafka"]}


def print_batch_charge(rows: list[dict]) -> None:
    """Per batch size: what Spark charges a micro-batch of any Python source and sink over one of
    its own connector (python-stream's p50 over spark-kafka's), and what is left of eos-kafka's
    p50 once that is taken out."""
    for size in sorted({row["batch_records"] for row in rows}):
        p50 = {row["contender"]: row["batch_p50_ms"] for row in rows if row["batch_records"] == size}
        eos, spark, python = (p50.get(name) for name in ("eos-kafka", "spark-kafka", "python-stream"))
        if None in (eos, spark, python):
            continue
        if python <= spark:  # python-stream moves no record through Kafka: at this size Kafka's work paces a batch
            print(f"  {size:>7,} records a batch: python-stream's batch ({python:,.0f} ms) is no slower than "
                  f"spark-kafka's ({spark:,.0f} ms): a batch is paced by its records' Kafka work, no charge to take out")
            continue
        print(f"  {size:>7,} records a batch: Spark's charge for a Python source and sink {python - spark:,.0f} ms "
              f"a batch (python-stream over spark-kafka); eos-kafka's own {eos - python:,.0f} ms over python-stream; "
              f"eos-kafka without Spark's charge {spark / (eos - (python - spark)):.2f}x spark-kafka's pace")


def _decimal(value: float | None) -> str:
    return f"{value:,.1f}" if value is not None else "-"


# ---------------------------------------------------------------------------- result files

@contextmanager
def standalone_cluster(name: str, **cluster_settings):
    """What a standalone measurement runs on: logging to the console, the suite's JVM archives, and
    an embedded cluster in a directory of its own (``cluster_settings``: EmbeddedKafkaCluster's)."""
    from pyspark_eos.testing.embedded_kafka import EmbeddedKafkaCluster
    from tests.class_archives import use_suite_jvms

    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s: %(message)s", datefmt="%H:%M:%S")
    use_suite_jvms()
    with tempfile.TemporaryDirectory(prefix=f"{name}-") as directory, \
            EmbeddedKafkaCluster(directory=directory, **cluster_settings) as cluster:
        yield cluster


def append_measurement(path: Path, **fields) -> None:
    """One line of a standalone measurement's results file: its date, the machine, ``fields``."""
    line = {"date": datetime.now(timezone.utc).isoformat(timespec="seconds"), "machine": machine(), **fields}
    with open(path, "a") as results:
        results.write(json.dumps(line) + "\n")


def machine() -> dict:
    memory_kb = next((int(line.split()[1]) for line in Path("/proc/meminfo").read_text().splitlines()
                      if line.startswith("MemTotal:")), 0)
    return {"cores": os.cpu_count(), "memory_gib": round(memory_kb / 2**20, 1), "cpu": _cpu_model(),
            "python": platform.python_version(), "os": platform.platform()}


def _cpu_model() -> str:
    for line in Path("/proc/cpuinfo").read_text().splitlines():
        if line.startswith("model name"):
            return line.split(":", 1)[1].strip()
    return platform.processor()


def versions() -> dict:
    return {"pyspark": importlib.metadata.version("pyspark"), "kafka": kafka_version(),
            "spark_kafka_connector": SPARK_KAFKA_CONNECTOR.version(),
            "confluent_kafka": importlib.metadata.version("confluent-kafka"),
            "pyarrow": importlib.metadata.version("pyarrow"),
            "eos_kafka": importlib.metadata.version("pyspark-eos-kafka")}


def code_version() -> dict:
    """The commit measured, and whether the runtime or the benchmarks had uncommitted changes."""
    def git(*args: str) -> str:
        return subprocess.run(["git", *args], cwd=BENCHMARKS.parent, capture_output=True, text=True).stdout.strip()
    return {"commit": git("rev-parse", "--short", "HEAD"),
            "uncommitted_changes": bool(git("status", "--porcelain", "--", "pyspark_eos", "benchmarks"))}


def save(rows: list[dict], scale: str, started: float, command: str, scenario_s: dict[str, float],
         results: Path = RESULTS) -> Path:
    """Appends the run to ``results``/history.jsonl and writes its rows to latest.csv."""
    results.mkdir(parents=True, exist_ok=True)
    record = {"at": time.strftime("%Y-%m-%dT%H:%M:%S", time.localtime(started)), "scale": scale,
              "command": command, "wall_s": round(time.time() - started),
              "scenario_s": {name: round(s) for name, s in scenario_s.items()}, **code_version(),
              "machine": machine(), "versions": versions(), "rows": rows}
    with (results / "history.jsonl").open("a") as history:
        history.write(json.dumps(record) + "\n")
    flat = [{k: v for k, v in row.items() if not isinstance(v, (dict, list)) or k == "records_out"} for row in rows]
    keys = list(dict.fromkeys(k for row in flat for k in row))
    with (results / "latest.csv").open("w", newline="") as out:
        writer = csv.DictWriter(out, keys)
        writer.writeheader()
        writer.writerows(flat)
    return results / "history.jsonl"


def history(results: Path = RESULTS) -> list[dict]:
    path = results / "history.jsonl"
    return [json.loads(line) for line in path.read_text().splitlines()] if path.exists() else []


def scenario_of(row: dict) -> str:
    return row.get("scenario") or row["part"]  # runs before the scenarios named them parts


# ------------------------------------------------------------------------ README's results

def newest_by_scenario(runs: list[dict]) -> dict[str, dict]:
    """For each scenario, the newest run that ran it (runs of the scenario runner only)."""
    newest: dict[str, dict] = {}
    for run in runs:
        if "scenario_s" in run:
            for name in run["scenario_s"]:
                newest[name] = run
    return newest


def render_results(runs: list[dict], order: tuple[str, ...]) -> str:
    """The README's results block: where and how each run ran, then one table row per scenario,
    case and contender, in ``order`` of scenarios."""
    newest = newest_by_scenario(runs)
    if not newest:
        return "No run of `python -m benchmarks.bench` recorded yet."
    lines = ["_Generated from `results/history.jsonl` by `python -m benchmarks.results` (the runner calls it); "
             "edit the code, not this block._", ""]
    used = list({id(run): run for run in (newest[name] for name in order if name in newest)}.values())
    for run in used:
        names = [name for name in order if newest.get(name) is run]
        lines.append(f"- {_describe_run(run)}; scenarios: {', '.join(names)}.")
    lines += ["", "| scenario | case | contender | result | ratio | out ok |", "| --- | --- | --- | --- | --- | --- |"]
    for name in order:
        if name in newest:
            rows = [row for row in newest[name]["rows"] if scenario_of(row) == name]
            lines += [_table_row(name, row, rows) for row in rows]
    return "\n".join(lines)


def _describe_run(run: dict) -> str:
    m, v = run["machine"], run["versions"]
    changes = " with uncommitted changes" if run.get("uncommitted_changes") else ""
    return (f"{run['at'].replace('T', ' ')}, `{run['command']}` ({run['scale']} scale, {run['wall_s'] / 60:.1f} "
            f"minutes) at commit {run.get('commit', '?')}{changes}, on {m['cores']} cores ({m['cpu']}), "
            f"{m['memory_gib']} GiB; Kafka {v['kafka']}, PySpark {v['pyspark']} (Spark's Kafka connector "
            f"{v['spark_kafka_connector']}), confluent-kafka {v['confluent_kafka']}, pyarrow {v['pyarrow']}, "
            f"Python {m['python']}")


# Per scenario: the case's columns, the contender measured against (its ratio's denominator).
_CASES = {"copy": ("record_bytes",), "cold": ("record_bytes", "records"), "alone": ("side",),
          "scaling": ("partitions",), "per-batch": ("batch_records",), "fencing": ("partitions",), "latency": ("rate",),
          "memory": ("rate",), "variants": ("record_bytes",)}
_REFERENCE = {"fencing": "eos-kafka fencing off"}
_CASE_UNITS = {"record_bytes": " B", "partitions": " partitions", "batch_records": " records a batch",
               "rate": " records/s", "side": "", "records": " records"}


def _table_row(scenario: str, row: dict, rows: list[dict]) -> str:
    keys = _CASES[scenario]
    case = ", ".join(f"{row[k]:,}{_CASE_UNITS[k]}" if isinstance(row[k], int) else f"{row[k]}{_CASE_UNITS[k]}"
                     for k in keys if row.get(k) is not None)
    reference_name = _REFERENCE.get(scenario, "spark-kafka")
    same_case = [r for r in rows if all(r.get(k) == row.get(k) for k in keys)]
    reference = next((r for r in same_case if r["contender"] == reference_name), None)
    contender = f"{row['contender']} ({row['settings']})" if row.get("settings") else row["contender"]
    result, ratio = _result(scenario, row, reference)
    if scenario == "cold" and row["contender"] == "eos-kafka":
        split = cpu_split({r["contender"]: r for r in same_case})
        if split:
            result += (f" ({split['without_charge']:.1f} without Spark's charge for moving the records through Python, "
                       f"{split['ratio']:.2f}x spark-kafka's)")
    ratio_text = f"{ratio:.2f}x {reference_name}" if ratio and row is not reference else ""
    return f"| {scenario} | {case or '-'} | {contender} | {result} | {ratio_text} | {output_ok(row)} |"


def _result(scenario: str, row: dict, reference: dict | None) -> tuple[str, float | None]:
    """What the row measured, and the ratio against its reference (above 1.0x: better)."""
    if row.get("extra") and any("error" in extra for extra in row["extra"]):
        return "failed: " + next(e["error"] for e in row["extra"] if "error" in e).splitlines()[0][:120], None
    if scenario == "latency":
        result = (f"latency p50 {ms(row['latency_p50_ms'])} / p99 {ms(row['latency_p99_ms'])} ms "
                  f"(max {ms(row['latency_max_ms'])}), {row['batches']:,} batches")
        if row.get("batch_p50_ms"):
            result += f" of p50 {ms(row['batch_p50_ms'])} ms"
        if row.get("between_batches_p50_ms") is not None:
            result += f", {ms(row['between_batches_p50_ms'])} ms between them"
        if "kept_up" in row:
            result += (f"; {'kept up' if row['kept_up'] else 'fell behind'}, caught up "
                       f"{row['catch_up_s']:.1f} s after the input's end")
        return result, _ratio(reference, row, "latency_p50_ms")
    if scenario == "memory":
        workers = [w for w in row["workers"] if w["role"] == "worker"]
        if not workers:
            return f"{row['batches']:,} batches, no Python worker sampled", None
        growth = [w["rss_mib_late"] - w["rss_mib_early"] for w in workers]
        return (f"{row['minutes']:g} min, {row['batches']:,} batches; {len(workers)} Python workers: resident memory "
                f"late - early {min(growth):+.1f} to {max(growth):+.1f} MiB, peak "
                f"{max(w['peak_rss_mib'] for w in workers)} MiB; Kafka clients at most "
                f"{max(w['kafka_clients_max'] for w in workers)}, at the end "
                f"{max(w['kafka_clients_late'] for w in workers)}"), None
    if "claim_p50_ms" in row:
        return f"claim p50 {row['claim_p50_ms']:.1f} / p99 {row['claim_p99_ms']:.1f} ms over {row['tasks']} tasks", None
    result = f"{row['median_records_per_s']:,.0f} records/s"
    if scenario == "per-batch":
        return f"batch p50 {ms(row['batch_p50_ms'])} / p99 {ms(row['batch_p99_ms'])} ms", \
            _ratio(reference, row, "batch_p50_ms")
    if scenario == "cold":
        result += f"; {row['median_s']:.1f} s from start(); start+stop {ms(row['start_stop_ms'])} ms"
        if row.get("cpu_s_per_million") is not None:
            result += f"; CPU {row['cpu_s_per_million']:.1f} s per million records"
        return result, _ratio(row, reference, "median_records_per_s")
    if scenario == "scaling":
        result += (f"; a batch after the first {ms(row['steady_batch_ms'])} ms; "
                   f"{row['transactional_ids']} transactional ids")
    elif row.get("batch_p50_ms") is not None:
        result += f"; batch p50 {ms(row['batch_p50_ms'])} / p99 {ms(row['batch_p99_ms'])} ms"
        if row.get("start_stop_ms") is not None:
            result += f"; start+stop {ms(row['start_stop_ms'])} ms"
    return result, _ratio(row, reference, "median_records_per_s")


def _ratio(numerator: dict | None, denominator: dict | None, key: str) -> float | None:
    """numerator[key] / denominator[key], when both are there (for durations, pass them swapped)."""
    if not numerator or not denominator or not numerator.get(key) or not denominator.get(key):
        return None
    return numerator[key] / denominator[key]


def update_readme(order: tuple[str, ...], results: Path = RESULTS, readme: Path = README) -> None:
    """Rewrites the README's block between the markers from ``results``/history.jsonl."""
    text = readme.read_text()
    if START not in text or END not in text:
        raise ValueError(f"{readme} has no {START} ... {END} block to rewrite")
    head, rest = text.split(START, 1)
    _, tail = rest.split(END, 1)
    readme.write_text(f"{head}{START}\n{render_results(history(results), order)}\n{END}{tail}")


# ----------------------------------------------------------------- the copy's pooled ratio

# Student's t, 97.5% quantile, by degrees of freedom (a two-sided 95% interval of a mean).
_T975 = {1: 12.71, 2: 4.30, 3: 3.18, 4: 2.78, 5: 2.57, 6: 2.45, 7: 2.36, 8: 2.31, 9: 2.26, 10: 2.23,
         12: 2.18, 15: 2.13, 20: 2.09, 25: 2.06, 30: 2.04, 40: 2.02, 60: 2.00}


@dataclass(frozen=True)
class Repeat:
    """One contender's run: seconds in all, and their parts."""

    seconds: float
    outside_s: float      # the query's start and stop (no micro-batch)
    first_batch_s: float  # carries the query's start on the executors: workers' clients, a group join
    later_s: float        # the micro-batches after the first

    @classmethod
    def from_extra(cls, extra: dict) -> Repeat:
        # A run's time outside its batches plus each batch's time is its total (less the empty
        # batch that ends a Trigger.AvailableNow run, which the time outside counts).
        batches = [phases["triggerExecution"] / 1000 for phases in extra["batch_phases_ms"]]
        outside = extra["outside_batches_ms"] / 1000
        return cls(outside + sum(batches), outside, batches[0], sum(batches[1:]))


def interval(values: list[float]) -> tuple[float, float]:
    """Mean and the half-width of its 95% interval."""
    if len(values) < 2:
        return values[0], float("nan")
    known = [d for d in _T975 if d <= len(values) - 1]
    return statistics.mean(values), _T975[max(known)] * statistics.stdev(values) / len(values) ** 0.5


def paired_repeats(runs: list[dict], since: str, scale: str, contender: str, against: str) -> dict[int, list]:
    """(run's start, repeat index, contender's Repeat, other's Repeat) per record size."""
    pairs: dict[int, list] = {}
    for run in runs:
        if run["at"] < since or run["scale"] != scale:
            continue
        rows = {(row["record_bytes"], row["contender"]): row for row in run["rows"] if scenario_of(row) == "copy"}
        for (size, name), ours in rows.items():
            theirs = rows.get((size, against))
            if name != contender or theirs is None or not _has_phases(ours) or not _has_phases(theirs):
                continue
            for index, (a, b) in enumerate(zip(_repeats(ours), _repeats(theirs))):
                pairs.setdefault(size, []).append((run["at"], index, a, b))
    return pairs


def _has_phases(row: dict) -> bool:
    return all("outside_batches_ms" in extra and extra.get("batch_phases_ms") for extra in row["extra"])


def _repeats(row: dict) -> list[Repeat]:
    return [Repeat.from_extra(extra) for extra in row["extra"]]


def print_pooled(pairs: dict[int, list], contender: str, against: str) -> None:
    for size, repeats in sorted(pairs.items()):
        runs = len({at for at, *_ in repeats})
        print(f"\n{size} B: {len(repeats)} repeats of {runs} run(s); ratio = {contender} / {against} "
              "records/s, taken within each repeat")
        for at, index, ours, theirs in repeats:
            print(f"  {at} repeat {index + 1}: {theirs.seconds / ours.seconds:.2f}x   later batches "
                  f"{theirs.later_s / ours.later_s:.2f}x")
        whole, whole_ci = interval([theirs.seconds / ours.seconds for *_, ours, theirs in repeats])
        later, later_ci = interval([theirs.later_s / ours.later_s for *_, ours, theirs in repeats])
        print(f"  whole run:      {whole:.3f}x +- {whole_ci:.3f} (95% interval of the mean)")
        print(f"  later batches:  {later:.3f}x +- {later_ci:.3f}")
        for name, side in ((contender, 2), (against, 3)):
            parts = [r[side] for r in repeats]
            print(f"  {name:>24}: start+stop {statistics.mean(p.outside_s for p in parts):5.2f} s, first batch "
                  f"{statistics.mean(p.first_batch_s for p in parts):5.2f} s, later batches "
                  f"{statistics.mean(p.later_s for p in parts):6.2f} s (means)")
