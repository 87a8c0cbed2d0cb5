"""Building what users install: a wheel for pip, a zip for ``spark-submit --py-files`` and a
Maven artifact for ``spark-submit --packages``.

Spark puts ``--py-files`` entries and ``--packages`` jars on the Python path of the driver and
of every executor's workers, but only files ending in .zip, .egg or .jar (a .whl is copied and
never imported from). The jar is the package's ``.py`` files at the archive root, the way Python
Spark packages ship; Maven deploys it, with a generated pom, into a repository directory that
``--repositories file://...`` points at.

What ships is the ``pyspark_eos`` package: the runtime and its test kit (``pyspark_eos.testing``),
with the files of the checkout's ``conf/`` the kit reads (``project_files.PACKAGED_CONF_FILES``)
as package data in ``pyspark_eos/testing/conf/``; the checkout's ``devtools/``, ``examples/``,
``tests/`` and ``benchmarks/`` never do. ``conf/`` stays the one copy in the checkout: the wheel
is built from a staged copy of the project into which they are copied.

    python -m devtools.distribution [--out dist]
"""
from __future__ import annotations

import argparse
import logging
import shutil
import subprocess
import sys
import tempfile
import zipfile
from dataclasses import dataclass
from pathlib import Path

from pyspark_eos import __version__
from pyspark_eos.testing.maven_jars import run_maven
from pyspark_eos.testing.project_files import PACKAGED_CONF, PACKAGED_CONF_FILES

log = logging.getLogger(__name__)

MAVEN_GROUP = "io.github.eoskafka"
MAVEN_ARTIFACT = "pyspark-eos-kafka"
MAVEN_COORDINATES = f"{MAVEN_GROUP}:{MAVEN_ARTIFACT}:{__version__}"

_CHECKOUT = Path(__file__).resolve().parents[1]
_PACKAGE_DIR = _CHECKOUT / "pyspark_eos"
_CONF_DIR = _CHECKOUT / "conf"
# Where the package's copy of conf/ goes, relative to the checkout (and to an archive's root).
_PACKAGED_CONF = Path("pyspark_eos", "testing", PACKAGED_CONF)
# What the wheel is built from, besides the package: setup.cfg reads README.md, and setuptools
# ships license files it finds.
_PROJECT_FILES = ("setup.cfg", "pyproject.toml", "README.md")
_LICENSE_GLOBS = ("LICEN[CS]E*", "NOTICE*", "COPYING*")
# Fixed entry times make two builds of the same sources byte-identical.
_ZIP_TIME = (2020, 1, 1, 0, 0, 0)
_MANIFEST = f"Manifest-Version: 1.0\nImplementation-Title: {MAVEN_ARTIFACT}\nImplementation-Version: {__version__}\n"


@dataclass(frozen=True)
class Distribution:
    wheel: Path
    zip: Path
    jar: Path
    maven_repository: Path
    maven_coordinates: str = MAVEN_COORDINATES


def built(out: Path) -> Distribution:
    """What ``build(out)`` (``make dist``) left in ``out``."""
    out = out.resolve()
    (wheel,) = out.glob(f"pyspark_eos_kafka-{__version__}-*.whl")
    return Distribution(wheel, out / f"pyspark_eos-{__version__}.zip", out / f"{MAVEN_ARTIFACT}-{__version__}.jar",
                        out / "maven-repo")


def build(out: Path) -> Distribution:
    out = out.resolve()
    out.mkdir(parents=True, exist_ok=True)
    wheel = build_wheel(out)
    archive = write_archive(out / f"pyspark_eos-{__version__}.zip")
    jar = write_archive(out / f"{MAVEN_ARTIFACT}-{__version__}.jar", {"META-INF/MANIFEST.MF": _MANIFEST})
    repository = out / "maven-repo"
    deploy(jar, repository)
    return Distribution(wheel, archive, jar, repository)


def build_wheel(out: Path) -> Path:
    log.info("building the wheel into %s", out)
    # Older builds would match the same globs (dist/pyspark_eos-*.zip) next to the new ones.
    for stale in [*out.glob("pyspark_eos_kafka-*.whl"), *out.glob("pyspark_eos-*.zip"), *out.glob(f"{MAVEN_ARTIFACT}-*.jar")]:
        stale.unlink()
    # A fresh staged copy each time: no build/ directory of an earlier build carries deleted
    # modules into the wheel, and the checkout's package never holds a copy of conf/ (which
    # project_files would prefer to the checkout's own).
    with tempfile.TemporaryDirectory(prefix="eos-kafka-wheel-") as staging:
        project = stage_project(Path(staging) / "project")
        subprocess.run([sys.executable, "-m", "pip", "wheel", "--quiet", "--no-deps", "--wheel-dir", str(out),
                        str(project)], check=True)
    (wheel,) = out.glob(f"pyspark_eos_kafka-{__version__}-*.whl")
    return wheel


def stage_project(target: Path) -> Path:
    """A copy of what the wheel is built from, with the kit's conf/ files in the package."""
    target.mkdir(parents=True)
    for name in _PROJECT_FILES:
        shutil.copy2(_CHECKOUT / name, target / name)
    for pattern in _LICENSE_GLOBS:
        for path in _CHECKOUT.glob(pattern):
            shutil.copy2(path, target / path.name)
    for source in package_files():
        destination = target / shipped_name(source)
        destination.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(source, destination)
    return target


def package_files() -> list[Path]:
    """The package's modules, then the conf/ files it ships, as paths in the checkout."""
    modules = sorted(path for path in _PACKAGE_DIR.rglob("*.py") if "__pycache__" not in path.parts)
    return modules + [_CONF_DIR / name for name in PACKAGED_CONF_FILES]


def shipped_name(source: Path) -> str:
    """Where a file of ``package_files()`` goes in the package: a conf/ file into its copy of conf/."""
    if source.parent == _CONF_DIR:
        return (_PACKAGED_CONF / source.name).as_posix()
    return source.relative_to(_CHECKOUT).as_posix()


def write_archive(path: Path, extra: dict[str, str] | None = None) -> Path:
    """The ``pyspark_eos`` package at the root of a zip (or jar) archive."""
    log.info("writing %s", path)
    with zipfile.ZipFile(path, "w", compression=zipfile.ZIP_DEFLATED) as archive:
        for name, text in (extra or {}).items():
            archive.writestr(zipfile.ZipInfo(name, _ZIP_TIME), text)
        for source in package_files():
            name = shipped_name(source)
            archive.writestr(zipfile.ZipInfo(name, _ZIP_TIME), source.read_bytes(), zipfile.ZIP_DEFLATED)
    return path


def deploy(jar: Path, repository: Path) -> None:
    log.info("deploying %s into the Maven repository %s", MAVEN_COORDINATES, repository)
    run_maven(["org.apache.maven.plugins:maven-deploy-plugin:3.1.2:deploy-file", f"-Dfile={jar}",
               f"-DgroupId={MAVEN_GROUP}", f"-DartifactId={MAVEN_ARTIFACT}", f"-Dversion={__version__}",
               "-Dpackaging=jar", "-DgeneratePom=true", f"-Durl={repository.as_uri()}",
               "-DrepositoryId=eos-kafka-local"], f"deploy {jar.name} into {repository}")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m devtools.distribution", description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path, default=_CHECKOUT / "dist", help="output directory (default: dist/)")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(message)s", datefmt="%H:%M:%S")
    built = build(args.out)
    print(f"wheel            {built.wheel}")
    print(f"--py-files       {built.zip}")
    print(f"--packages       {built.maven_coordinates}")
    print(f"--repositories   {built.maven_repository.as_uri()}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
