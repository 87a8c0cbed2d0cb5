"""Summaries, tables, result files and plots of a benchmark run.

Every run appends one JSON line to ``results/history.jsonl`` (machine, versions, every
measurement), so the effect of a change shows against earlier runs; ``results/latest.csv`` and
the PNG plots describe the newest run.
"""
from __future__ import annotations

import csv
import importlib.metadata
import json
import os
import platform
import statistics
import time
from pathlib import Path

from pyspark_eos.testing.maven_jars import SPARK_KAFKA_CONNECTOR, kafka_version

from .contenders import Run

RESULTS = Path(__file__).resolve().parent / "results"


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


def save_json(name: str, data) -> Path:
    """One tool's results as results/<name>.json."""
    RESULTS.mkdir(exist_ok=True)
    path = RESULTS / f"{name}.json"
    path.write_text(json.dumps(data, indent=2) + "\n")
    return path


def percentile(values: list[float], q: float) -> float | None:
    if not values:
        return None
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(round(q * (len(ordered) - 1))))]


def summarize(part: str, case: dict, runs: list[Run]) -> dict:
    """Medians over the repeats of one contender in one case."""
    batches = [ms for run in runs for ms in run.batch_ms]
    return {
        "part": part, **case, "contender": runs[0].contender, "repeats": len(runs),
        "records": runs[0].records_in,
        "median_s": statistics.median(r.seconds for r in runs),
        "median_records_per_s": statistics.median(r.records_per_second for r in runs),
        "batch_p50_ms": percentile(batches, 0.5), "batch_p99_ms": percentile(batches, 0.99),
        # A query's start (group join, each worker's first clients) shows in its first batch.
        "first_batch_ms": _median_first([r.extra.get("warm_up_batch_ms") or r.batch_ms for r in runs]),
        # How busy the machine's cores were during the runs (every process): a pipeline that keeps
        # them busy is paced by its CPU per record, one that does not by its stages waiting.
        "cores_busy": (statistics.median(r.extra["cpu_busy"] for r in runs)
                       if all("cpu_busy" in r.extra for r in runs) else None),
        # A run's time in no micro-batch: the query's start and stop (for a Python source, Spark
        # starts a new Python process for it), which a short run counts against its throughput.
        "start_stop_ms": (statistics.median(r.extra["outside_batches_ms"] for r in runs)
                          if all("outside_batches_ms" in r.extra for r in runs) else None),
        "records_out": [r.records_out for r in runs],
        "extra": [r.extra for r in runs],
    }


def _median_first(batch_lists: list[list[float]]) -> float | None:
    return statistics.median(batches[0] for batches in batch_lists) if all(batch_lists) else None


def print_phases(rows: list[dict]) -> None:
    """Where a micro-batch's time goes: the median of each Spark phase, per contender and case."""
    phases = [row for row in rows if any(extra.get("phases_ms") for extra in row["extra"])]
    if not phases:
        return
    names = list(next(extra["phases_ms"] for extra in phases[0]["extra"] if extra.get("phases_ms")))
    print("\nMedian ms per micro-batch phase (Spark's durationMs)")
    print("  ".join(f"{h:>14}" for h in ["batch_records", "contender", *names]))
    for row in phases:
        medians = [statistics.median(extra["phases_ms"][name] for extra in row["extra"] if extra.get("phases_ms"))
                   for name in names]
        print("  ".join(f"{str(c):>14}" for c in [row.get("batch_records", "-"), row["contender"],
                                                  *(f"{m:,.0f}" for m in medians)]))


