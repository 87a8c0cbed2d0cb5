"""The environment that gives every Python process Spark starts a logging configuration."""
from __future__ import annotations

import os
from pathlib import Path

_DIRECTORY = Path(__file__).parent


def environment(level: str = "INFO", base: dict[str, str] | None = None) -> dict[str, str]:
    """``base`` (default: this process's environment) with this directory's sitecustomize first on
    PYTHONPATH: Spark hands PYTHONPATH and the rest of its environment on to its executors and
    their Python workers, which then log at ``level`` to their stderr (the executor's stderr file
    under Spark's work directory; the driver's own output for the driver-side stream reader)."""
    env = dict(os.environ if base is None else base)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(_DIRECTORY), env.get("PYTHONPATH", "")) if p)
    env["EOS_KAFKA_TEST_LOG_LEVEL"] = level
    return env
