"""``python -m pyspark_eos compile-pyspark-zip``: a pyspark.zip whose modules Python loads from
bytecode, as it did from source. The suite's own Spark starts from such a zip (conftest), whose
Python workers the last test here asks; the benchmark smoke's cold job runs a contender from one."""
from __future__ import annotations

import importlib.util
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

from pyspark_eos.operator.pyspark_bytecode import BACKUP_SUFFIX, compile_pyspark_zip
from pyspark_eos.testing.local_spark import launched_spark_home

MODULE = '''
def answer():
    return 42


def fail():
    raise ValueError("raised in the zip")
'''


@pytest.fixture
def spark_home(tmp_path: Path) -> Path:
    lib = tmp_path / "spark" / "python" / "lib"
    lib.mkdir(parents=True)
    with zipfile.ZipFile(lib / "pyspark.zip", "w", zipfile.ZIP_DEFLATED) as archive:
        archive.writestr("pyspark/__init__.py", "")
        archive.writestr("pyspark/mod.py", MODULE)
        archive.writestr("pyspark/broken.py", "def (:\n")  # zipimport reports it at import, as before
    return tmp_path / "spark"


def _run_from(archive: Path, code: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60,
                          env={"PYTHONPATH": str(archive), "PYTHONDONTWRITEBYTECODE": "1"})


def test_the_modules_load_from_bytecode_and_behave_and_fail_as_from_source(spark_home: Path):
    archive = spark_home / "python" / "lib" / "pyspark.zip"
    original = archive.read_bytes()
    use = "import pyspark.mod as m; print(m.__file__); print(m.answer()); m.fail()"
    from_source, broken_from_source = _run_from(archive, use), _run_from(archive, "import pyspark.broken")

    done = compile_pyspark_zip(archive)

    assert done.modules == 2 and done.backup == archive.with_name("pyspark.zip" + BACKUP_SUFFIX)
    assert done.backup.read_bytes() == original
    loaded = _run_from(archive, use)
    assert from_source.stdout.split() == [f"{archive}/pyspark/mod.py", "42"]
    assert loaded.stdout.split() == [f"{archive}/pyspark/mod.pyc", "42"]
    # A traceback names the module's source in the zip, its line and function, as before.
    assert f'File "{archive}/pyspark/mod.py", line 7, in fail' in loaded.stderr
    assert loaded.stderr == from_source.stderr
    broken = _run_from(archive, "import pyspark.broken")
    assert "SyntaxError" in broken.stderr and broken.stderr == broken_from_source.stderr


def test_a_second_run_changes_nothing_and_another_pythons_bytecode_is_replaced(spark_home: Path):
    archive = spark_home / "python" / "lib" / "pyspark.zip"
    compile_pyspark_zip(archive)
    compiled = archive.read_bytes()

    again = compile_pyspark_zip(archive)

    assert again.modules == 0 and archive.read_bytes() == compiled
    other = spark_home / "other.zip"
    with zipfile.ZipFile(archive) as source, zipfile.ZipFile(other, "w") as target:
        for info in source.infolist():
            data = source.read(info)
            if info.filename.endswith(".pyc"):
                data = b"\x00\x00\r\n" + data[4:]  # a magic number no Python of ours has
            target.writestr(info, data)
    other.replace(archive)

    redone = compile_pyspark_zip(archive)

    assert redone.modules == 2
    with zipfile.ZipFile(archive) as result:
        assert result.read("pyspark/mod.pyc")[:4] == importlib.util.MAGIC_NUMBER
        assert sorted(result.namelist()).count("pyspark/mod.pyc") == 1


def test_the_command_names_the_option_when_there_is_no_archive(tmp_path: Path):
    result = subprocess.run([sys.executable, "-m", "pyspark_eos", "compile-pyspark-zip", "--spark-home",
                             str(tmp_path)], capture_output=True, text=True, timeout=60)
    assert result.returncode == 2
    assert f"no PySpark archive at {tmp_path}/python/lib/pyspark.zip" in result.stderr
    assert "--spark-home" in result.stderr


def test_the_command_compiles_the_archive_under_the_spark_home_given(spark_home: Path):
    result = subprocess.run([sys.executable, "-m", "pyspark_eos", "compile-pyspark-zip", "--spark-home",
                             str(spark_home)], capture_output=True, text=True, timeout=60)
    assert result.returncode == 0, result.stderr
    assert "bytecode of 2 modules added" in result.stdout and BACKUP_SUFFIX in result.stdout


def test_a_failed_rewrite_leaves_the_archive_as_it_was_and_no_partial_file(spark_home: Path, monkeypatch):
    from pyspark_eos.operator import pyspark_bytecode

    archive = spark_home / "python" / "lib" / "pyspark.zip"
    original = archive.read_bytes()

    def fail_midway(source, target: Path, final: Path) -> int:
        target.write_bytes(b"half a zip")
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(pyspark_bytecode, "_write_with_bytecode", fail_midway)
    with pytest.raises(OSError, match="No space left"):
        compile_pyspark_zip(archive)
    assert archive.read_bytes() == original
    assert sorted(p.name for p in archive.parent.iterdir()) == ["pyspark.zip"]


def test_sparks_python_workers_load_pyspark_from_the_compiled_zip(spark):
    # The suite's sessions are launched from a Spark home with a compiled zip (conftest).
    home = launched_spark_home()
    assert (home / "python" / "lib" / ("pyspark.zip" + BACKUP_SUFFIX)).exists()
    loaded = spark.sparkContext.parallelize([0], 1).map(lambda _: __import__("pyspark").__file__).collect()
    assert loaded == [f"{home}/python/lib/pyspark.zip/pyspark/__init__.pyc"]
