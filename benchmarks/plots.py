"""PNG plots of a run's rows, one per scenario that ran and has one (matplotlib, no display needed)."""
from __future__ import annotations

from pathlib import Path


def draw(rows: list[dict], results: Path) -> list[Path]:
    import matplotlib

    matplotlib.use("Agg")
    drawn = []
    for scenario, (case_key, title) in _BARS.items():
        selected = [row for row in rows if row["scenario"] == scenario]
        if selected:
            drawn.append(_grouped_bars(selected, case_key, title, results / f"{scenario}.png"))
    for scenario, (x_key, y_key, xlabel, title, name) in _CURVES.items():
        selected = [row for row in rows if row["scenario"] == scenario]
        if selected:
            drawn.append(_cost_curve(selected, x_key, y_key, xlabel, title, results / name))
    memory = [row for row in rows if row["scenario"] == "memory"]
    if memory:
        drawn.append(_worker_memory(memory[-1], results / "worker-memory.png"))
    return drawn


_BARS = {
    "copy": ("record_bytes", "Kafka -> Kafka copy (median of repeats)"),
    "alone": ("side", "Source alone and sink alone"),
    "scaling": ("partitions", "Scaling with input partitions (same total records)"),
}
_CURVES = {
    "per-batch": ("batch_records", "batch_p50_ms", "records per micro-batch", "Per-batch cost against batch size",
                  "per-batch-cost.png"),
    "scaling": ("partitions", "steady_batch_ms", "input partitions",
                "Per-batch cost against input partitions (batches after the first)", "scaling-batch-cost.png"),
}


def _grouped_bars(rows: list[dict], case_key: str, title: str, path: Path) -> Path:
    import matplotlib.pyplot as plt

    cases = sorted({row[case_key] for row in rows}, key=str)
    names = list(dict.fromkeys(row["contender"] for row in rows))
    width = 0.8 / len(names)
    figure, axes = plt.subplots(figsize=(8, 4.5))
    for i, name in enumerate(names):
        values = [next((r["median_records_per_s"] for r in rows if r["contender"] == name and r[case_key] == case), 0)
                  for case in cases]
        axes.bar([c + i * width for c in range(len(cases))], values, width, label=name)
    axes.set_xticks([c + width * (len(names) - 1) / 2 for c in range(len(cases))], [str(c) for c in cases])
    axes.set_xlabel(case_key.replace("_", " "))
    axes.set_ylabel("records/s")
    axes.set_title(title)
    axes.legend()
    return _saved(figure, path)


def _cost_curve(rows: list[dict], x_key: str, y_key: str, xlabel: str, title: str, path: Path) -> Path:
    """One line per contender: a batch's duration (``y_key``) against ``x_key``, on a log x axis."""
    import matplotlib.pyplot as plt

    figure, axes = plt.subplots(figsize=(8, 4.5))
    for name in dict.fromkeys(row["contender"] for row in rows):
        points = sorted((r[x_key], r[y_key]) for r in rows if r["contender"] == name and r.get(y_key) is not None)
        axes.plot([x for x, _ in points], [y for _, y in points], marker="o", label=name)
    axes.set_xscale("log")
    axes.set_xlabel(xlabel)
    axes.set_ylabel("batch duration, ms (median)")
    axes.set_title(title)
    axes.legend()
    return _saved(figure, path)


def _worker_memory(row: dict, path: Path) -> Path:
    import matplotlib.pyplot as plt

    figure, axes = plt.subplots(figsize=(8, 4.5))
    for pid, series in row["rss_mib_series"].items():
        axes.plot([t / 60 for t, _ in series], [mib for _, mib in series], label=f"worker {pid}")
    axes.set_xlabel("minutes")
    axes.set_ylabel("resident memory, MiB")
    axes.set_title(f"Python workers over a {row['minutes']:g}-minute exactly-once copy ({row['batches']} batches)")
    axes.set_ylim(bottom=0)
    axes.legend(fontsize="small")
    return _saved(figure, path)


def _saved(figure, path: Path) -> Path:
    import matplotlib.pyplot as plt

    figure.tight_layout()
    figure.savefig(path, dpi=100)
    plt.close(figure)
    return path
