"""``make release``: build what a release ships, afresh, and check it before the release is tagged.

The steps, in order; the first that fails ends the run, and the summary lists the rest as not run:

1. build: the wheel, the sdist (the wheel is built from it), the ``--py-files`` zip, the jar and
   the Maven repository holding it, into ``dist/`` (devtools/distribution.py);
2. versions: every artifact states ``pyspark_eos.__version__`` (the wheel's and the sdist's
   metadata, the jar's manifest, the Maven pom and coordinates, the version module each ships),
   CHANGELOG.md has a dated entry for it below its Unreleased section, and tests/upgrade_fixtures/
   holds the state this version writes (devtools/upgrade_fixtures.py);
3. twine: ``twine check --strict`` on the wheel and the sdist (their metadata and description);
4. contents: each artifact ships the package, its test kit and the conf/ files the kit reads, as
   they are in the checkout, and nothing of the project's tooling;
5. installed wheel: the release tests of tests/test_distribution.py, which install the wheel with
   pip into a fresh virtual environment and run an exactly-once pipeline from it with
   spark-submit against an embedded broker;
6. release tests: ``make release-tests``, less the tests step 5 ran.

    python -m devtools.release [--skip-release-tests] [-- PYTEST_ARGS...]
"""
from __future__ import annotations

import argparse
import fcntl
import logging
import re
import subprocess
import sys
import time
import traceback
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

from pyspark_eos import __version__

from . import distribution
from .upgrade_fixtures import fixture_versions

CHECKOUT = Path(__file__).resolve().parents[1]
CHANGELOG = CHECKOUT / "CHANGELOG.md"
# Where make dist builds: the tests of steps 5 and 6 take the artifacts from there.
DIST = CHECKOUT / "dist"
UNRELEASED = "Unreleased"
# A version's section: "## [1.2.0] - 2027-01-02", or "## [Unreleased]".
_SECTION = re.compile(r"^## \[(?P<version>[^\]]+)\](?: - (?P<date>\d{4}-\d{2}-\d{2}))?\s*$", re.MULTILINE)
# The tests of step 5: those of this module marked release.
INSTALLED_WHEEL_TESTS = "tests/test_distribution.py"


def changelog_sections(text: str) -> dict[str, str | None]:
    """The versions CHANGELOG.md has a section for, newest first, each with its date (None: undated)."""
    return {match["version"]: match["date"] for match in _SECTION.finditer(text)}


def changelog_problems(version: str, text: str) -> list[str]:
    """What keeps CHANGELOG.md from being released as ``version``: it must open with an Unreleased
    section (where the next changes go), then the version's dated entry."""
    sections = list(changelog_sections(text).items())
    problems = [] if sections[:1] == [(UNRELEASED, None)] else [f"CHANGELOG.md does not open with a [{UNRELEASED}] section"]
    if (version, None) in sections:
        problems.append(f"CHANGELOG.md's entry for {version} has no date (## [{version}] - YYYY-MM-DD)")
    elif version not in dict(sections):
        problems.append(f"CHANGELOG.md has no entry for {version}: move what Unreleased lists into "
                        f"## [{version}] - YYYY-MM-DD")
    return problems


def fixture_problems(version: str) -> list[str]:
    """The next version's upgrade test continues from this one's state: it must be kept."""
    if version in fixture_versions():
        return []
    return [f"tests/upgrade_fixtures/{version} is missing: write this release's state for the next version's "
            f"upgrade test (python -m devtools.upgrade_fixtures --ref HEAD --version {version}) and commit it"]


# ------------------------------------------------------------------------------------- steps

@dataclass
class Step:
    name: str
    run: Callable[[], list[str]]  # the problems found; an exception is one too


@dataclass
class Outcome:
    step: str
    verdict: str  # ok, FAILED or not run
    seconds: float = 0.0
    problems: list[str] = field(default_factory=list)


def run_steps(steps: list[Step]) -> list[Outcome]:
    """Each step in turn, with its progress and outcome printed, until one fails."""
    outcomes = []
    for number, step in enumerate(steps, 1):
        if outcomes and outcomes[-1].verdict != "ok":
            outcomes.append(Outcome(step.name, "not run"))
            continue
        print(f"\n==> [{number}/{len(steps)}] {step.name}", flush=True)
        outcome = _run_step(step)
        for problem in outcome.problems:
            print(f"    {problem}")
        print(f"==> [{number}/{len(steps)}] {step.name}: {outcome.verdict} in {outcome.seconds:.0f} s", flush=True)
        outcomes.append(outcome)
    return outcomes


