"""``python -m pyspark_eos compile-pyspark-zip``: PySpark's ``pyspark.zip`` with compiled bytecode.

Spark starts every Python process it runs for a query (a Python source's runner, the planners,
the sink's commit runner, the task workers and their daemons) with ``$SPARK_HOME/python/lib/pyspark.zip``
first on ``PYTHONPATH``. Python cannot write ``.pyc`` files into a zip, so each of those processes
compiles the PySpark modules it imports from source, every time; a zip that holds the bytecode
beside each module spares that. The ``.pyc`` entries are hash-based and unchecked (PEP 552), which
zipimport uses as they are; a Python of another version finds their magic number wrong and
compiles the source as before, so the zip stays valid for any Python.
"""
from __future__ import annotations

import importlib.util
import logging
import marshal
import os
import shutil
import warnings
import zipfile
from dataclasses import dataclass
from pathlib import Path

from ..errors import ConfigurationError

log = logging.getLogger(__name__)

BACKUP_SUFFIX = ".source-only"
_UNCHECKED_HASH_PYC = 0b01  # PEP 552 flags: hash-based, check_source off


@dataclass(frozen=True)
class Compiled:
    zip_path: Path
    modules: int           # .pyc entries written now (0: the zip already had them for this Python)
    backup: Path | None    # the zip as it was, kept beside it


def pyspark_zip(spark_home: Path | None) -> Path:
    """The ``pyspark.zip`` Spark puts on its Python processes' path: under ``spark_home``, else
    under ``SPARK_HOME``, else under the installed pyspark package (pip's layout)."""
    if spark_home is None:
        spark_home = Path(os.environ["SPARK_HOME"]) if os.environ.get("SPARK_HOME") else _installed_spark_home()
    path = spark_home / "python" / "lib" / "pyspark.zip"
    if not path.is_file():
        raise ConfigurationError(f"no PySpark archive at {path}: give the Spark installation the executors use "
                                 "with --spark-home (the directory holding bin/ and python/lib/)")
    return path


def _installed_spark_home() -> Path:
    import pyspark

    return Path(pyspark.__file__).parent


def compile_pyspark_zip(path: Path) -> Compiled:
    """Rewrite ``path`` with a ``.pyc`` entry beside each module, for the running Python; the
    original is kept as ``<path>.source-only``. Nothing is written when the zip has them already."""
    with zipfile.ZipFile(path) as archive:
        if _has_bytecode(archive):
            log.info("%s already holds bytecode for this Python", path)
            return Compiled(path, 0, None)
        partial = path.with_name(path.name + ".partial")
        try:
            modules = _write_with_bytecode(archive, partial, path)
        except BaseException:
            partial.unlink(missing_ok=True)  # a full disk, an interrupt: the original stays as it was
            raise
    backup = path.with_name(path.name + BACKUP_SUFFIX)
    if not backup.exists():
        shutil.copy2(path, backup)
    shutil.copymode(path, partial)  # readable by whoever runs the executors, as the original
    os.replace(partial, path)
    log.info("%s: bytecode of %d modules added; the original is %s", path, modules, backup)
    return Compiled(path, modules, backup)


def _has_bytecode(archive: zipfile.ZipFile) -> bool:
    entry = "pyspark/__init__.pyc"
    if entry not in archive.namelist():
        return False
    return archive.read(entry)[:4] == importlib.util.MAGIC_NUMBER


def _write_with_bytecode(archive: zipfile.ZipFile, target: Path, final: Path) -> int:
    modules = 0
    with zipfile.ZipFile(target, "w", zipfile.ZIP_DEFLATED) as out, warnings.catch_warnings():
        warnings.simplefilter("ignore", SyntaxWarning)  # PySpark's own tests have some: not ours to report
        for info in archive.infolist():
            if info.filename.endswith(".pyc"):
                continue  # another Python's bytecode: replaced by this one's
            data = archive.read(info)
            out.writestr(info, data)
            if info.filename.endswith(".py"):
                pyc = _bytecode(data, f"{final}/{info.filename}")
                if pyc is not None:
                    entry = zipfile.ZipInfo(info.filename + "c", info.date_time)
                    entry.compress_type = zipfile.ZIP_DEFLATED
                    out.writestr(entry, pyc)
                    modules += 1
    return modules


def _bytecode(source: bytes, filename: str) -> bytes | None:
    # The file name is the one zipimport gives the source: tracebacks read the same either way.
    try:
        code = compile(source, filename, "exec", dont_inherit=True)
    except SyntaxError:
        return None  # zipimport compiles it from source, and reports the error, as before
    header = importlib.util.MAGIC_NUMBER + _UNCHECKED_HASH_PYC.to_bytes(4, "little")
    return header + importlib.util.source_hash(source) + marshal.dumps(code)
