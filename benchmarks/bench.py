"""eos-kafka side by side with Spark's Kafka connector (and, in the copy, Kafka's own exactly-once
copier and the plain Python client), on one embedded broker and one local[2] Spark session (the
cold scenario's jobs: a fresh driver process and session each).

    .venv/bin/python -m benchmarks.bench [--scenario NAME[,NAME...]] [--scale smoke|quick|medium|full]
    .venv/bin/python -m benchmarks.bench --scenario variants --variant NAME SETTING... [--size B --records N --batch N]
    .venv/bin/python -m benchmarks.bench --scenario latency [--rate RECORDS_PER_S] [--seconds S]

Scenarios (benchmarks/README.md, "What is measured"): copy, cold, alone, scaling, per-batch,
fencing, latency, memory, variants; all of them by default. Prints a table per scenario, appends the run
to benchmarks/results/history.jsonl, writes results/latest.csv and the plots, and rewrites the
results at the top of benchmarks/README.md (``python -m benchmarks.results``).
"""
from __future__ import annotations

import argparse
import logging
import shlex
import sys
import tempfile
import time
from dataclasses import replace
from pathlib import Path

from pyspark_eos.testing import fault_injection
from pyspark_eos.testing.embedded_kafka import EmbeddedKafkaCluster

from . import contenders, plots, report
from .contenders import Ground
from .scenarios import SCENARIOS, Options, Variant
from .workload import SCALES, Scale

log = logging.getLogger("benchmarks")


def run_scenarios(ground: Ground, names: list[str], scale: Scale, options: Options) -> tuple[list[dict], dict]:
    """Every scenario of ``names`` in turn on ``ground``: their rows, and each one's seconds."""
    rows: list[dict] = []
    seconds: dict[str, float] = {}
    if scale.warm_up:
        contenders.warm_up(ground)
    for name in names:
        log.info("scenario %s (%s scale)", name, scale.name)
        started = time.monotonic()
        rows += SCENARIOS[name](ground, scale, options)
        seconds[name] = time.monotonic() - started
        log.info("scenario %s done in %.0f s", name, seconds[name])
    return rows, seconds


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.bench", description=__doc__.split("\n\n")[0])
    parser.add_argument("--scenario", default=",".join(SCENARIOS), type=_names,
                        help=f"comma-separated, of {', '.join(SCENARIOS)} (default: all)")
    parser.add_argument("--scale", choices=list(SCALES), default="full",
                        help="smoke: seconds a scenario, a check that it runs; quick: about 5 minutes for all; "
                             "medium: enough to compare one change; full: the published figures (default)")
    parser.add_argument("--repeats", type=int, help="override the scale's repeats")
    parser.add_argument("--conf", action="append", default=[], metavar="KEY=VALUE",
                        help="a Spark setting for the session every scenario runs in")
    parser.add_argument("--results", type=Path, default=report.RESULTS,
                        help="where the results go (the README's are rewritten only from the default)")
    variants = parser.add_argument_group("the variants scenario")
    variants.add_argument("--variant", nargs="+", action="append", default=[], metavar=("NAME", "SETTING"),
                          help="a name, then source.<option>=<value>, sink.<option>=<value> or conf.<Spark "
                               "setting>=<value> settings (an empty value drops the option); the name python-stream, "
                               "with no settings, runs a Python source and sink with no Kafka. Default: python-stream")
    variants.add_argument("--size", type=int, help="bytes per record (default: the scale's)")
    variants.add_argument("--records", type=int, help="records copied (default: the scale's)")
    variants.add_argument("--batch", type=int, help="records per micro-batch (default: the scale's)")
    latency = parser.add_argument_group("the latency scenario")
    latency.add_argument("--rate", type=int, help="records/s the producer writes (default: the scale's rates)")
    latency.add_argument("--seconds", type=float, help="how long it writes them (default: the scale's)")
    args = parser.parse_args(argv)
    try:
        chosen = tuple(Variant.parse(name, settings) for name, *settings in args.variant)
    except ValueError as error:
        parser.error(str(error))
    scale = SCALES[args.scale]
    scale = scale.with_repeats(args.repeats) if args.repeats else scale
    scale = replace(scale, latency_rates=(args.rate,) if args.rate else scale.latency_rates,
                    latency_seconds=args.seconds or scale.latency_seconds)
    case = tuple(given or default for given, default in zip((args.size, args.records, args.batch), scale.variants_case))
    args.options = Options(chosen or Options().variants, case)
    args.scale = scale
    return args


def _names(text: str) -> list[str]:
    names = [name.strip() for name in text.split(",") if name.strip()]
    unknown = [name for name in names if name not in SCENARIOS]
    if unknown or not names:
        raise argparse.ArgumentTypeError(f"unknown scenario(s) {', '.join(unknown) or '(none)'}; "
                                         f"choose from {', '.join(SCENARIOS)}")
    return names


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    args = parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s: %(message)s", datefmt="%H:%M:%S")
    logging.getLogger("py4j").setLevel(logging.WARNING)
    if "fencing" in args.scenario:
        # Before Spark starts: its processes read the switch that turns attempt fencing off only
        # with fault injection's hooks installed (an unarmed hook costs a failed open per point).
        fault_injection.enable()
    started = time.time()
    with tempfile.TemporaryDirectory(prefix="eos-kafka-bench-") as work, \
            EmbeddedKafkaCluster(directory=Path(work) / "kafka", heap="2g") as kafka:
        ground = contenders.start_ground(kafka.bootstrap_servers, Path(work),
                                         dict(setting.split("=", 1) for setting in args.conf))
        try:
            rows, seconds = run_scenarios(ground, args.scenario, args.scale, args.options)
        finally:
            ground.spark.stop()
    command = shlex.join(["python", "-m", "benchmarks.bench", *argv])
    saved = report.save(rows, args.scale.name, started, command, seconds, args.results)
    print(f"\n{len(rows)} results appended to {saved} ({(time.time() - started) / 60:.1f} minutes)")
    try:
        print("plots: " + ", ".join(str(p) for p in plots.draw(rows, args.results)))
    except ImportError:
        print("no plots: matplotlib is missing (make bench installs it)")
    if args.results.resolve() == report.RESULTS:
        report.update_readme(tuple(SCENARIOS))
        print(f"results in {report.README} rewritten")
    return 0


if __name__ == "__main__":
    sys.exit(main())
