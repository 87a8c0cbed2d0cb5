"""The campaign's report: ``chaos-<seed>.json`` (faults fired and survived per kind, records in and
out, what each verifier found, recovery times, worker memory over time) and ``chaos-<seed>.png``,
a timeline of committed input offsets per second with the faults marked, and worker memory."""
from __future__ import annotations

import json
import logging
import statistics
from collections import defaultdict
from dataclasses import asdict
from pathlib import Path

log = logging.getLogger(__name__)


def build(settings, faults: list[dict], unexpected_exits: list[dict], check, watcher, drained: bool,
          lag: dict[str, int], left_open: list[str], writer, progress: list[tuple[float, int]], sampler) -> dict:
    survived = [f for f in faults if f["recovered_s"] is not None]
    verifiers = {
        "final_read_committed": {"ok": check.ok, **asdict(check)},
        "concurrent_consumer": {"ok": watcher.duplicates == 0, "records_seen": len(watcher.seen),
                                "duplicates": watcher.duplicates, "first_duplicate": watcher.first_duplicate},
        "offsets_and_transactions": {"ok": drained and not lag and not left_open, "offsets_behind_input_end": lag,
                                     "open_transactions": left_open},
    }
    passed = (all(v["ok"] for v in verifiers.values()) and len(survived) == len(faults) and not unexpected_exits
              and writer.error is None)
    result = {
        "seed": settings.seed, "verdict": "passed" if passed else "failed",
        "settings": {"faults": settings.faults, "minutes": settings.minutes, "kinds": settings.kinds,
                     "rate": settings.rate, "work_dir": str(settings.work_dir)},
        "faults_fired": len(faults), "faults_survived": len(survived), "per_kind": _per_kind(faults),
        "records_in": check.input_records, "records_out": check.output_records, "duplicates": check.duplicates,
        "missing": check.missing, "input_transactions": writer.transactions,
        "input_writer_error": None if writer.error is None else str(writer.error), "verifiers": verifiers,
        "unexpected_query_exits": unexpected_exits, "faults": faults, "progress": progress,
        "worker_rss_mib": _worker_rss(sampler),
    }
    settings.results.mkdir(parents=True, exist_ok=True)
    path = settings.results / f"chaos-{settings.seed}.json"
    path.write_text(json.dumps(result, indent=1))
    result["report"] = str(path)
    if settings.plot:
        result["plot"] = str(_plot(result, settings.results / f"chaos-{settings.seed}.png"))
    return result


def _per_kind(faults: list[dict]) -> dict[str, dict]:
    kinds: dict[str, list[dict]] = defaultdict(list)
    for fault in faults:
        kinds[fault["kind"]].append(fault)
    summary = {}
    for kind, fired in sorted(kinds.items()):
        times = [f["recovered_s"] for f in fired if f["recovered_s"] is not None]
        after = [f["after_s"] for f in fired if f.get("after_s") is not None]
        summary[kind] = {"fired": len(fired), "survived": len(times),
                         "not_reached": sum(1 for f in fired if f["details"].get("reached") is False),
                         "recovery_s_median": round(statistics.median(times), 2) if times else None,
                         "recovery_s_max": max(times, default=None),
                         "fault_s_median": round(statistics.median(f["took_s"] for f in fired), 2),
                         "after_fault_s_median": round(statistics.median(after), 2) if after else None,
                         "after_fault_s_max": max(after, default=None)}
    return summary


def _worker_rss(sampler) -> list[tuple[float, float]]:
    """(seconds, the largest Python worker's resident memory in MiB) at each sample."""
    largest: dict[float, int] = defaultdict(int)
    for trace in sampler.traces.values():
        if trace.role == "worker":
            for at, kb in trace.rss_kb:
                largest[round(at)] = max(largest[round(at)], kb)
    return [(at, round(kb / 1024, 1)) for at, kb in sorted(largest.items())]


def summary(result: dict) -> str:
    lines = [f"chaos campaign seed {result['seed']}: {result['verdict'].upper()}",
             f"faults fired {result['faults_fired']}, survived {result['faults_survived']}; records in "
             f"{result['records_in']}, out {result['records_out']}, duplicates {result['duplicates']}, "
             f"missing {result['missing']}"]
    lines += [f"  {kind:<20} fired {k['fired']:>3}  survived {k['survived']:>3}  not reached {k['not_reached']:>2}  "
              f"recovery median {k['recovery_s_median']} s, max {k['recovery_s_max']} s (the fault itself "
              f"{k.get('fault_s_median')} s, after it {k.get('after_fault_s_median')} s, "
              f"max {k.get('after_fault_s_max')} s)"
              for kind, k in result["per_kind"].items()]
    for name, verifier in result["verifiers"].items():
        problems = verifier.get("problems") or [verifier.get("first_duplicate")] if not verifier["ok"] else []
        lines.append(f"verifier {name}: {'ok' if verifier['ok'] else 'FAILED'}"
                     + "".join(f"\n    {p}" for p in problems if p))
        if name == "offsets_and_transactions" and not verifier["ok"]:
            lines.append(f"    behind: {verifier['offsets_behind_input_end']}, open: {verifier['open_transactions']}")
    if result["input_writer_error"]:
        lines.append(f"the input writer failed: {result['input_writer_error']}")
    for died in result["unexpected_query_exits"]:
        lines.append(f"query died unexpectedly at {died['at_s']} s after {died['after']}: see {died['log']}")
        lines += [f"    {line}" for line in died.get("cause", [])]
    lines.append(f"report: {result['report']}" + (f", plot: {result['plot']}" if result.get("plot") else ""))
    return "\n".join(lines)


def _plot(result: dict, path: Path) -> Path | None:
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        log.warning("matplotlib is not installed (make chaos installs it): no timeline plot")
        return None
    figure, (rate_axis, memory_axis) = plt.subplots(2, 1, figsize=(12, 7), sharex=True,
                                                    gridspec_kw={"height_ratios": [3, 1]})
    progress = result["progress"]
    window = 10  # samples (5 s): a batch commits every few seconds under faults
    times = [t for t, _ in progress[window:]]
    rates = [(b - a) / max(tb - ta, 0.1) for (ta, a), (tb, b) in zip(progress, progress[window:])]
    rate_axis.plot(times, rates, linewidth=0.8, color="tab:blue")
    colors = dict(zip(result["per_kind"], matplotlib.colormaps["tab20"].colors))
    for fault in result["faults"]:
        end = fault["at_s"] + (fault["recovered_s"] or 0)
        rate_axis.axvspan(fault["at_s"], end, alpha=0.25, color=colors[fault["kind"]], linewidth=0)
    handles = [plt.Rectangle((0, 0), 1, 1, color=c, alpha=0.5) for c in colors.values()]
    rate_axis.legend(handles, list(colors), fontsize=7, loc="upper right", ncol=3)
    rate_axis.set_ylabel("input offsets committed / s (5 s)")
    rate_axis.set_title(f"chaos campaign seed {result['seed']}: {result['faults_fired']} faults "
                        f"(shaded: fault to recovery), {result['verdict']}")
    memory = result["worker_rss_mib"]
    memory_axis.plot([t for t, _ in memory], [m for _, m in memory], color="tab:green", linewidth=0.8)
    memory_axis.set_ylabel("largest worker MiB")
    memory_axis.set_xlabel("seconds")
    figure.tight_layout()
    figure.savefig(path, dpi=110)
    plt.close(figure)
    return path