def _run_step(step: Step) -> Outcome:
    started = time.monotonic()
    try:
        problems = step.run()
    except Exception as error:  # the summary still comes: a release tool reports, it does not crash
        traceback.print_exc()
        problems = [f"{type(error).__name__}: {error}"]
    return Outcome(step.name, "FAILED" if problems else "ok", time.monotonic() - started, problems)


def summary(outcomes: list[Outcome], seconds: float) -> str:
    verdict = "ready" if all(outcome.verdict == "ok" for outcome in outcomes) else "NOT ready"
    width = max(len(outcome.step) for outcome in outcomes)
    lines = [f"eos-kafka {__version__}: {verdict} for release ({seconds:.0f} s)"]
    lines += [f"  {outcome.step:<{width}}  {outcome.verdict:<7}  {outcome.seconds:5.0f} s" for outcome in outcomes]
    return "\n".join(lines)


class Release:
    """The steps of one release build, sharing what step 1 built."""

    def __init__(self, pytest_args: list[str]):
        self.pytest_args = pytest_args
        self.dist: distribution.Distribution | None = None

    def steps(self, release_tests: bool) -> list[Step]:
        steps = [Step("build", self.build), Step("versions", self.versions), Step("twine", self.twine),
                 Step("contents", self.contents), Step("installed wheel", self.installed_wheel)]
        return steps + ([Step("release tests", self.release_tests)] if release_tests else [])

    def build(self) -> list[str]:
        DIST.mkdir(parents=True, exist_ok=True)
        # make dist's lock: test processes that run make dist meanwhile wait for this build instead
        # of building beside it, and .built then tells make that dist/ is current.
        with open(DIST / ".lock", "a") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)
            self.dist = distribution.build(DIST)
            (DIST / ".built").touch()
        for artifact in self.artifacts():
            print(f"    {artifact.relative_to(DIST.parent)}  {artifact.stat().st_size // 1024} KiB")
        return []

    def artifacts(self) -> list[Path]:
        return [self.dist.wheel, self.dist.sdist, self.dist.zip, self.dist.jar]

    def versions(self) -> list[str]:
        declared = distribution.declared_versions(self.dist)
        width = max(map(len, declared))
        for where, version in declared.items():
            print(f"    {where:<{width}}  {version}")
        problems = [f"{where} states {version}, not {__version__} (pyspark_eos/version.py)"
                    for where, version in declared.items() if version != __version__]
        return problems + changelog_problems(__version__, CHANGELOG.read_text()) + fixture_problems(__version__)

    def twine(self) -> list[str]:
        return _command("twine check", [sys.executable, "-m", "twine", "--no-color", "check", "--strict",
                                        str(self.dist.wheel), str(self.dist.sdist)])

    def contents(self) -> list[str]:
        for artifact in self.artifacts():
            print(f"    {artifact.name}: {len(distribution.shipped_files(artifact))} files")
        return [problem for artifact in self.artifacts() for problem in distribution.content_problems(artifact)]

    def installed_wheel(self) -> list[str]:
        return _command("pytest", [sys.executable, "-m", "pytest", "-m", "release", "-p", "no:cacheprovider",
                                   *self.pytest_args, INSTALLED_WHEEL_TESTS])

    def release_tests(self) -> list[str]:
        arguments = " ".join([f"--ignore={INSTALLED_WHEEL_TESTS}", *self.pytest_args])
        return _command("make release-tests", ["make", "--no-print-directory", "release-tests",
                                               f"PYTEST_ARGS={arguments}"])


def _command(what: str, command: list[str]) -> list[str]:
    """Runs ``command`` in the checkout, its output going to the terminal; its failure as a problem."""
    print(f"    $ {' '.join(command)}", flush=True)
    returncode = subprocess.run(command, cwd=CHECKOUT).returncode
    return [] if returncode == 0 else [f"{what} exited with {returncode}: its output is above"]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m devtools.release", description=__doc__.split("\n\n")[0])
    parser.add_argument("--skip-release-tests", action="store_true",
                        help="stop after step 5: build and check the artifacts, without make release-tests")
    parser.add_argument("pytest_args", nargs="*", help="more pytest arguments for steps 5 and 6 (after --)")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="    %(asctime)s %(message)s", datefmt="%H:%M:%S")
    started = time.monotonic()
    release = Release(args.pytest_args)
    outcomes = run_steps(release.steps(release_tests=not args.skip_release_tests))
    print("\n" + summary(outcomes, time.monotonic() - started))
    return 0 if all(outcome.verdict == "ok" for outcome in outcomes) else 1


if __name__ == "__main__":
    sys.exit(main())
