"""Building what users install: a wheel for pip, an sdist, a zip for ``spark-submit --py-files``
and a Maven artifact for ``spark-submit --packages``, all of the version in
``pyspark_eos/version.py``.

Spark puts ``--py-files`` entries and ``--packages`` jars on the Python path of the driver and
of every executor's workers, but only files ending in .zip, .egg or .jar (a .whl is copied and
never imported from). The jar is the package's ``.py`` files at the archive root, the way Python
Spark packages ship; Maven deploys it, with a generated pom, into a repository directory that
``--repositories file://...`` points at.

What ships is the ``pyspark_eos`` package: the runtime and its test kit (``pyspark_eos.testing``),
with the files of the checkout's ``conf/`` the kit reads (``project_files.PACKAGED_CONF_FILES``)
as package data in ``pyspark_eos/testing/conf/``; the checkout's ``devtools/``, ``examples/``,
``tests/`` and ``benchmarks/`` never do. ``conf/`` stays the one copy in the checkout: the sdist
is built from a staged copy of the project into which they are copied, and the wheel from the
sdist alone, so that the sdist holds everything a build needs.

    python -m devtools.distribution [--out dist]
"""
from __future__ import annotations

import argparse
import ast
import email.parser
import logging
import re
import shutil
import subprocess
import sys
import tarfile
import tempfile
import xml.etree.ElementTree as ElementTree
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
# The test kit the artifacts ship beside the runtime, each file named here so that one added to
# testing/ (or dropped from what the kit ships) fails the checks until it is named here too: its
# modules, pyspark_eos/testing/<module>.py, and the files of conf/ it reads, in testing/conf/.
TEST_KIT = ("__init__", "certificates", "embedded_kafka", "fault_injection", "identity_provider", "jvm_options",
            "local_spark", "maven_jars", "output_check", "project_files", "secure_listeners", "tcp_proxy")
KIT_CONF = ("broker-log4j2.properties", "kafka-broker-pom.xml", "server.properties", "spark-log4j2.properties")
# The project's own tooling (devtools/, examples/, tests/, benchmarks/): no path in an artifact names it.
TOOLING = {"devtools", "examples", "tests", "benchmarks", "chaos", "compat", "distribution", "example_pipeline",
           "exactly_once_pipeline", "processes", "python_logging", "release", "sitecustomize", "upgrade_fixtures"}
# What the sdist is built from, besides the package: setup.cfg reads README.md, and setuptools
# ships license files it finds.
_PROJECT_FILES = ("setup.cfg", "pyproject.toml", "README.md")
_LICENSE_GLOBS = ("LICEN[CS]E*", "NOTICE*", "COPYING*")
# Fixed entry times make two builds of the same sources byte-identical.
_ZIP_TIME = (2020, 1, 1, 0, 0, 0)
_MANIFEST = f"Manifest-Version: 1.0\nImplementation-Title: {MAVEN_ARTIFACT}\nImplementation-Version: {__version__}\n"


@dataclass(frozen=True)
class Distribution:
    wheel: Path
    sdist: Path
    zip: Path
    jar: Path
    maven_repository: Path
    maven_coordinates: str = MAVEN_COORDINATES


def built(out: Path) -> Distribution:
    """What ``build(out)`` (``make dist``) left in ``out``."""
    out = out.resolve()
    (wheel,) = out.glob(f"pyspark_eos_kafka-{__version__}-*.whl")
    return Distribution(wheel, out / f"pyspark_eos_kafka-{__version__}.tar.gz", out / f"pyspark_eos-{__version__}.zip",
                        out / f"{MAVEN_ARTIFACT}-{__version__}.jar", out / "maven-repo")


def build(out: Path) -> Distribution:
    out = out.resolve()
    out.mkdir(parents=True, exist_ok=True)
    remove_earlier_builds(out)
    build_sdist_and_wheel(out)
    write_archive(out / f"pyspark_eos-{__version__}.zip")
    jar = write_archive(out / f"{MAVEN_ARTIFACT}-{__version__}.jar", {"META-INF/MANIFEST.MF": _MANIFEST})
    deploy(jar, out / "maven-repo")
    return built(out)


