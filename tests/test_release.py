"""What ``make release`` relies on, checked quickly in every ``make test``: the changelog has an
entry for the version, the checks of an artifact's contents find what is wrong, and the release's
steps stop at the first failure and say so. The whole of ``make release`` builds and checks the
real artifacts (test_distribution.py checks them too)."""
from __future__ import annotations

import zipfile

import pytest

import pyspark_eos
from devtools.distribution import KIT_CONF, content_problems, expected_files, write_archive
from devtools.release import (CHANGELOG, UNRELEASED, Step, changelog_problems, changelog_sections, fixture_problems,
                              run_steps, summary)
from pyspark_eos import errors

from .virtualenvs import CHECKOUT


def test_the_changelog_opens_with_unreleased_then_the_versions_entry():
    text = CHANGELOG.read_text()
    assert changelog_problems(pyspark_eos.__version__, text) == []
    sections = changelog_sections(text)
    assert list(sections)[:2] == [UNRELEASED, pyspark_eos.__version__]
    assert all(date for version, date in sections.items() if version != UNRELEASED)


def test_the_changelog_announces_every_error_class():
    text = CHANGELOG.read_text()
    names = [name for name, value in vars(errors).items() if isinstance(value, type) and issubclass(value, Exception)]
    assert len(names) > 10 and [name for name in names if f"`{name}`" not in text] == []


@pytest.mark.parametrize("text, problem", [
    ("## [1.2.0] - 2027-01-02\n", "does not open with a [Unreleased] section"),
    ("## [Unreleased]\n\n## [1.1.0] - 2026-12-01\n", "has no entry for 1.2.0"),
    ("## [Unreleased]\n\n## [1.2.0]\n", "entry for 1.2.0 has no date"),
])
def test_a_changelog_not_ready_for_the_version_is_named(text, problem):
    assert [p for p in changelog_problems("1.2.0", text) if problem in p], changelog_problems("1.2.0", text)


def test_a_release_without_its_upgrade_fixtures_is_not_ready():
    assert fixture_problems(pyspark_eos.__version__) == []
    assert fixture_problems("9.9.9") == [
        "tests/upgrade_fixtures/9.9.9 is missing: write this release's state for the next version's upgrade test "
        "(python -m devtools.upgrade_fixtures --ref HEAD --version 9.9.9) and commit it"]


def test_the_pages_a_release_follows_point_at_the_changelog_and_the_promise():
    compatibility = (CHECKOUT / "docs" / "compatibility.md").read_text()
    assert "## What a version promises" in compatibility and "(../CHANGELOG.md)" in compatibility
    readme = (CHECKOUT / "README.md").read_text()
    before_a_release = readme.split("### Before a release", 1)[1].split("\n### ", 1)[0]
    assert "`make release`" in before_a_release and "(CHANGELOG.md)" in before_a_release


def test_the_content_check_finds_a_missing_module_tooling_and_a_changed_conf_file(tmp_path):
    built = write_archive(tmp_path / "pyspark_eos-test.zip")
    assert content_problems(built) == []
    tampered = tmp_path / "pyspark_eos-tampered.zip"
    with zipfile.ZipFile(built) as original, zipfile.ZipFile(tampered, "w") as copy:
        for name in original.namelist():
            if name == "pyspark_eos/errors.py":
                continue
            conf = name == f"pyspark_eos/testing/conf/{KIT_CONF[0]}"
            copy.writestr(name, original.read(name) + (b"\n# changed" if conf else b""))
        copy.writestr("tests/test_units.py", "")
    assert content_problems(tampered) == [
        f"{tampered.name}: missing pyspark_eos/errors.py",
        f"{tampered.name}: not expected: tests/test_units.py",
        f"{tampered.name}: tests/test_units.py is the project's tooling",
        f"{tampered.name}: pyspark_eos/testing/conf/{KIT_CONF[0]} differs from conf/{KIT_CONF[0]}",
    ]
    assert "pyspark_eos/errors.py" in expected_files()


def test_the_steps_stop_at_the_first_failure_and_the_summary_says_so(capsys):
    ran = []

    def step(name, problems=(), error=None):
        def run():
            ran.append(name)
            if error:
                raise error
            return list(problems)
        return Step(name, run)

    outcomes = run_steps([step("build"), step("versions", ["wheel metadata states 9.9, not 1.0"]), step("twine")])
    assert ran == ["build", "versions"]
    assert [(o.step, o.verdict) for o in outcomes] == [("build", "ok"), ("versions", "FAILED"), ("twine", "not run")]
    printed = capsys.readouterr().out
    assert "==> [2/3] versions: FAILED" in printed and "wheel metadata states 9.9, not 1.0" in printed
    text = summary(outcomes, 12.0)
    assert text.splitlines()[0] == f"eos-kafka {pyspark_eos.__version__}: NOT ready for release (12 s)"
    assert "twine" in text.splitlines()[3] and "not run" in text.splitlines()[3]
    crashed = run_steps([step("contents", error=OSError("no such file: dist/x.whl"))])
    assert crashed[0].verdict == "FAILED" and crashed[0].problems == ["OSError: no such file: dist/x.whl"]
