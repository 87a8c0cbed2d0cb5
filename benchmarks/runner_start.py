"""What Spark's driver-side Python process for a streaming source costs each query before its first
batch, and how much of it is eos-kafka's.

Spark starts a new Python process per query for a Python data source's stream reader
(``pyspark.sql.streaming.python_streaming_source_runner``), with its own ``pyspark.zip`` first on
PYTHONPATH (PythonUtils.sparkPythonPath: from $SPARK_HOME, also in a pip install). Python keeps no
bytecode cache for modules imported from a zip, so every such process compiles PySpark's modules
again; and PySpark's ``setup_spark_files`` calls ``importlib.invalidate_caches()``, which on Python
3.11 reads the zip's directory again once per zip importer (one per package imported from it).
Spark's own Kafka source runs in the JVM and pays neither.

    .venv/bin/python -m benchmarks.runner_start [--repeats N]

Times, in fresh interpreters alternated: importing the runner module with PySpark from
``pyspark.zip`` (as Spark starts it) and from the installed package; ``invalidate_caches()`` after
that import; and importing eos-kafka's stream reader on top. Results go to results/runner-start.json.
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
from pathlib import Path

from .report import save_json

PROBE = """
import importlib, json, sys, time, zipimport
started = time.perf_counter()
import pyspark.sql.streaming.python_streaming_source_runner
runner = time.perf_counter()
import pyspark_eos.data_source, pyspark_eos.source.micro_batch_stream
eos = time.perf_counter()
importers = sum(isinstance(f, zipimport.zipimporter) for f in sys.path_importer_cache.values())
before = time.perf_counter()
importlib.invalidate_caches()
after = time.perf_counter()
print(json.dumps({"runner_import_ms": (runner - started) * 1000, "eos_import_ms": (eos - runner) * 1000,
                  "invalidate_caches_ms": (after - before) * 1000, "zip_importers": importers}))
"""


def spark_python_path() -> str:
    """PYTHONPATH as Spark gives it to its Python processes: its zips first."""
    import pyspark

    lib = Path(pyspark.__file__).parent / "python" / "lib"
    zips = [lib / "pyspark.zip", *sorted(lib.glob("py4j-*-src.zip"))]
    missing = [str(z) for z in zips if not z.exists()]
    if missing:
        raise SystemExit(f"no {', '.join(missing)}: this PySpark install has no zips to time")
    return os.pathsep.join(str(z) for z in zips)


def probe(from_zip: bool) -> dict:
    env = dict(os.environ)
    env.pop("PYTHONPATH", None)
    if from_zip:
        env["PYTHONPATH"] = spark_python_path()
    result = subprocess.run([sys.executable, "-c", PROBE], env=env, capture_output=True, text=True, check=True,
                            cwd="/")
    return json.loads(result.stdout)


# case -> PySpark imported from Spark's zips
CASES = {"pyspark.zip (as Spark starts it)": True, "installed package": False}
_TIMES = ("runner_import_ms", "invalidate_caches_ms", "eos_import_ms")


def _medians(results: list[dict]) -> dict:
    medians = {key: round(statistics.median(r[key] for r in results), 1) for key in _TIMES}
    return {**medians, "zip_importers": results[0]["zip_importers"]}


def _print(summary: dict, repeats: int) -> None:
    print(f"\nA streaming source's driver-side Python process, ms (medians of {repeats} fresh interpreters):")
    print(f"  {'PySpark imported from':<34} {'runner import':>13} {'invalidate_caches':>17} {'eos-kafka import':>16}")
    for case, figures in summary.items():
        print(f"  {case:<34} " + " ".join(f"{figures[key]:>{width}}" for key, width in zip(_TIMES, (13, 17, 16))))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.runner_start", description=__doc__.split("\n\n")[0])
    parser.add_argument("--repeats", type=int, default=7)
    args = parser.parse_args(argv)
    runs: dict[str, list[dict]] = {case: [] for case in CASES}
    for repeat in range(args.repeats):
        for case, from_zip in CASES.items():
            runs[case].append(probe(from_zip))
        print(f"repeat {repeat + 1}/{args.repeats} done", file=sys.stderr)
    summary = {case: _medians(results) for case, results in runs.items()}
    _print(summary, args.repeats)
    save_json("runner-start", summary)
    return 0


if __name__ == "__main__":
    sys.exit(main())