def remove_earlier_builds(out: Path) -> None:
    """Older builds would match the same globs (dist/pyspark_eos-*.zip) next to the new ones, and an
    older version's artifact would stay in the Maven repository."""
    for pattern in ("pyspark_eos_kafka-*.whl", "pyspark_eos_kafka-*.tar.gz", "pyspark_eos-*.zip",
                    f"{MAVEN_ARTIFACT}-*.jar"):
        for stale in out.glob(pattern):
            stale.unlink()
    shutil.rmtree(out / "maven-repo", ignore_errors=True)


def build_sdist_and_wheel(out: Path) -> None:
    log.info("building the sdist, and the wheel from it, into %s", out)
    # A fresh staged copy each time: no build/ directory of an earlier build carries deleted
    # modules into the wheel, and the checkout's package never holds a copy of conf/ (which
    # project_files would prefer to the checkout's own). Without --sdist or --wheel, build makes
    # the wheel from the unpacked sdist: a file the sdist lacks is missing from the wheel too.
    with tempfile.TemporaryDirectory(prefix="eos-kafka-build-") as staging:
        project = stage_project(Path(staging) / "project")
        subprocess.run([sys.executable, "-m", "build", "--quiet", "--outdir", str(out), str(project)], check=True)


def stage_project(target: Path) -> Path:
    """A copy of what the sdist is built from, with the kit's conf/ files in the package."""
    target.mkdir(parents=True)
    for name in project_files():
        shutil.copy2(_CHECKOUT / name, target / name)
    for source, name in package_files():
        destination = target / name
        destination.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(source, destination)
    return target


def project_files() -> list[str]:
    """The files besides the package that the sdist is built from, by name."""
    return [*_PROJECT_FILES, *sorted(path.name for pattern in _LICENSE_GLOBS for path in _CHECKOUT.glob(pattern))]


def package_files() -> list[tuple[Path, str]]:
    """The package's modules, then the conf/ files it ships: each file's path in the checkout and
    its name in the package (a conf/ file goes into the package's copy of conf/)."""
    modules = sorted(path for path in _PACKAGE_DIR.rglob("*.py") if "__pycache__" not in path.parts)
    return ([(path, path.relative_to(_CHECKOUT).as_posix()) for path in modules]
            + [(_CONF_DIR / name, (_PACKAGED_CONF / name).as_posix()) for name in PACKAGED_CONF_FILES])


def write_archive(path: Path, extra: dict[str, str] | None = None) -> Path:
    """The ``pyspark_eos`` package at the root of a zip (or jar) archive."""
    log.info("writing %s", path)
    with zipfile.ZipFile(path, "w", compression=zipfile.ZIP_DEFLATED) as archive:
        for name, text in (extra or {}).items():
            archive.writestr(zipfile.ZipInfo(name, _ZIP_TIME), text)
        for source, name in package_files():
            archive.writestr(zipfile.ZipInfo(name, _ZIP_TIME), source.read_bytes(), zipfile.ZIP_DEFLATED)
    return path


def deploy(jar: Path, repository: Path) -> None:
    log.info("deploying %s into the Maven repository %s", MAVEN_COORDINATES, repository)
    run_maven(["org.apache.maven.plugins:maven-deploy-plugin:3.1.2:deploy-file", f"-Dfile={jar}",
               f"-DgroupId={MAVEN_GROUP}", f"-DartifactId={MAVEN_ARTIFACT}", f"-Dversion={__version__}",
               "-Dpackaging=jar", "-DgeneratePom=true", f"-Durl={repository.as_uri()}",
               "-DrepositoryId=eos-kafka-local"], f"deploy {jar.name} into {repository}")


# ------------------------------------------------------------- what a build has to hold

# An artifact's metadata: the wheel's dist-info, the sdist's PKG-INFO and egg-info, the jar's manifest.
_METADATA = re.compile(r"[^/]+\.(dist|egg)-info/.*|PKG-INFO|META-INF/MANIFEST\.MF")


def expected_files() -> list[str]:
    """What every artifact ships, as paths in the project: each of the runtime's modules in the
    checkout, and the test kit's files named in ``TEST_KIT`` and ``KIT_CONF``."""
    runtime = [name for _, name in package_files() if not name.startswith("pyspark_eos/testing/")]
    kit = [f"pyspark_eos/testing/{module}.py" for module in TEST_KIT]
    conf = [(_PACKAGED_CONF / name).as_posix() for name in KIT_CONF]
    return sorted(runtime + kit + conf)


