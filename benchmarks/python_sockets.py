"""A small micro-batch's latency with Spark's JVM talking to its Python processes over loopback TCP
(Spark's default) and over Unix domain sockets (``spark.python.unix.domain.socket.enabled``, the
recommended setting, docs/deployment.md): eos-kafka and Spark's connector copying a steady input,
as the ``latency`` scenario runs them, in a fresh Spark session per setting (the setting is read
when Spark starts), the settings alternated on one broker.

    .venv/bin/python -m benchmarks.python_sockets [--rounds 2] [--rate 5000] [--seconds 60]

Prints, per setting, the medians over the rounds of each contender's latency p50 and p99 and of
its micro-batches, and eos-kafka's ratios to the connector of the same session; appends them to
results/python-sockets.jsonl. Spark's connector runs no Python: its figures show what else
differs between the sessions.
"""
from __future__ import annotations

import argparse
import dataclasses
import json
import logging
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

from pyspark_eos.testing.embedded_kafka import EmbeddedKafkaCluster

from . import contenders
from .report import append_measurement
from .scenarios import EOS, SPARK, latency_row
from .workload import SCALES

RESULTS = Path(__file__).resolve().parent / "results" / "python-sockets.jsonl"
SOCKETS = "spark.python.unix.domain.socket.enabled"
SETTINGS = {"loopback TCP": "false", "Unix domain sockets": "true"}
MEASURES = ("latency_p50_ms", "latency_p99_ms", "batch_p50_ms")
log = logging.getLogger("benchmarks")


def session_rows(bootstrap: str, work: Path, sockets: str, rate: int, seconds: float) -> list[dict]:
    """Both contenders' latency rows in a Spark session of their own with ``SOCKETS`` = ``sockets``."""
    ground = contenders.start_ground(bootstrap, work, {SOCKETS: sockets})
    scale = dataclasses.replace(SCALES["full"], latency_seconds=seconds)
    try:
        contenders.warm_up(ground)
        return [latency_row(ground, scale, name, rate) for name in (EOS, SPARK)]
    finally:
        ground.spark.stop()


def one_session(bootstrap: str, work: Path, sockets: str, rate: int, seconds: float) -> list[dict]:
    """``session_rows`` in a process of its own: Spark reads the setting when its JVM starts."""
    command = [sys.executable, "-m", "benchmarks.python_sockets", "--session", sockets, "--bootstrap", bootstrap,
               "--work", str(work), "--rate", str(rate), "--seconds", str(seconds)]
    done = subprocess.run(command, capture_output=True, text=True, timeout=1800, cwd=contenders.BENCHMARKS_ROOT)
    if done.returncode != 0:
        raise RuntimeError(f"the session with {SOCKETS}={sockets} failed: {done.stderr[-3000:]}")
    return json.loads(done.stdout.strip().splitlines()[-1])


def summary(runs: dict[str, list[list[dict]]]) -> list[dict]:
    """Per setting and contender, the medians over the rounds, and eos-kafka's ratio to the connector."""
    rows = []
    for setting, rounds in runs.items():
        by_name = {name: {measure: statistics.median(row[measure] for run in rounds for row in run
                                                     if row["contender"] == name) for measure in MEASURES}
                   for name in (EOS, SPARK)}
        ratios = {measure: round(by_name[EOS][measure] / by_name[SPARK][measure], 2) for measure in MEASURES}
        rows.append({"setting": setting, **{name: {k: round(v, 1) for k, v in values.items()}
                                            for name, values in by_name.items()}, "ratio": ratios})
    return rows


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.python_sockets", description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--rate", type=int, default=5000, help="records/s of the steady input")
    parser.add_argument("--seconds", type=float, default=60, help="each contender's run")
    parser.add_argument("--session", help=argparse.SUPPRESS)  # a child's setting: one session, rows as JSON
    parser.add_argument("--bootstrap", help=argparse.SUPPRESS)
    parser.add_argument("--work", type=Path, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s: %(message)s", datefmt="%H:%M:%S",
                        stream=sys.stderr)
    logging.getLogger("py4j").setLevel(logging.WARNING)
    if args.session is not None:
        print(json.dumps(session_rows(args.bootstrap, args.work, args.session, args.rate, args.seconds)))
        return 0
    runs: dict[str, list[list[dict]]] = {setting: [] for setting in SETTINGS}
    with tempfile.TemporaryDirectory(prefix="python-sockets-") as work, \
            EmbeddedKafkaCluster(directory=Path(work) / "kafka", heap="2g") as kafka:
        for round_ in range(args.rounds):
            for setting, measured in runs.items():
                measured.append(one_session(kafka.bootstrap_servers, Path(work), SETTINGS[setting], args.rate,
                                            args.seconds))
                log.info("round %d/%d, %s: %s", round_ + 1, args.rounds, setting, ", ".join(
                    f"{row['contender']} p50 {row['latency_p50_ms']:.0f} ms, batch p50 {row['batch_p50_ms']:.0f} ms"
                    for row in measured[-1]))
    rows = summary(runs)
    print(f"\nLatency at {args.rate:,} records/s, {args.seconds:g} s per run, medians of {args.rounds} round(s)")
    for row in rows:
        eos, spark, ratio = row[EOS], row[SPARK], row["ratio"]
        print(f"{row['setting']:<20} eos-kafka p50 / p99 {eos['latency_p50_ms']:.0f} / {eos['latency_p99_ms']:.0f} ms, "
              f"batch {eos['batch_p50_ms']:.0f} ms; connector {spark['latency_p50_ms']:.0f} / "
              f"{spark['latency_p99_ms']:.0f} ms, batch {spark['batch_p50_ms']:.0f} ms; eos-kafka / connector "
              f"{ratio['latency_p50_ms']:.2f}x / {ratio['latency_p99_ms']:.2f}x (batch {ratio['batch_p50_ms']:.2f}x)")
    append_measurement(RESULTS, rounds=args.rounds, rate=args.rate, seconds=args.seconds, rows=rows)
    return 0


if __name__ == "__main__":
    sys.exit(main())
