"""Virtual environments of their own for tests that run a different PySpark, or a Python without
eos-kafka installed. Kept in .cache/ once complete; a change of what is installed gets a new one."""
from __future__ import annotations

import hashlib
import subprocess
import sys
import venv
from importlib.metadata import version
from pathlib import Path

from pyspark_eos.testing.project_files import cache_dir, cache_lock

CHECKOUT = Path(__file__).resolve().parent.parent
# What eos-kafka needs at run time (setup.cfg install_requires).
RUNTIME = ("pyspark", "confluent-kafka", "pyarrow")


def virtualenv(name: str, *installs: list[str], home: Path | None = None) -> Path:
    """The python of a virtual environment in which each list of ``pip install`` arguments ran."""
    if home is None:
        # The base interpreter is part of what a virtual environment is.
        digest = hashlib.sha256(repr((sys.version, sys.executable, installs)).encode()).hexdigest()[:10]
        home = cache_dir() / f"venv-{name}-{digest}"
    python = home / "bin" / "python"
    marker = home / ".complete"
    if marker.exists():
        return python
    with cache_lock(f"venv-{name}"):
        if not marker.exists():  # another test process may have built it meanwhile
            venv.EnvBuilder(with_pip=True, clear=True).create(home)
            for arguments in installs:
                # Not compiled at install (pip would compile all of pyspark): on first import instead.
                subprocess.run([str(python), "-m", "pip", "install", "--quiet", "--no-compile", *arguments],
                               check=True, timeout=900)
            marker.write_text(repr(installs))
    return python


def pinned(*distributions: str) -> list[str]:
    """Requirements pinned to the versions this test environment runs, so pip takes them from its cache."""
    return [f"{name}=={version(name)}" for name in distributions]


def constraints_file(directory: Path) -> Path:
    """A pip constraints file pinning the runtime dependencies to this test environment's versions."""
    path = directory / "constraints.txt"
    path.write_text("\n".join(pinned(*RUNTIME, "py4j")) + "\n")
    return path


# The older PySpark every make test runs (no admission control for Python sources, no Arrow
# writer), and the one make release-tests adds (the Arrow writer without admission control).
SUITE_OLDER_PYSPARK, RELEASE_OLDER_PYSPARK = "4.0.5", "4.1.4"


def older_pyspark_python(version: str) -> Path:
    """An older PySpark with this checkout's eos-kafka (test_older_pyspark)."""
    return virtualenv(f"pyspark-{version}", [f"pyspark=={version}", "confluent-kafka", "pyarrow", "pandas"],
                      ["--no-deps", "-e", str(CHECKOUT), "--config-settings", "editable_mode=compat"])


def runtime_python() -> Path:
    """The runtime dependencies, without eos-kafka (test_distribution)."""
    return virtualenv("runtime", pinned(*RUNTIME))


def no_kafka_client_python() -> Path:
    """PySpark without confluent-kafka: what eos-kafka's load() says there (test_distribution)."""
    return virtualenv("no-kafka-client", pinned("pyspark", "pyarrow"))
