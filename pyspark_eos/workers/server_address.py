"""Which fork server a daemon may be forked from: one whose interpreter is the same as the
daemon's would have been.

A forked process keeps what its parent's interpreter fixed at start (the executable, hash seed,
``sys.path``, the modules imported and what they read from the environment then). So the server
serves only daemons that would have started exactly like it: the address is a digest of those
inputs, and a daemon whose inputs differ finds no server there, or starts its own.
"""
from __future__ import annotations

import hashlib
import json
import os
from collections.abc import Iterable, Mapping
from pathlib import Path

# Variables an interpreter or a module reads once, when it starts or is imported: PYTHONPATH,
# PYTHONHASHSEED and the other PYTHONxxx settings; PySpark's import-time switches; eos-kafka's fault
# hooks (kafka.fault_hooks loads its handler at import); and YARN's container, so that a server's
# processes are never charged to another container's memory or killed with it.
_IMPORT_TIME_PREFIX = "PYTHON"
_IMPORT_TIME_NAMES = ("PYSPARK_ENABLE_NAMEDTUPLE_PATCH", "SPARK_TESTING", "EOS_KAFKA_FAULT_HOOKS", "CONTAINER_ID")


def import_time_environment(environ: Mapping[str, str]) -> dict[str, str]:
    """The variables of ``environ`` a forked daemon could not change any more. Spark's
    ``PYTHON_WORKER_FACTORY_*`` and other ``PYTHON_`` names are read while it runs, not at start."""
    return {name: value for name, value in sorted(environ.items())
            if name in _IMPORT_TIME_NAMES
            or (name.startswith(_IMPORT_TIME_PREFIX) and not name.startswith("PYTHON_"))}


def interpreter_digest(executable: str, environ: Mapping[str, str], path_versions: Mapping[str, int | None],
                       uid: int) -> str:
    """A digest of what makes two interpreters interchangeable: ``path_versions`` maps each
    ``sys.path`` entry and preloaded source file to its modification time (None: missing), so an
    upgraded package or an edited module gives a new digest."""
    inputs = {"executable": executable, "environment": import_time_environment(environ),
              "paths": dict(sorted(path_versions.items())), "uid": uid}
    return hashlib.sha256(json.dumps(inputs, sort_keys=True).encode()).hexdigest()[:24]


def socket_path(runtime_directory: str, uid: int, digest: str) -> Path:
    """Where that server listens: in a directory of the user's own (mode 0700)."""
    return Path(runtime_directory) / f"pyspark-eos-{uid}" / f"{digest}.sock"


def path_versions(entries: Iterable[str], source_roots: Iterable[Path]) -> dict[str, int | None]:
    """Modification times of the ``sys.path`` entries (a directory's changes when a package is
    installed or removed in it; a zip's when it is replaced) and of every source file under
    ``source_roots`` (the packages whose modules a server preloads from a checkout)."""
    versions = {entry: _mtime(entry) for entry in entries if entry}
    for root in source_roots:
        for directory, _, files in os.walk(root):
            versions.update({os.path.join(directory, f): _mtime(os.path.join(directory, f))
                             for f in files if f.endswith(".py")})
    return versions


def _mtime(path: str) -> int | None:
    try:
        return os.stat(path).st_mtime_ns
    except OSError:
        return None
