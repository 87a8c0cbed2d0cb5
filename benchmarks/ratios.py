"""The copy's ratio pooled over the repeats of several benchmark runs, with a 95% interval, and
where each contender's time went: the query's start and stop, its first batch, its later batches.

One run's median of three repeats moves by 0.1 from run to run on the 2-core machine (what else
the machine does sets each run's pace). Within one repeat the contenders run one after the other,
so a repeat's ratio is little touched by that drift: pooled over the repeats of several runs of the
same code, its mean and interval tell 0.95x from 1.0x where one run's median cannot.

    .venv/bin/python -m benchmarks.ratios [--since 2026-11-25T23:00] [--scale full]
        [--contender eos-kafka] [--against spark-kafka]

Reads results/history.jsonl; runs before --since (the `at` of a run, its local start time) are left
out, so that the pool holds one version of the code.
"""
from __future__ import annotations

import argparse
import json
import statistics
import sys
from dataclasses import dataclass
from pathlib import Path

from .report import RESULTS

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
        # The history keeps a run's time outside its batches and each batch's time, not its total:
        # their sum is the total (the run's seconds less the empty batch that ends a
        # Trigger.AvailableNow run: within 10 ms of the median_s of every full run so far).
        batches = [phases["triggerExecution"] / 1000 for phases in extra["batch_phases_ms"]]
        outside = extra["outside_batches_ms"] / 1000
        return cls(outside + sum(batches), outside, batches[0], sum(batches[1:]))


def t975(df: int) -> float:
    known = [d for d in _T975 if d <= df]
    return _T975[max(known)] if known else _T975[1]


def interval(values: list[float]) -> tuple[float, float]:
    """Mean and the half-width of its 95% interval."""
    if len(values) < 2:
        return values[0], float("nan")
    return statistics.mean(values), t975(len(values) - 1) * statistics.stdev(values) / len(values) ** 0.5


def paired_repeats(history: Path, since: str, scale: str, contender: str, against: str) -> dict[int, list]:
    """(run's start, repeat index, contender's Repeat, other's Repeat) per record size."""
    pairs: dict[int, list] = {}
    for line in history.read_text().splitlines():
        run = json.loads(line)
        if run["at"] < since or run["scale"] != scale:
            continue
        rows = {(row["record_bytes"], row["contender"]): row for row in run["rows"] if row.get("part") == "copy"}
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


def report(pairs: dict[int, list], contender: str, against: str) -> None:
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


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.ratios", description=__doc__.split("\n\n")[0])
    parser.add_argument("--since", default="", help="leave out runs that started before this (e.g. 2026-11-25T23:00)")
    parser.add_argument("--scale", default="full")
    parser.add_argument("--contender", default="eos-kafka")
    parser.add_argument("--against", default="spark-kafka")
    parser.add_argument("--history", type=Path, default=RESULTS / "history.jsonl")
    args = parser.parse_args(argv)
    pairs = paired_repeats(args.history, args.since, args.scale, args.contender, args.against)
    if not pairs:
        print(f"no {args.scale}-scale copy runs of {args.contender} and {args.against} with batch phases "
              f"since {args.since or 'the start'} in {args.history}", file=sys.stderr)
        return 1
    report(pairs, args.contender, args.against)
    return 0


if __name__ == "__main__":
    sys.exit(main())
