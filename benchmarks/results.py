"""The benchmarks' results without a run: the README's results block rewritten from the history,
or the copy's ratio pooled over runs (report.py says how).

    .venv/bin/python -m benchmarks.results             # rewrite the README's results from the history
    .venv/bin/python -m benchmarks.results --pooled [--since 2026-11-25T23:00] [--scale full]

Its own module: the scenarios use report's summaries, and this needs the scenarios' order.
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

from .report import README, RESULTS, history, paired_repeats, print_pooled, update_readme
from .scenarios import SCENARIOS


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.results", description=__doc__.split("\n\n")[0])
    parser.add_argument("--results", type=Path, default=RESULTS, help="the directory of history.jsonl")
    parser.add_argument("--pooled", action="store_true", help="print the copy's ratio pooled over runs instead")
    parser.add_argument("--since", default="", help="--pooled: leave out runs that started before this")
    parser.add_argument("--scale", default="full", help="--pooled: runs of this scale")
    parser.add_argument("--contender", default="eos-kafka")
    parser.add_argument("--against", default="spark-kafka")
    args = parser.parse_args(argv)
    if not args.pooled:
        update_readme(tuple(SCENARIOS), args.results)
        print(f"rewrote the results in {README}")
        return 0
    pairs = paired_repeats(history(args.results), args.since, args.scale, args.contender, args.against)
    if not pairs:
        print(f"no {args.scale}-scale copy runs of {args.contender} and {args.against} with batch phases "
              f"since {args.since or 'the start'} in {args.results}", file=sys.stderr)
        return 1
    print_pooled(pairs, args.contender, args.against)
    return 0


if __name__ == "__main__":
    sys.exit(main())