def print_table(title: str, rows: list[dict], case_keys: tuple[str, ...]) -> None:
    print(f"\n{title}")
    header = [*case_keys, "contender", "records/s", "vs eos-kafka", "p50 batch ms", "p99 batch ms", "1st batch ms",
              "start+stop ms", "cores busy", "out ok"]
    print("  ".join(f"{h:>14}" for h in header))
    for row in rows:
        reference = next((r for r in rows if r["contender"] == "eos-kafka"
                          and all(r[k] == row[k] for k in case_keys)), None)
        base = reference["median_records_per_s"] if reference else 0
        ratio = row["median_records_per_s"] / base if base else None
        cells = [*(row[k] for k in case_keys), row["contender"], f"{row['median_records_per_s']:,.0f}",
                 f"{ratio:.2f}x" if ratio else "-", ms(row["batch_p50_ms"]), ms(row["batch_p99_ms"]),
                 ms(row.get("first_batch_ms")), ms(row.get("start_stop_ms")), _percent(row.get("cores_busy")),
                 output_ok(row)]
        print("  ".join(f"{str(c):>14}" for c in cells))


def _percent(fraction: float | None) -> str:
    return f"{fraction:.0%}" if fraction is not None else "-"


def ms(value: float | None) -> str:
    return f"{value:,.0f}" if value is not None else "-"


def print_workers(title: str, workers: list[dict]) -> None:
    """One line per Python process: memory early and late in the run, peak, Kafka clients held."""
    print(f"\n{title}")
    header = ["pid", "role", "samples", "RSS early MiB", "RSS late MiB", "peak MiB", "clients max", "clients end"]
    print("  ".join(f"{h:>14}" for h in header))
    for w in sorted(workers, key=lambda w: (w["role"], w["pid"])):
        cells = [w["pid"], w["role"][-14:], w["samples"], w["rss_mib_early"], w["rss_mib_late"], w["peak_rss_mib"],
                 w["kafka_clients_max"], w["kafka_clients_late"]]
        print("  ".join(f"{str(c):>14}" for c in cells))


def print_worker_peaks(rows: list[dict], contenders: tuple[str, ...]) -> None:
    """Per Spark contender and case: the Python workers' largest peak memory and most Kafka clients."""
    print("\nSpark's Python workers during the runs (max over workers and repeats)")
    print("  ".join(f"{h:>14}" for h in ["case", "contender", "workers", "peak RSS MiB", "clients max"]))
    for row in rows:
        workers = [w for extra in row["extra"] for w in extra.get("workers", []) if w["role"] == "worker"]
        if row["contender"] in contenders and workers:
            cells = [row.get("record_bytes", "-"), row["contender"], len({w["pid"] for w in workers}),
                     max(w["peak_rss_mib"] for w in workers), max(w["kafka_clients_max"] for w in workers)]
            print("  ".join(f"{str(c):>14}" for c in cells))


def output_ok(row: dict) -> str:
    # Exactly-once contenders must write every record once; Spark's sink may write more (retries).
    wanted = row["records"]
    return "yes" if all(out == wanted for out in row["records_out"]) else f"no {row['records_out']}"


def save(rows: list[dict], scale: str, started: float) -> Path:
    RESULTS.mkdir(exist_ok=True)
    record = {"at": time.strftime("%Y-%m-%dT%H:%M:%S", time.localtime(started)), "scale": scale,
              "wall_s": round(time.time() - started), "machine": machine(), "versions": versions(), "rows": rows}
    with (RESULTS / "history.jsonl").open("a") as history:
        history.write(json.dumps(record) + "\n")
    keys = sorted({k for row in rows for k in row if k not in ("extra",)})
    with (RESULTS / "latest.csv").open("w", newline="") as out:
        writer = csv.DictWriter(out, keys, extrasaction="ignore")
        writer.writeheader()
        writer.writerows(rows)
    return RESULTS / "history.jsonl"


def batch_cost_fit(rows: list[dict]) -> dict[str, tuple[float, float]]:
    """Per contender, the least-squares line batch ms = fixed + per_record * records per batch,
    through the p50 batch durations: ``fixed`` is what a batch costs whatever its size."""
    fits = {}
    for name in sorted({row["contender"] for row in rows}):
        points = [(row["batch_records"], row["batch_p50_ms"]) for row in rows
                  if row["contender"] == name and row["batch_p50_ms"] is not None]
        if len(points) < 2:
            continue
        xs, ys = zip(*points)
        slope, intercept = statistics.linear_regression(xs, ys)
        fits[name] = (intercept, slope)
    return fits
