"""Where the project's configuration files and caches live.

The embedded broker and the example pipeline are development tools: they read their Maven pom,
broker and logging configuration from the source checkout's ``conf/`` directory. An installed
copy of the package can be pointed at such a directory with ``EOS_KAFKA_CONF_DIR``.
"""
from __future__ import annotations

import contextlib
import fcntl
import os
from pathlib import Path
from typing import Iterator

from ..errors import EmbeddedKafkaError

CONF_DIR_ENV = "EOS_KAFKA_CONF_DIR"
CACHE_DIR_ENV = "EOS_KAFKA_CACHE_DIR"

_CHECKOUT_ROOT = Path(__file__).resolve().parents[2]


def conf_dir() -> Path:
    configured = os.environ.get(CONF_DIR_ENV)
    directory = Path(configured) if configured else _CHECKOUT_ROOT / "conf"
    if not (directory / "server.properties").is_file():
        raise EmbeddedKafkaError(
            f"no broker configuration in {directory}: the embedded Kafka broker runs from a source "
            f"checkout of eos-kafka; run it there, or set {CONF_DIR_ENV} to the checkout's conf/ "
            "directory"
        )
    return directory


def cache_dir() -> Path:
    """Downloaded broker jars and other re-creatable files (ignored by git)."""
    configured = os.environ.get(CACHE_DIR_ENV)
    directory = Path(configured) if configured else _CHECKOUT_ROOT / ".cache"
    directory.mkdir(parents=True, exist_ok=True)
    return directory


@contextlib.contextmanager
def cache_lock(name: str) -> Iterator[None]:
    """Held while one process fills the cache entry ``name``: test processes running side by side
    (pytest-xdist workers) would otherwise download or install into the same directory at once."""
    with open(cache_dir() / f".{name}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(lock, fcntl.LOCK_UN)