def archive_files(path: Path) -> dict[str, bytes]:
    """Every file of a built wheel, zip or jar, or of an sdist below its top directory, with its bytes."""
    if path.name.endswith(".tar.gz"):
        with tarfile.open(path) as sdist:
            return {member.name.split("/", 1)[1]: sdist.extractfile(member).read()
                    for member in sdist.getmembers() if member.isfile()}
    with zipfile.ZipFile(path) as archive:
        return {name: archive.read(name) for name in archive.namelist() if not name.endswith("/")}


def shipped_files(path: Path) -> list[str]:
    """The files an artifact ships, its metadata left out, sorted."""
    return sorted(name for name in archive_files(path) if not _METADATA.fullmatch(name))


def content_problems(path: Path) -> list[str]:
    """What is wrong with the files of a built artifact: each file missing or not expected (an sdist
    holds the project files too), a path naming the project's tooling, a file that is not the
    checkout's, a wheel declaring another top-level package than ``pyspark_eos``."""
    files = archive_files(path)
    expected = set(expected_files()) | (set(project_files()) if path.name.endswith(".tar.gz") else set())
    shipped = set(shipped_files(path))
    problems = [f"missing {name}" for name in sorted(expected - shipped)]
    problems += [f"not expected: {name}" for name in sorted(shipped - expected)]
    problems += [f"{name} is the project's tooling" for name in files
                 if TOOLING & {part.removesuffix(".py") for part in name.split("/")}]
    problems += [f"{name} differs from {source.relative_to(_CHECKOUT)}" for source, name in package_files()
                 if name in files and files[name] != source.read_bytes()]
    top_level = [files[name].decode().split() for name in files if name.endswith(".dist-info/top_level.txt")]
    if path.suffix == ".whl" and top_level != [["pyspark_eos"]]:
        problems.append(f"top-level packages {top_level}, not pyspark_eos alone")
    return [f"{path.name}: {problem}" for problem in problems]


def declared_versions(dist: Distribution) -> dict[str, str]:
    """The version each artifact states, by where it states it: each has to be ``__version__``."""
    versions = {"wheel metadata": _metadata_version(dist.wheel, r"[^/]+\.dist-info/METADATA"),
                "sdist PKG-INFO": _metadata_version(dist.sdist, r"PKG-INFO"),
                "jar manifest": _manifest(dist.jar).get("Implementation-Version", "none"),
                "Maven coordinates": MAVEN_COORDINATES.rsplit(":", 1)[1],
                "Maven pom": ", ".join(_pom_version(pom) for pom in _poms(dist.maven_repository)) or "none"}
    for artifact in (dist.wheel, dist.sdist, dist.zip, dist.jar):
        versions[f"pyspark_eos.__version__ in {artifact.name}"] = _version_module(artifact)
    return versions


def _metadata_version(path: Path, name: str) -> str:
    (text,) = [content for member, content in archive_files(path).items() if re.fullmatch(name, member)]
    return email.parser.BytesParser().parsebytes(text)["Version"]


def _manifest(jar: Path) -> dict[str, str]:
    lines = archive_files(jar)["META-INF/MANIFEST.MF"].decode().splitlines()
    return dict(line.split(": ", 1) for line in lines if ": " in line)


def _poms(repository: Path) -> list[Path]:
    """The artifact's poms in the Maven repository, one per version deployed there."""
    return sorted(repository.joinpath(*MAVEN_GROUP.split("."), MAVEN_ARTIFACT).glob("*/*.pom"))


def _pom_version(pom: Path) -> str:
    return ElementTree.parse(pom).getroot().findtext("{http://maven.apache.org/POM/4.0.0}version", "none")


def _version_module(path: Path) -> str:
    """``__version__`` as the version module an artifact ships assigns it."""
    tree = ast.parse(archive_files(path)["pyspark_eos/version.py"])
    (value,) = [node.value for node in tree.body if isinstance(node, ast.Assign)
                and [target.id for target in node.targets if isinstance(target, ast.Name)] == ["__version__"]]
    return ast.literal_eval(value)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m devtools.distribution", description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path, default=_CHECKOUT / "dist", help="output directory (default: dist/)")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(message)s", datefmt="%H:%M:%S")
    built = build(args.out)
    print(f"wheel            {built.wheel}")
    print(f"sdist            {built.sdist}")
    print(f"--py-files       {built.zip}")
    print(f"--packages       {built.maven_coordinates}")
    print(f"--repositories   {built.maven_repository.as_uri()}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
